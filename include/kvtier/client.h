// Client: the C++ client of kvtierd's native protocol (docs/protocol.md), over TCP or a Unix
// socket.
//
// A Client keeps its connections open and reuses them for every call; a connection that breaks
// is replaced by a new one on the next call. Calls are pipelined: each request carries an id and
// the replies are matched by id, so any number of threads may call one Client at once, and the
// *Async calls return as soon as the request is sent. Nothing throws; errors are Status values
// with the server's codes (Unavailable when the connection failed).
//
// Retries: a call that is safe to repeat (every blocking call but PinMany and UnpinMany) and
// fails with Unavailable, because the connection broke or kvtierd is restarting, is sent again,
// reconnecting as needed, for up to ClientOptions::retry_timeout_ms. Only the items that failed
// are sent again. Blocks are immutable, so a repeated put stores nothing twice; a repeated delete
// may report NotFound for a block the first attempt removed.
//
// No call waits forever: a connection on which a request (or the HELLO) has waited
// ClientOptions::io_timeout_ms without a byte moving either way (a stopped or hung kvtierd, a cut
// link) is closed, and its requests fail Unavailable, hence are retried as above.
//
// Thread safety: every method may be called concurrently. Lifetime: futures returned by *Async
// calls are fulfilled (with Unavailable if need be) before the Client's destructor returns.

#ifndef KVTIER_CLIENT_H_
#define KVTIER_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "kvtier/store.h"

namespace kvtier {

// TLS 1.3 for TCP endpoints (kvtierd's [tls] section). Ignored for Unix sockets.
struct ClientTlsOptions {
  // Speak TLS. A "tls://host:port" endpoint turns it on as well.
  bool enabled = false;
  // PEM file of the CA certificates the server's certificate must chain to. Empty: the
  // system's default trust store.
  std::string ca_file;
  // Check the server's certificate chain and its name. Turning it off makes the connection
  // open to impersonation: for tests only.
  bool verify_peer = true;
  // The name (or IP address) the server's certificate must carry, also sent as SNI. Empty: the
  // endpoint's host.
  std::string server_name;
  // Client certificate and its private key (PEM), for servers with require_client_cert.
  std::string cert_file;
  std::string key_file;
};

struct ClientOptions {
  // Where kvtierd listens: "host:port" or "tcp://host:port" for TCP, "tls://host:port" for TCP
  // with TLS, "unix:/path" or an absolute path for a Unix socket.
  std::string endpoint = "127.0.0.1:7380";
  // The tenant to act for and its token. Both empty: the server's anonymous tenant, which
  // kvtierd grants to local clients in its default configuration.
  std::string tenant;
  std::string token;
  // Shown in the server's logs.
  std::string client_name = "kvtier-cpp";
  // Connections kept open; calls are spread over them round-robin. More connections let
  // large transfers proceed in parallel on a multi-core server.
  uint32_t connections = 1;
  ClientTlsOptions tls;
  // How long a blocking call keeps retrying after Unavailable (see above), waiting
  // retry_backoff_ms after the first failure and twice as long after each next one (at most
  // 1 s). 0: no retries; the first Unavailable is returned.
  uint32_t retry_timeout_ms = 10000;
  uint32_t retry_backoff_ms = 10;
  // How long a request may wait without progress before its connection is given up (see
  // above). 0: no limit. Generous by default, as a server may legitimately take long (a full
  // tier waiting for uploads); engine adapters set seconds.
  uint32_t io_timeout_ms = 120000;
};

// What the server said in its HELLO reply.
struct ServerInfo {
  std::string server;            // "kvtierd 0.1.0".
  std::string tenant;            // The tenant the connection acts for.
  uint64_t features = 0;         // Granted feature bits (docs/protocol.md).
  uint32_t max_frame_bytes = 0;  // Largest request the server accepts.
  uint64_t max_block_bytes = 0;  // Largest value.
  uint32_t max_batch = 0;        // Most keys per request.
};

// The values of a GetMany. values[i] is the i-th key's value, a view into memory this object
// owns (valid while it lives), or its error (NotFound for a miss). Move-only.
struct BlockValues {
  std::vector<Result<std::span<const std::byte>>> values;
  std::vector<std::unique_ptr<std::byte[]>> buffers;  // Backing storage of the views.
};

class Client {
 public:
  // Connects and says HELLO on every connection. Unavailable when the server cannot be
  // reached; Unauthenticated for a wrong tenant or token.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  virtual ~Client() = default;

  virtual const ServerInfo& server_info() const = 0;

  // Round trip without touching the store.
  virtual Status Ping() = 0;

