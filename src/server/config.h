// kvtierd's configuration: a TOML file, the embedded default, and the Store options it maps to.
//
// Precedence: the embedded default (kDefaultConfigToml), then the file given with --config
// (keys it sets replace the default's), then command-line flags. Thread-safe once built
// (const).

#ifndef KVTIER_SERVER_CONFIG_H_
#define KVTIER_SERVER_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/options.h"
#include "kvtier/status.h"

namespace kvtier::server {

// The configuration `kvtierd` runs with when given no file: localhost only, 1 GiB of DRAM, no
// disk tier, one tenant "default" that local clients reach without a token.
extern const std::string_view kDefaultConfigToml;

struct TenantConfig {
  TenantOptions options;
  // The secret a client presents for this tenant. Empty: the tenant cannot be reached by
  // token (only as the anonymous tenant, or by uid/gid).
  std::string token;
  // An admin API token that acts on this tenant only. Empty: none.
  std::string admin_token;
  // Unix-socket clients whose peer uid (or gid) is listed are this tenant without a token
  // (SO_PEERCRED: the kernel says who they are). A uid or gid belongs to one tenant at most.
  std::vector<uint32_t> unix_uids;
  std::vector<uint32_t> unix_gids;
  // The S3 endpoint's credentials of this tenant (AWS Signature V4): a request signed with this
  // access key id and secret acts as this tenant. Both or neither; an access key id belongs to
  // one tenant.
  std::string s3_access_key;
  std::string s3_secret_key;
};

// Bytes of a Store value that an S3 object's header may take (s3_service.h): the largest
// object is max_block_bytes less this.
inline constexpr uint64_t kS3ObjectHeaderReserve = 4 * kKiB;

// The S3 endpoint ([s3]; docs/protocol.md, "S3"): buckets and objects as kvtier values.
struct S3Config {
  // "host:port"; "" = off (the default).
  std::string listen;
  // The region clients sign for (the credential scope of Signature V4).
  std::string region = "us-east-1";
  // Largest object a PUT may store; 0 = the largest block (store.max_block_bytes) less the
  // object's header. Larger ones are refused (EntityTooLarge) before their body is read.
  uint64_t max_object_bytes = 0;
  // Requests without a signature act as the anonymous tenant ([auth] anonymous_tenant), from
  // local peers only. Off: every request must be signed.
  bool allow_anonymous = false;
  // Most keys one ListObjectsV2 page returns (a client may ask for fewer).
  uint32_t max_list_keys = 1000;
  // Parts of multipart uploads not yet completed are held in kvtierd's memory (outside G2)
  // up to this many bytes over all uploads; a part beyond it is refused (SlowDown).
  uint64_t max_upload_bytes = 1 * kGiB;
  // An upload that receives nothing for this long is aborted (its parts freed).
  uint32_t upload_ttl_seconds = 3600;
  // An object created with If-None-Match: * (a lock, as KVBM and leader elections use them)
  // is pinned, never evicted, until it is deleted or replaced or for this long; then it is an
  // ordinary object. 0 = not pinned (a lock may then be evicted, and taken again).
  uint32_t lock_seconds = 3600;
};

// TLS 1.3 on the TCP listeners ([tls]). Off while cert_file is empty. The Unix socket is never
// encrypted: it is local and guarded by file permissions.
// KV events for KV-aware routers ([events]; src/server/kv_events.h).
struct EventsConfig {
  bool enabled = false;
  // ZMQ PUB endpoint the events go out on (bound).
  std::string endpoint = "tcp://127.0.0.1:5557";
  // ZMQ ROUTER endpoint answering replay requests; "" = no replay.
  std::string replay_endpoint = "tcp://127.0.0.1:5558";
  // Each message's topic is this followed by the tenant's name.
  std::string topic_prefix = "kvtier.";
  // Messages kept for replay.
  uint32_t buffer_steps = 10000;
  // Events waiting to be sent; beyond this they are dropped (and counted).
  uint32_t max_queue = 100000;
  // How long events wait to be batched into one message.
  uint32_t batch_ms = 10;
  // Engine hashes remembered, so that a block's later events (G3, G4, removal) name it as the
  // engine did; about 100 bytes each. 0 = only its G2 BlockStored does.
  uint32_t max_engine_hashes = 262144;
};

struct TlsConfig {
  // PEM certificate chain (server certificate first) and its private key. Both or neither.
  std::string cert_file;
  std::string key_file;
  // PEM CA certificates that client certificates must chain to. Empty: clients are not asked
  // for a certificate.
  std::string ca_file;
  // Refuse clients without a valid certificate. REQUIRES: ca_file.
  bool require_client_cert = false;
  // Which TCP listeners speak TLS (only TLS: a TLS listener refuses plaintext clients).
  bool native = true;
  bool resp = false;
  bool http = false;
  bool s3 = false;

  bool enabled() const { return !cert_file.empty(); }
};

struct ServerConfig {
  // Directory for the Unix socket and (relative) disk tier paths. Created at start.
  std::string data_dir = "./kvtier-data";

