#include "src/server/config.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <set>
#include <span>
#include <utility>

#include <toml++/toml.h>

#include "src/common/checksum.h"
#include "src/server/net.h"

namespace kvtier::server {

const std::string_view kDefaultConfigToml = R"(# kvtierd configuration (TOML). Every key is optional; these are the defaults.
# Sizes are integers (bytes) or strings with a unit: "64KiB", "1GiB", "500MB".

# Holds the Unix socket and, when [disk] dir is relative, the disk tier.
data_dir = "./kvtier-data"

[server]
native_listen = "127.0.0.1:7380"   # kvtier native protocol over TCP ("" = off, port 0 = any)
unix_socket = "kvtierd.sock"       # native protocol over a Unix socket, under data_dir ("" = off)
unix_socket_mode = ""              # e.g. "0660": who may connect ("" = as the umask leaves it)
unix_socket_group = ""             # group of the socket file, name or id ("" = kvtierd's)
resp_listen = "127.0.0.1:6380"     # RESP2 (Redis protocol) subset ("" = off)
http_listen = "127.0.0.1:7381"     # /metrics, /healthz, /admin/ ("" = off)
threads = 0                        # event-loop threads; 0 = one per core, at most 8
max_connections = 4096
idle_timeout_seconds = 300         # close connections silent this long; 0 = never
request_timeout_seconds = 60       # a request must arrive whole within this long of its first byte,
min_request_rate = "64KiB"         # ... plus a second per this many bytes of it received; 0 = never
max_frame_bytes = 0                # largest request; 0 = max_block_bytes + 64KiB
max_batch = 4096                   # most keys in one native request
max_output_bytes = "64MiB"         # replies queued per connection before reading pauses
shutdown_grace_seconds = 5         # on SIGTERM, time to flush replies already computed
slow_request_ms = 1000             # log requests slower than this (receiving + handling); 0 = never
busy_poll_us = 0                   # after requests, poll this long for more before sleeping; 0 = never

[auth]
# Clients on loopback or the Unix socket that do not authenticate act as this tenant.
# "" = every client must present a tenant token. Remote clients always must.
anonymous_tenant = "default"
admin_token = ""                   # if set, /admin/ needs "Authorization: Bearer <token>"
max_failures = 10                  # failed authentications in a row before a peer is locked out
lockout_seconds = 60               # first lockout; doubled at each further one, up to an hour

[tls]
# TLS 1.3 (only) on the TCP listeners; off while cert_file is "". The Unix socket stays
# plaintext (local; file permissions guard it). With TLS off, keep the listeners on loopback:
# tokens would otherwise cross the network in the clear. Flags: --tls-cert, --tls-key, --tls-ca,
# --tls-require-client-cert.
cert_file = ""                     # PEM certificate chain, server certificate first
key_file = ""                      # PEM private key of that certificate
ca_file = ""                       # PEM CAs for client certificates ("" = none requested)
require_client_cert = false        # refuse clients without a valid certificate (needs ca_file)
native = true                      # which TCP listeners speak TLS when it is on
resp = false
http = false
s3 = false

[s3]                               # S3-compatible endpoint (Dynamo KVBM G4, NIXL OBJ, boto3)
listen = ""                        # "host:port" ("" = off); port 0 = any
region = "us-east-1"               # the region clients sign for (SigV4 credential scope)
max_object_bytes = 0               # largest object; 0 = [store] max_block_bytes less a small header
allow_anonymous = false            # unsigned requests from local peers act as [auth] anonymous_tenant
max_list_keys = 1000               # most keys in one ListObjectsV2 page
max_upload_bytes = "1GiB"          # parts of unfinished multipart uploads held in memory, at most
upload_ttl_seconds = 3600          # an upload idle this long is aborted
lock_seconds = 3600                # objects created with If-None-Match: * stay pinned this long

[events]                           # KV events (vLLM's wire format) for KV-aware routers
enabled = false
endpoint = "tcp://127.0.0.1:5557"  # ZMQ PUB: multipart (topic, 8-byte big-endian seq, msgpack batch)
replay_endpoint = "tcp://127.0.0.1:5558"  # ZMQ ROUTER for missed sequence numbers ("" = off)
topic_prefix = "kvtier."           # topic = prefix + tenant name
buffer_steps = 10000               # messages kept for replay
max_queue = 100000                 # events waiting to be sent; more are dropped and counted
batch_ms = 10                      # how long events wait to share one message
max_engine_hashes = 262144         # engine block hashes remembered for a block's later events

[memory]                           # G2: host DRAM
capacity = "1GiB"
page_bytes = "4KiB"
prefault = false                   # true: take a block's pages when it is allocated, not at the first write
warm_restart = true                # keep G2 across a clean restart: the next kvtierd adopts it
arena_file = ""                    # "" = /dev/shm/kvtier-g2-<hash of data_dir>; hugetlbfs for huge pages

[disk]                             # G3: local NVMe; off while dir is ""
dir = "disk"                       # relative to data_dir; "" turns G3 off
capacity = "16GiB"                 # an upper bound: segments are created as data arrives
segment_bytes = "256MiB"
durability = "written"             # "written" (survives kill -9) or "synced" (power loss)
use_io_uring = true
compress = true                    # lossless KV compression of records (byte planes + zstd)
encrypt = false                    # AES-256-GCM per tenant key; needs [security] master_key

[shared]                           # G4: storage the cluster shares; off while location is ""
location = ""                      # "/mnt/nfs/kvtier", "file:/path" or "s3://bucket"
s3_endpoint = ""                   # e.g. "http://127.0.0.1:4568", "https://s3.us-east-1.amazonaws.com"
s3_region = ""                     # "" = $AWS_REGION, else "us-east-1"
s3_path_style = true               # false = virtual-host style (bucket.host)
s3_check_before_put = false        # no conditional create: HEAD first, skip existing blocks
s3_connect_timeout_ms = 3000       # bounds on each S3 request: a slow or cut link fails G4
s3_request_timeout_ms = 30000      #   calls within about (retries + 1) x timeout, never hangs
s3_max_retries = 3                 # retries of timeouts, resets, 429 and 5xx, with backoff
s3_multipart_threshold = "32MiB"   # larger objects go up as multipart uploads...
s3_multipart_part = "8MiB"         # ...in parts of this size (at least 5MiB), in parallel
s3_access_key = ""                 # "" = $AWS_ACCESS_KEY_ID (and $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN)
s3_secret_key = ""
node_id = ""                       # this node's unique name; "" = hostname-pid
write_policy = "on_demotion"       # "on_put" (upload every put at once) or "on_demotion"
upload_buffer = "256MiB"           # on_demotion: copies of blocks out of G2 awaiting upload; more are dropped
promote_on_hit = true              # copy G4 hits into G2
exists_cache_ms = 1000             # reuse a G4 existence check that found a block this long
capacity = 0                       # bytes of G4 for this root/bucket; 0 = no limit
tenant_quota = 0                   # bytes per tenant; 0 = no limit
ttl_seconds = 0                    # delete objects idle this long; 0 = never
janitor_interval_seconds = 60      # housekeeping pass (by the node holding the lease); 0 = off here
janitor_lease_seconds = 60         # a dead janitor's lease is taken over after this (+1/6)
notice_poll_ms = 2000              # apply the other nodes' deletions this often; 0 = never
notice_margin_seconds = 300        # node clocks must agree this closely
notice_retention_seconds = 604800  # deletion notices kept; a node away longer empties its G2/G3
report_ms = 10000                  # write this node's G4 traffic to G4 for every dashboard; 0 = never
sync = true                        # fsync objects before publishing (shared file systems)
compress = true
encrypt = false                    # needs [security] master_key; the data keys then live in G4

[security]
master_key = ""                    # "file:/path/to/key" (64 hex digits, mode 0600) or "env:VARIABLE"
keystore_dir = ""                  # wrapped per-tenant data keys, unless in G4; "" = the disk tier's dir
audit_log = "audit.log"            # JSON lines of deletions, shreds, key changes; under data_dir; "" = off

[admission]                        # which G2 evictions are written to G3
min_prefix_blocks = 0
frequency_gate = true
min_accesses = 2

[store]
max_block_bytes = "64MiB"
promote_on_hit = true
retention_scan_seconds = 60        # background removal of expired blocks; 0 = only on access

[[tenants]]
name = "default"
token = ""                         # secret clients present for this tenant ("" = none)
admin_token = ""                   # admin API token for this tenant only ("" = none)
unix_uids = []                     # Unix-socket peers with these uids (or names) are this
unix_gids = []                     #   tenant without a token; likewise these gids
s3_access_key = ""                 # S3 endpoint: requests signed (SigV4) with this key pair
s3_secret_key = ""                 #   act as this tenant ("" = none)
memory_budget = 0                  # bytes of G2; 0 = no limit
disk_budget = 0                    # bytes of G3; 0 = no limit
ttl_seconds = 0                    # expire blocks idle this long; 0 = never
max_age_seconds = 0                # expire blocks this long after they were stored; 0 = never
)";