  // Stores blocks (a key already present is left as it is and reports OK). Values are read
  // during the call only. Batches larger than one request allows are split and pipelined.
  // PutOptions/BlockWrite session and dtype travel with each block (docs/protocol.md,
  // PUT_MANY); parent, session and dtype are all optional.
  virtual Status Put(const BlockKey& key, std::span<const std::byte> value,
                     const PutOptions& options = {}) = 0;
  virtual std::vector<Status> PutMany(std::span<const BlockWrite> writes) = 0;

  // Reads blocks. NotFound for a miss.
  virtual Result<std::vector<std::byte>> Get(const BlockKey& key) = 0;
  virtual BlockValues GetMany(std::span<const BlockKey> keys) = 0;
  // Reads each key's value straight from the socket into outs[i] (no copy through a client
  // buffer) and returns its size. NotFound for a miss; OutOfRange when the value is larger than
  // outs[i], which is then not written. After any other failure (the connection may break in
  // the middle of a value) the contents of outs[i] are undefined. REQUIRES: outs.size() ==
  // keys.size(); outs[i] stay valid, and the caller does not touch them, during the call.
  virtual std::vector<Result<size_t>> GetManyInto(std::span<const BlockKey> keys,
                                                  std::span<const std::span<std::byte>> outs) = 0;

  // How many leading keys are present, and in which tier (see Store::LookupPrefix).
  virtual Result<PrefixMatch> LookupPrefix(std::span<const BlockKey> keys) = 0;

  // State beside KV (include/kvtier/state.h, docs/state.md).
  // Stores every write or none (Store::PutAtomic), in one request: at most
  // server_info().max_batch writes and max_frame_bytes in all (InvalidArgument otherwise; put
  // the earlier blocks of a long prompt with PutMany first). Repeated after Unavailable like
  // PutMany (an atomic put stores nothing twice).
  virtual Status PutAtomic(std::span<const BlockWrite> writes) = 0;
  // The longest prefix an engine can resume from (Store::LookupResume), in one request: the
  // keys are not bound by max_batch, only by max_frame_bytes.
  virtual Result<ResumeMatch> LookupResume(std::span<const BlockKey> keys,
                                           const ResumeQuery& query) = 0;
  // For each key, the tier holding it, or nullopt when absent.
  virtual Result<std::vector<std::optional<TierLevel>>> Exists(std::span<const BlockKey> keys) = 0;

  virtual Status Delete(const BlockKey& key) = 0;
  virtual std::vector<Status> DeleteMany(std::span<const BlockKey> keys) = 0;
  // Deletes every block this tenant put with `session` (PutOptions::session), on every tier,
  // and says how many copies went. InvalidArgument for session 0. The server's audit log names
  // the connection's tenant as the actor.
  virtual Result<DeletionReport> DeleteSession(SessionId session) = 0;
  // Tells the server what the caller knows of a session of this tenant (Store::SessionHint:
  // a tool call's expected time, the session's end, its priority); it orders G2's evictions
  // only (Store::SessionHint). The Store's errors (NotFound when no block of the session is in G2);
  // Unimplemented when the server predates hints.
  virtual Status HintSession(SessionId session, const Store::SessionHint& hint) = 0;
  // Deletes every block of the connection's tenant, on every tier. Other tenants are untouched.
  virtual Result<DeletionReport> DeleteAllBlocks() = 0;
  // Makes the tenant's blocks durable (Store::Flush): once it returns OK, every block put and
  // acknowledged before the call survives kill -9 of kvtierd (and power loss with the
  // server's [disk] durability = "synced"), unless deleted or evicted before the call.
  // Returns how many blocks it wrote to G3; FailedPrecondition when the server has no G3.
  virtual Result<uint64_t> Flush() = 0;
  virtual std::vector<Status> PinMany(std::span<const BlockKey> keys) = 0;
  virtual std::vector<Status> UnpinMany(std::span<const BlockKey> keys) = 0;
  // A hint that these blocks will be read soon. Accepted; the server does not act on it yet.
  virtual Status Prefetch(std::span<const BlockKey> keys) = 0;

  // Statistics of this connection's tenant.
  virtual Result<TenantStats> Stats() = 0;

  // Pipelined forms: the request is written before the call returns (so values may be freed
  // then); the future becomes ready when the reply arrives. A batch must fit in one request
  // (at most server_info().max_batch keys and max_frame_bytes of values); otherwise every
  // item fails with InvalidArgument. A GetManyAsync item whose value did not fit in the reply
  // is ResourceExhausted (GetMany asks for it again by itself).
  virtual std::future<std::vector<Status>> PutManyAsync(std::span<const BlockWrite> writes) = 0;
  virtual std::future<BlockValues> GetManyAsync(std::span<const BlockKey> keys) = 0;
  virtual std::future<Result<PrefixMatch>> LookupPrefixAsync(std::span<const BlockKey> keys) = 0;
};

}  // namespace kvtier

#endif  // KVTIER_CLIENT_H_