  // Listen addresses, "host:port" ("[::1]:7380" for IPv6); port 0 picks a free port. Empty
  // disables the listener.
  std::string native_listen = "127.0.0.1:7380";
  // Path of the native protocol's Unix socket, relative to data_dir unless absolute.
  std::string unix_socket = "kvtierd.sock";
  // Mode of the socket file, octal ("0660"); "" = what the umask leaves. Set before it listens.
  std::string unix_socket_mode;
  // Group of the socket file, a name or a number; "" = kvtierd's.
  std::string unix_socket_group;
  std::string resp_listen = "127.0.0.1:6380";
  std::string http_listen = "127.0.0.1:7381";

  // Event-loop threads; 0 = one per core, at most 8.
  uint32_t threads = 0;
  // Most connections open at once over all listeners; further ones are refused.
  uint32_t max_connections = 4096;
  // A connection that sends and receives nothing for this long is closed. 0 = never.
  uint32_t idle_timeout_seconds = 300;
  // A request must arrive whole within this long of its first byte, plus a second for each
  // min_request_rate bytes of it received: a client that trickles a request (slow uploads,
  // slowloris) is told and closed, however often it sends a byte. 0 = never.
  uint32_t request_timeout_seconds = 60;
  uint64_t min_request_rate = 64 * kKiB;  // Bytes per second; at least 1.
  // Largest native request body and RESP command. Larger ones close the connection with an
  // error. Bounds the input buffer of each connection. 0 = max_block_bytes + 64 KiB.
  uint64_t max_frame_bytes = 0;
  // Most keys in one native request.
  uint32_t max_batch = 4096;
  // Replies queued for a client that reads slowly; above this the server stops reading its
  // requests until it catches up (backpressure). Leased block bytes count too.
  uint64_t max_output_bytes = 64 * kMiB;
  // On SIGTERM, how long to keep flushing replies already computed before closing.
  uint32_t shutdown_grace_seconds = 5;
  // A request that takes longer than this from its first byte received to its reply queued
  // is logged (at most one line a second per event loop) with where the time went: receiving
  // it or handling it. 0 = never.
  uint32_t slow_request_ms = 1000;
  // After a wakeup that brought requests, an event loop goes on polling for more this long
  // (yielding its core between polls) before it sleeps: a client's next request then finds it
  // running instead of waking it, which on a VM costs tens of microseconds (a shared-memory
  // read's request and release, on a 2-core VM: 19-41 us sleeping, 7-8 us polling;
  // docs/protocol.md). It keeps the loop's core busy while its clients keep it busy, and takes
  // CPU from them where they need every core (more client threads than cores). 0 = never.
  uint32_t busy_poll_us = 0;

  // Tenant that clients on loopback or the Unix socket get without authenticating. Empty:
  // every connection must authenticate. Clients from other addresses always must.
  std::string anonymous_tenant = "default";
  // Required as "Authorization: Bearer <token>" for /admin/ endpoints. Empty: the admin API is
  // open to whoever reaches the HTTP listener (keep it on localhost then).
  std::string admin_token;
  // Failed authentications in a row before a peer (an address, a uid) is locked out for
  // auth_lockout_seconds, doubled at each further lockout up to an hour. 0 = no lockouts.
  uint32_t auth_max_failures = 10;
  uint32_t auth_lockout_seconds = 60;

  TlsConfig tls;

  std::vector<TenantConfig> tenants;

  EventsConfig events;

  S3Config s3;

  // Store options from [memory], [disk], [admission] and [store]; tenants are filled in
  // from `tenants` by StoreOptions().
  Options store;

  // [memory] warm_restart: G2 lives in a named file on tmpfs that the next kvtierd adopts.
  bool warm_restart = true;
  // That file; empty = ArenaFile()'s default under /dev/shm.
  std::string arena_file;

  // The Store options with tenants, the disk directory and the arena file resolved.
  Options StoreOptions() const;
  // The G2 arena file this configuration uses ("" = no warm restart).
  std::string ArenaFile() const;
  // data_dir made absolute (symbolic links resolved where it exists).
  std::string AbsoluteDataDir() const;
  // max_frame_bytes with its default applied.
  uint64_t EffectiveMaxFrameBytes() const;
  // s3.max_object_bytes with its default applied.
  uint64_t EffectiveMaxObjectBytes() const;
  // Checks cross-field rules (tenant names unique, tokens unique, anonymous tenant exists,
  // at least one listener). InvalidArgument naming the offending key.
  Status Validate() const;
};

// Parses TOML text into `config`, replacing the fields it sets and keeping the others.
// `origin` names the text in error messages. InvalidArgument for a syntax error, an unknown
// key, or a value of the wrong type or range.
Status ApplyConfigToml(std::string_view toml, std::string_view origin, ServerConfig* config);

// Parses "64", "64KiB", "1GiB", "2 MB" (decimal units too) into bytes.
Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_CONFIG_H_