Result<uint64_t> ParseByteSize(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  uint64_t value = 0;
  size_t digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (value > (UINT64_MAX - 9) / 10) return Status::InvalidArgument("size out of range");
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0) return Status::InvalidArgument("size must start with a number: '" + std::string(text) + "'");
  while (i < text.size() && text[i] == ' ') ++i;
  std::string unit;
  for (; i < text.size(); ++i) unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))));
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"", 1},          {"b", 1},
      {"k", kKiB},      {"kib", kKiB},         {"kb", 1000},
      {"m", kMiB},      {"mib", kMiB},         {"mb", 1000 * 1000},
      {"g", kGiB},      {"gib", kGiB},         {"gb", 1000 * 1000 * 1000},
      {"t", kGiB * 1024}, {"tib", kGiB * 1024}, {"tb", 1000ull * 1000 * 1000 * 1000},
  };
  for (const auto& [name, multiplier] : kUnits) {
    if (unit == name) {
      if (value > UINT64_MAX / multiplier) return Status::InvalidArgument("size out of range");
      return value * multiplier;
    }
  }
  return Status::InvalidArgument("unknown size unit '" + unit + "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
}

namespace {

// Reads typed values out of one TOML table, remembering errors and the keys it saw so that
// unknown keys (typos) are reported instead of ignored.
class TableReader {
 public:
  TableReader(const toml::table* table, std::string path, Status* error)
      : table_(table), path_(std::move(path)), error_(error) {}

  void String(const char* key, std::string* out) {
    const toml::node* n = Find(key);
    if (n == nullptr) return;
    if (auto v = n->value<std::string>()) {
      *out = *v;
    } else {
      Fail(key, "a string");
    }
  }
  void Bool(const char* key, bool* out) {
    const toml::node* n = Find(key);
    if (n == nullptr) return;
    if (auto v = n->value<bool>()) {
      *out = *v;
    } else {
      Fail(key, "true or false");
    }
  }
  template <typename T>
  void Uint(const char* key, T* out) {
    const toml::node* n = Find(key);
    if (n == nullptr) return;
    auto v = n->value<int64_t>();
    if (!v || *v < 0 || static_cast<uint64_t>(*v) > std::numeric_limits<T>::max()) {
      Fail(key, "a non-negative integer in range");
      return;
    }
    *out = static_cast<T>(*v);
  }
  template <typename T>
  void Size(const char* key, T* out) {
    const toml::node* n = Find(key);
    if (n == nullptr) return;
    uint64_t bytes = 0;
    if (auto i = n->value<int64_t>(); i && *i >= 0) {
      bytes = static_cast<uint64_t>(*i);
    } else if (auto s = n->value<std::string>()) {
      Result<uint64_t> parsed = ParseByteSize(*s);
      if (!parsed.ok()) {
        SetError(std::string(parsed.status().message()));
        return;
      }
      bytes = *parsed;
    } else {
      Fail(key, "a size (bytes, or a string such as \"1GiB\")");
      return;
    }
    if (bytes > std::numeric_limits<T>::max()) {
      Fail(key, "a smaller size");
      return;
    }
    *out = static_cast<T>(bytes);
  }
  // An array of user or group ids: numbers, or names looked up with `resolve` (UserIdOf,
  // GroupIdOf), which returns nullopt for an unknown name.
  void IdList(const char* key, std::vector<uint32_t>* out,
              std::optional<uint32_t> (*resolve)(const std::string&)) {
    const toml::node* n = Find(key);
    if (n == nullptr) return;
    const toml::array* list = n->as_array();
    if (list == nullptr) {
      Fail(key, "an array of ids or names");
      return;
    }
    out->clear();
    for (const toml::node& item : *list) {
      std::optional<uint32_t> id;
      if (auto v = item.value<int64_t>(); v && *v >= 0 && *v <= UINT32_MAX) {
        id = static_cast<uint32_t>(*v);
      } else if (auto name = item.value<std::string>()) {
        id = resolve(*name);
      }
      if (!id) {
        SetError(path_ + "." + key + ": '" +
                 (item.value<std::string>() ? *item.value<std::string>() : std::string("?")) +
                 "' is neither an id nor a known name");
        return;
      }
      out->push_back(*id);
    }
  }
  // A string naming one of `choices` ("name" and the value it stands for), e.g. an enum value.
  template <typename T>
  void Choice(const char* key, std::initializer_list<std::pair<const char*, T>> choices, T* out) {
    std::string name;
    String(key, &name);
    if (name.empty()) return;
    std::string expected;
    for (const auto& [choice, value] : choices) {
      if (name == choice) {
        *out = value;
        return;
      }
      expected += std::string(expected.empty() ? "" : " or ") + "\"" + choice + "\"";
    }
    Fail(key, expected.c_str());
  }
  // Reports keys of the table that no accessor asked for.
  void RejectUnknown() {
    if (table_ == nullptr) return;
    for (const auto& [key, node] : *table_) {
      if (!seen_.count(std::string(key.str()))) {
        SetError("unknown key '" + Qualified(std::string(key.str())) + "'");
      }
    }
  }
  void Expect(const char* key) { seen_.insert(key); }

 private:
  const toml::node* Find(const char* key) {
    seen_.insert(key);
    return table_ == nullptr ? nullptr : table_->get(key);
  }
  std::string Qualified(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  void Fail(const char* key, const char* expected) {
    SetError("'" + Qualified(key) + "' must be " + expected);
  }
  void SetError(std::string message) {
    if (error_->ok()) *error_ = Status::InvalidArgument(message);
  }

  const toml::table* table_;
  std::string path_;
  Status* error_;
  std::set<std::string> seen_;
};

void ApplyTable(const toml::table& root, ServerConfig* c, Status* error) {
  TableReader top(&root, "", error);
  top.String("data_dir", &c->data_dir);
  for (const char* section : {"server", "auth", "tls", "s3", "events", "memory", "disk", "shared",
                              "security", "admission", "store", "tenants"}) {
    top.Expect(section);
  }
  top.RejectUnknown();

  TableReader server(root["server"].as_table(), "server", error);
  server.String("native_listen", &c->native_listen);
  server.String("unix_socket", &c->unix_socket);
  server.String("unix_socket_mode", &c->unix_socket_mode);
  server.String("unix_socket_group", &c->unix_socket_group);
  server.String("resp_listen", &c->resp_listen);
  server.String("http_listen", &c->http_listen);
  server.Uint("threads", &c->threads);
  server.Uint("max_connections", &c->max_connections);
  server.Uint("idle_timeout_seconds", &c->idle_timeout_seconds);
  server.Uint("request_timeout_seconds", &c->request_timeout_seconds);
  server.Size("min_request_rate", &c->min_request_rate);
  server.Uint("slow_request_ms", &c->slow_request_ms);
  server.Uint("busy_poll_us", &c->busy_poll_us);
  server.Size("max_frame_bytes", &c->max_frame_bytes);
  server.Uint("max_batch", &c->max_batch);
  server.Size("max_output_bytes", &c->max_output_bytes);
  server.Uint("shutdown_grace_seconds", &c->shutdown_grace_seconds);
  server.RejectUnknown();

  TableReader auth(root["auth"].as_table(), "auth", error);
  auth.String("anonymous_tenant", &c->anonymous_tenant);
  auth.String("admin_token", &c->admin_token);
  auth.Uint("max_failures", &c->auth_max_failures);
  auth.Uint("lockout_seconds", &c->auth_lockout_seconds);
  auth.RejectUnknown();

  TableReader tls(root["tls"].as_table(), "tls", error);
  tls.String("cert_file", &c->tls.cert_file);
  tls.String("key_file", &c->tls.key_file);
  tls.String("ca_file", &c->tls.ca_file);
  tls.Bool("require_client_cert", &c->tls.require_client_cert);
  tls.Bool("native", &c->tls.native);
  tls.Bool("resp", &c->tls.resp);
  tls.Bool("http", &c->tls.http);
  tls.Bool("s3", &c->tls.s3);
  tls.RejectUnknown();

  TableReader s3(root["s3"].as_table(), "s3", error);
  s3.String("listen", &c->s3.listen);
  s3.String("region", &c->s3.region);
  s3.Size("max_object_bytes", &c->s3.max_object_bytes);
  s3.Bool("allow_anonymous", &c->s3.allow_anonymous);
  s3.Uint("max_list_keys", &c->s3.max_list_keys);
  s3.Size("max_upload_bytes", &c->s3.max_upload_bytes);
  s3.Uint("upload_ttl_seconds", &c->s3.upload_ttl_seconds);
  s3.Uint("lock_seconds", &c->s3.lock_seconds);
  s3.RejectUnknown();

  TableReader events(root["events"].as_table(), "events", error);
  events.Bool("enabled", &c->events.enabled);
  events.String("endpoint", &c->events.endpoint);
  events.String("replay_endpoint", &c->events.replay_endpoint);
  events.String("topic_prefix", &c->events.topic_prefix);
  events.Uint("buffer_steps", &c->events.buffer_steps);
  events.Uint("max_queue", &c->events.max_queue);
  events.Uint("batch_ms", &c->events.batch_ms);
  events.Uint("max_engine_hashes", &c->events.max_engine_hashes);
  events.RejectUnknown();

  TableReader memory(root["memory"].as_table(), "memory", error);
  memory.Size("capacity", &c->store.memory.capacity_bytes);
  memory.Size("page_bytes", &c->store.memory.page_bytes);
  memory.Bool("prefault", &c->store.memory.prefault);
  memory.Bool("warm_restart", &c->warm_restart);
  memory.String("arena_file", &c->arena_file);
  memory.RejectUnknown();

  TableReader disk(root["disk"].as_table(), "disk", error);
  disk.String("dir", &c->store.disk.dir);
  disk.Size("capacity", &c->store.disk.capacity_bytes);
  disk.Size("segment_bytes", &c->store.disk.segment_bytes);
  disk.Choice("durability",
              {std::pair{"written", DiskTierOptions::Durability::kWritten},
               std::pair{"synced", DiskTierOptions::Durability::kSynced}},
              &c->store.disk.durability);
  disk.Bool("use_io_uring", &c->store.disk.use_io_uring);
  disk.Bool("compress", &c->store.disk_data.compress);
  disk.Bool("encrypt", &c->store.disk_data.encrypt);
  disk.RejectUnknown();

  SharedTierOptions& g4 = c->store.shared;
  TableReader shared(root["shared"].as_table(), "shared", error);
  shared.String("location", &g4.location);
  shared.String("s3_endpoint", &g4.s3_endpoint);
  shared.String("s3_region", &g4.s3_region);
  shared.Bool("s3_path_style", &g4.s3_path_style);
  shared.Bool("s3_check_before_put", &g4.s3_check_before_put);
  shared.Uint("s3_connect_timeout_ms", &g4.s3_connect_timeout_ms);
  shared.Uint("s3_request_timeout_ms", &g4.s3_request_timeout_ms);
  shared.Uint("s3_max_retries", &g4.s3_max_retries);
  shared.Size("s3_multipart_threshold", &g4.s3_multipart_threshold_bytes);
  shared.Size("s3_multipart_part", &g4.s3_multipart_part_bytes);
  shared.String("s3_access_key", &g4.s3_access_key);
  shared.String("s3_secret_key", &g4.s3_secret_key);
  shared.String("node_id", &g4.node_id);
  shared.Choice("write_policy",
                {std::pair{"on_put", SharedTierOptions::WritePolicy::kOnPut},
                 std::pair{"on_demotion", SharedTierOptions::WritePolicy::kOnDemotion}},
                &g4.write_policy);
  shared.Size("upload_buffer", &g4.upload_buffer_bytes);
  shared.Bool("promote_on_hit", &g4.promote_on_hit);
  shared.Size("capacity", &g4.capacity_bytes);
  shared.Size("tenant_quota", &g4.tenant_quota_bytes);
  shared.Uint("ttl_seconds", &g4.ttl_seconds);
  shared.Uint("janitor_interval_seconds", &g4.janitor_interval_seconds);
  shared.Uint("janitor_lease_seconds", &g4.janitor_lease_seconds);
  shared.Uint("notice_poll_ms", &g4.notice_poll_ms);
  shared.Uint("notice_margin_seconds", &g4.notice_margin_seconds);
  shared.Uint("notice_retention_seconds", &g4.notice_retention_seconds);
  shared.Uint("report_ms", &g4.report_ms);
  shared.Uint("exists_cache_ms", &g4.exists_cache_ms);
  shared.Bool("sync", &g4.sync);
  shared.Bool("compress", &c->store.shared_data.compress);
  shared.Bool("encrypt", &c->store.shared_data.encrypt);
  shared.RejectUnknown();

  TableReader security(root["security"].as_table(), "security", error);
  security.String("master_key", &c->store.security.master_key);
  security.String("keystore_dir", &c->store.security.keystore_dir);
  security.String("audit_log", &c->store.security.audit_log_path);
  security.RejectUnknown();

  TableReader admission(root["admission"].as_table(), "admission", error);
  admission.Uint("min_prefix_blocks", &c->store.disk_admission.min_prefix_blocks);
  admission.Bool("frequency_gate", &c->store.disk_admission.frequency_gate);
  admission.Uint("min_accesses", &c->store.disk_admission.min_accesses);
  admission.RejectUnknown();

  TableReader store(root["store"].as_table(), "store", error);
  store.Size("max_block_bytes", &c->store.max_block_bytes);
  store.Bool("promote_on_hit", &c->store.promote_on_hit);
  store.Uint("retention_scan_seconds", &c->store.retention_scan_seconds);
  store.RejectUnknown();

  if (const toml::node* tenants = root.get("tenants")) {
    const toml::array* list = tenants->as_array();
    if (list == nullptr) {
      if (error->ok()) *error = Status::InvalidArgument("'tenants' must be an array of tables ([[tenants]])");
      return;
    }
    c->tenants.clear();
    for (size_t i = 0; i < list->size(); ++i) {
      const toml::table* t = (*list)[i].as_table();
      if (t == nullptr) {
        if (error->ok()) *error = Status::InvalidArgument("'tenants' must be an array of tables ([[tenants]])");
        return;
      }
      TenantConfig tc;
      TableReader r(t, "tenants[" + std::to_string(i) + "]", error);
      r.String("name", &tc.options.name);
      r.String("token", &tc.token);
      r.String("admin_token", &tc.admin_token);
      r.IdList("unix_uids", &tc.unix_uids, UserIdOf);
      r.IdList("unix_gids", &tc.unix_gids, GroupIdOf);
      r.String("s3_access_key", &tc.s3_access_key);
      r.String("s3_secret_key", &tc.s3_secret_key);
      r.Size("memory_budget", &tc.options.memory_budget_bytes);
      r.Size("disk_budget", &tc.options.disk_budget_bytes);
      r.Uint("ttl_seconds", &tc.options.ttl_seconds);
      r.Uint("max_age_seconds", &tc.options.max_age_seconds);
      r.RejectUnknown();
      c->tenants.push_back(std::move(tc));
    }
  }
}

}  // namespace

Status ApplyConfigToml(std::string_view toml_text, std::string_view origin, ServerConfig* config) {
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    const toml::source_position& pos = e.source().begin;
    return Status::InvalidArgument(std::string(origin) + ":" + std::to_string(pos.line) + ":" +
                                   std::to_string(pos.column) + ": " + std::string(e.description()));
  }
  Status error;
  ApplyTable(root, config, &error);
  if (!error.ok()) {
    return Status::InvalidArgument(std::string(origin) + ": " + std::string(error.message()));
  }
  return Status::OK();
}

Options ServerConfig::StoreOptions() const {
  Options o = store;
  o.tenants.clear();
  for (const TenantConfig& t : tenants) o.tenants.push_back(t.options);
  auto under_data_dir = [&](std::string* path) {
    if (!path->empty() && (*path)[0] != '/') *path = data_dir + "/" + *path;
  };
  under_data_dir(&o.disk.dir);
  o.memory.arena_file = ArenaFile();
  o.memory.arena_data_dir = AbsoluteDataDir();
  under_data_dir(&o.security.keystore_dir);
  under_data_dir(&o.security.audit_log_path);
  return o;
}

std::string ServerConfig::AbsoluteDataDir() const {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::weakly_canonical(data_dir, ec);
  if (ec) dir = std::filesystem::absolute(data_dir).lexically_normal();
  return dir.string();
}

std::string ServerConfig::ArenaFile() const {
  if (!warm_restart) return "";
  if (!arena_file.empty()) return arena_file;
  // One file per data directory, named by its absolute path: two daemons on one host with
  // different data_dirs never share one, and a restart finds its own again.
  const std::string name = AbsoluteDataDir();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(Checksum64(
      std::as_bytes(std::span<const char>(name.data(), name.size())))));
  return std::string("/dev/shm/kvtier-g2-") + hex;
}

uint64_t ServerConfig::EffectiveMaxFrameBytes() const {
  return max_frame_bytes != 0 ? max_frame_bytes : store.max_block_bytes + 64 * kKiB;
}

uint64_t ServerConfig::EffectiveMaxObjectBytes() const {
  const uint64_t largest = store.max_block_bytes - std::min(store.max_block_bytes, kS3ObjectHeaderReserve);
  return s3.max_object_bytes != 0 ? std::min(s3.max_object_bytes, largest) : largest;
}

Status ServerConfig::Validate() const {
  if (tenants.empty()) return Status::InvalidArgument("at least one [[tenants]] entry is required");
  std::set<std::string> names;
  std::set<std::string> tokens;
  std::set<uint32_t> uids;
  std::set<uint32_t> gids;
  std::set<std::string> access_keys;
  if (!admin_token.empty()) tokens.insert(admin_token);
  for (const TenantConfig& t : tenants) {
    if (t.options.name.empty()) return Status::InvalidArgument("a tenant has an empty name");
    if (!names.insert(t.options.name).second) {
      return Status::InvalidArgument("tenant '" + t.options.name + "' is defined twice");
    }
    if (!t.token.empty() && !tokens.insert(t.token).second) {
      return Status::InvalidArgument("two tenants share a token; tokens must be unique");
    }
    if (!t.admin_token.empty() && !tokens.insert(t.admin_token).second) {
      return Status::InvalidArgument("tenant '" + t.options.name + "': its admin_token is "
                                     "another token too; every token must be unique");
    }
    if (t.s3_access_key.empty() != t.s3_secret_key.empty()) {
      return Status::InvalidArgument("tenant '" + t.options.name + "': s3_access_key and "
                                     "s3_secret_key go together: set both or neither");
    }
    if (!t.s3_access_key.empty() && !access_keys.insert(t.s3_access_key).second) {
      return Status::InvalidArgument("two tenants share an s3_access_key; each must be unique");
    }
    for (uint32_t uid : t.unix_uids) {
      if (!uids.insert(uid).second) {
        return Status::InvalidArgument("uid " + std::to_string(uid) + " is listed by two tenants");
      }
    }
    for (uint32_t gid : t.unix_gids) {
      if (!gids.insert(gid).second) {
        return Status::InvalidArgument("gid " + std::to_string(gid) + " is listed by two tenants");
      }
    }
  }
  if (!anonymous_tenant.empty() && !names.count(anonymous_tenant)) {
    return Status::InvalidArgument("auth.anonymous_tenant '" + anonymous_tenant +
                                   "' is not a configured tenant");
  }
  if (!unix_socket_mode.empty() && !ParseFileMode(unix_socket_mode)) {
    return Status::InvalidArgument("server.unix_socket_mode must be octal like \"0660\", got '" +
                                   unix_socket_mode + "'");
  }
  if (native_listen.empty() && unix_socket.empty() && resp_listen.empty() && http_listen.empty() &&
      s3.listen.empty()) {
    return Status::InvalidArgument("every listener is disabled; nothing to serve");
  }
  if (EffectiveMaxFrameBytes() > UINT32_MAX) {
    return Status::InvalidArgument("server.max_frame_bytes must be below 4 GiB");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Status::InvalidArgument("tls.cert_file and tls.key_file go together: set both or neither");
  }
  if (tls.require_client_cert && tls.ca_file.empty()) {
    return Status::InvalidArgument("tls.require_client_cert needs tls.ca_file");
  }
  if (max_batch == 0) return Status::InvalidArgument("server.max_batch must be at least 1");
  if (busy_poll_us > 1'000'000) {
    return Status::InvalidArgument("server.busy_poll_us must be at most 1000000 (a second)");
  }
  if (request_timeout_seconds > 0 && min_request_rate == 0) {
    return Status::InvalidArgument("server.min_request_rate must be at least 1 byte (per second)");
  }
  if (events.enabled) {
    if (events.endpoint.empty()) return Status::InvalidArgument("events.endpoint must be set when events are enabled");
    if (events.buffer_steps == 0 && !events.replay_endpoint.empty()) {
      return Status::InvalidArgument("events.buffer_steps must be at least 1 with a replay_endpoint");
    }
    if (events.max_queue == 0) return Status::InvalidArgument("events.max_queue must be at least 1");
  }
  if (max_output_bytes == 0) return Status::InvalidArgument("server.max_output_bytes must be positive");
  if (!s3.listen.empty()) {
    if (s3.region.empty()) return Status::InvalidArgument("s3.region must not be empty");
    if (s3.max_list_keys == 0) return Status::InvalidArgument("s3.max_list_keys must be at least 1");
    if (EffectiveMaxObjectBytes() == 0) {
      return Status::InvalidArgument("store.max_block_bytes leaves no room for an S3 object");
    }
  }
  return Status::OK();
}

}  // namespace kvtier::server
