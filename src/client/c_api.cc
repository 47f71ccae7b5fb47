// The C API (include/kvtier/c.h) over the C++ client. Every function converts its arguments,
// calls kvtier::Client and turns Status values into malloc()ed messages; nothing throws across
// the boundary (allocation failure aside, which terminates as it does in the C++ client).

#include "kvtier/c.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/client.h"
#include "kvtier/state.h"

using kvtier::BlockKey;
using kvtier::Result;
using kvtier::Status;

struct kvtier_client_options_t {
  kvtier::ClientOptions options;
};

struct kvtier_client_t {
  std::unique_ptr<kvtier::Client> client;
};

struct kvtier_put_options_t {
  kvtier::PutOptions options;
};

struct kvtier_write_batch_t {
  std::vector<kvtier::BlockWrite> writes;  // Values point into the caller's memory.
};

struct kvtier_namespace_t {
  kvtier::Namespace ns;
};

struct kvtier_resume_query_t {
  kvtier::ResumeQuery query;
};

struct kvtier_stats_t {
  std::string tenant;
  std::vector<std::pair<std::string, uint64_t>> counters;
};

namespace {

char* CopyString(std::string_view s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

// LevelDB's SaveError: replaces whatever message *errptr held.
void SaveError(char** errptr, const Status& s) {
  std::free(*errptr);
  *errptr = CopyString(s.ToString());
}

// Returns true when `s` is OK; otherwise stores it in *errptr.
bool Check(char** errptr, const Status& s) {
  if (s.ok()) return true;
  SaveError(errptr, s);
  return false;
}

BlockKey KeyAt(const unsigned char* keys, size_t i) {
  std::array<uint8_t, kvtier::kBlockKeySize> bytes;
  std::memcpy(bytes.data(), keys + i * kvtier::kBlockKeySize, kvtier::kBlockKeySize);
  return BlockKey(bytes);
}

std::vector<BlockKey> Keys(const unsigned char* keys, size_t n) {
  std::vector<BlockKey> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(KeyAt(keys, i));
  return out;
}

std::optional<kvtier::KvDtype> DtypeFromC(int dtype) {
  if (dtype <= 0 || dtype > 255) return std::nullopt;
  auto d = static_cast<kvtier::KvDtype>(dtype);
  // An out-of-range value is passed on so that the server names it in its error.
  return d;
}

std::span<const std::byte> Bytes(const char* data, size_t n) {
  return {reinterpret_cast<const std::byte*>(data), n};
}

// Per-item statuses into an optional errs array, and a summary into *errptr. Returns the
// number of OK items.
size_t ReportItems(const std::vector<Status>& statuses, const char* what, char** errs,
                   char** errptr) {
  size_t ok = 0, failed = 0;
  const Status* first = nullptr;
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (statuses[i].ok()) {
      ++ok;
      if (errs != nullptr) {
        std::free(errs[i]);
        errs[i] = nullptr;
      }
      continue;
    }
    ++failed;
    if (first == nullptr) first = &statuses[i];
    if (errs != nullptr) SaveError(&errs[i], statuses[i]);
  }
  if (first != nullptr) {
    SaveError(errptr, Status(first->code(), std::to_string(failed) + " of " +
                                                std::to_string(statuses.size()) + " " + what +
                                                " failed; the first: " +
                                                std::string(first->message())));
  }
  return ok;
}

}  // namespace

extern "C" {

void kvtier_free(void* ptr) { std::free(ptr); }

// ---- Client options ----

kvtier_client_options_t* kvtier_client_options_create(void) { return new kvtier_client_options_t; }
void kvtier_client_options_destroy(kvtier_client_options_t* options) { delete options; }

void kvtier_client_options_set_endpoint(kvtier_client_options_t* o, const char* endpoint) {
  o->options.endpoint = endpoint != nullptr ? endpoint : "";
}
void kvtier_client_options_set_tenant(kvtier_client_options_t* o, const char* tenant) {
  o->options.tenant = tenant != nullptr ? tenant : "";
}
void kvtier_client_options_set_token(kvtier_client_options_t* o, const char* token) {
  o->options.token = token != nullptr ? token : "";
}
void kvtier_client_options_set_client_name(kvtier_client_options_t* o, const char* name) {
  o->options.client_name = name != nullptr ? name : "";
}
void kvtier_client_options_set_connections(kvtier_client_options_t* o, uint32_t n) {
  o->options.connections = n;
}
void kvtier_client_options_set_retry_timeout_ms(kvtier_client_options_t* o, uint32_t ms) {
  o->options.retry_timeout_ms = ms;
}
void kvtier_client_options_set_io_timeout_ms(kvtier_client_options_t* o, uint32_t ms) {
  o->options.io_timeout_ms = ms;
}
void kvtier_client_options_set_tls(kvtier_client_options_t* o, int enable) {
  o->options.tls.enabled = enable != 0;
}
void kvtier_client_options_set_tls_ca_file(kvtier_client_options_t* o, const char* path) {
  o->options.tls.ca_file = path != nullptr ? path : "";
}
void kvtier_client_options_set_tls_verify_peer(kvtier_client_options_t* o, int verify) {
  o->options.tls.verify_peer = verify != 0;
}
void kvtier_client_options_set_tls_server_name(kvtier_client_options_t* o, const char* name) {
  o->options.tls.server_name = name != nullptr ? name : "";
}
void kvtier_client_options_set_tls_cert_file(kvtier_client_options_t* o, const char* path) {
  o->options.tls.cert_file = path != nullptr ? path : "";
}
void kvtier_client_options_set_tls_key_file(kvtier_client_options_t* o, const char* path) {
  o->options.tls.key_file = path != nullptr ? path : "";
}

// ---- Connection ----

kvtier_client_t* kvtier_client_connect(const kvtier_client_options_t* options, char** errptr) {
  Result<std::unique_ptr<kvtier::Client>> c = kvtier::Client::Connect(options->options);
  if (!Check(errptr, c.status())) return nullptr;
  auto* out = new kvtier_client_t;
  out->client = std::move(c).value();
  return out;
}

void kvtier_client_close(kvtier_client_t* client) { delete client; }

const char* kvtier_client_tenant(const kvtier_client_t* client) {
  return client->client->server_info().tenant.c_str();
}
uint64_t kvtier_client_max_block_bytes(const kvtier_client_t* client) {
  return client->client->server_info().max_block_bytes;
}
uint32_t kvtier_client_max_batch(const kvtier_client_t* client) {
  return client->client->server_info().max_batch;
}

void kvtier_client_ping(kvtier_client_t* client, char** errptr) {
  Check(errptr, client->client->Ping());
}

// ---- Puts ----

kvtier_put_options_t* kvtier_put_options_create(void) { return new kvtier_put_options_t; }
void kvtier_put_options_destroy(kvtier_put_options_t* options) { delete options; }
void kvtier_put_options_set_parent(kvtier_put_options_t* o, const unsigned char* parent_key) {
  if (parent_key == nullptr) {
    o->options.parent.reset();
  } else {
    o->options.parent = KeyAt(parent_key, 0);
  }
}
void kvtier_put_options_set_session(kvtier_put_options_t* o, uint64_t session) {
  o->options.session = session;
}
void kvtier_put_options_set_dtype(kvtier_put_options_t* o, int dtype) {
  o->options.dtype = DtypeFromC(dtype);
}

void kvtier_put_options_set_role(kvtier_put_options_t* o, int role) {
  o->options.role = static_cast<kvtier::BlockRole>(role);
}

void kvtier_client_put(kvtier_client_t* client, const unsigned char* key, const char* value,
                       size_t value_len, const kvtier_put_options_t* options, char** errptr) {
  kvtier::PutOptions defaults;
  Check(errptr, client->client->Put(KeyAt(key, 0), Bytes(value, value_len),
                                    options != nullptr ? options->options : defaults));
}

kvtier_write_batch_t* kvtier_write_batch_create(void) { return new kvtier_write_batch_t; }
void kvtier_write_batch_destroy(kvtier_write_batch_t* batch) { delete batch; }
void kvtier_write_batch_clear(kvtier_write_batch_t* batch) { batch->writes.clear(); }
size_t kvtier_write_batch_count(const kvtier_write_batch_t* batch) { return batch->writes.size(); }

void kvtier_write_batch_put(kvtier_write_batch_t* batch, const unsigned char* key,
                            const char* value, size_t value_len,
                            const kvtier_put_options_t* options) {
  kvtier::BlockWrite w;
  w.key = KeyAt(key, 0);
  w.value = Bytes(value, value_len);
  if (options != nullptr) {
    w.parent = options->options.parent;
    w.session = options->options.session;
    w.dtype = options->options.dtype;
    w.role = options->options.role;
  }
  batch->writes.push_back(w);
}

size_t kvtier_client_put_many(kvtier_client_t* client, const kvtier_write_batch_t* batch,
                              char** errs, char** errptr) {
  return ReportItems(client->client->PutMany(batch->writes), "puts", errs, errptr);
}

void kvtier_client_put_atomic(kvtier_client_t* client, const kvtier_write_batch_t* batch,
                              char** errptr) {
  Check(errptr, client->client->PutAtomic(batch->writes));
}

// ---- Gets ----

char* kvtier_client_get(kvtier_client_t* client, const unsigned char* key, size_t* value_len,
                        char** errptr) {
  *value_len = 0;
  BlockKey k = KeyAt(key, 0);
  kvtier::BlockValues v = client->client->GetMany(std::span(&k, 1));
  Result<std::span<const std::byte>>& item = v.values[0];
  if (item.status().code() == kvtier::StatusCode::kNotFound) return nullptr;
  if (!Check(errptr, item.status())) return nullptr;
  // malloc(0) may return NULL, which would read as a miss; values are never empty, but stay safe.
  char* out = static_cast<char*>(std::malloc(std::max<size_t>(item->size(), 1)));
  std::memcpy(out, item->data(), item->size());
  *value_len = item->size();
  return out;
}

int kvtier_client_get_into(kvtier_client_t* client, const unsigned char* key, char* buf,
                           size_t buf_len, size_t* value_len, char** errptr) {
  *value_len = 0;
  BlockKey k = KeyAt(key, 0);
  kvtier::BlockValues v = client->client->GetMany(std::span(&k, 1));
  Result<std::span<const std::byte>>& item = v.values[0];
  if (item.status().code() == kvtier::StatusCode::kNotFound) return 0;
  if (!Check(errptr, item.status())) return 0;
  *value_len = item->size();
  if (item->size() > buf_len) {
    SaveError(errptr, Status::OutOfRange("the block is " + std::to_string(item->size()) +
                                         " bytes; the buffer holds " + std::to_string(buf_len)));
    return 0;
  }
  std::memcpy(buf, item->data(), item->size());
  return 1;
}

void kvtier_client_get_many(kvtier_client_t* client, size_t num_keys, const unsigned char* keys,
                            char** values, size_t* value_lens, char** errs) {
  std::vector<BlockKey> k = Keys(keys, num_keys);
  kvtier::BlockValues v = client->client->GetMany(k);
  for (size_t i = 0; i < num_keys; ++i) {
    values[i] = nullptr;
    value_lens[i] = 0;
    std::free(errs[i]);
    errs[i] = nullptr;
    const Result<std::span<const std::byte>>& item = v.values[i];
    if (item.status().code() == kvtier::StatusCode::kNotFound) continue;
    if (!item.ok()) {
      SaveError(&errs[i], item.status());
      continue;
    }
    values[i] = static_cast<char*>(std::malloc(std::max<size_t>(item->size(), 1)));
    std::memcpy(values[i], item->data(), item->size());
    value_lens[i] = item->size();
  }
}

// ---- Lookups ----

void kvtier_client_exists(kvtier_client_t* client, size_t num_keys, const unsigned char* keys,
                          unsigned char* tiers, char** errptr) {
  Result<std::vector<std::optional<kvtier::TierLevel>>> found =
      client->client->Exists(Keys(keys, num_keys));
  if (!Check(errptr, found.status())) return;
  for (size_t i = 0; i < num_keys; ++i) {
    tiers[i] = (*found)[i] ? static_cast<unsigned char>(*(*found)[i])
                           : static_cast<unsigned char>(KVTIER_TIER_ABSENT);
  }
}

size_t kvtier_client_lookup_prefix(kvtier_client_t* client, size_t num_keys,
                                   const unsigned char* keys, unsigned char* tiers,
                                   char** errptr) {
  Result<kvtier::PrefixMatch> m = client->client->LookupPrefix(Keys(keys, num_keys));
  if (!Check(errptr, m.status())) return 0;
  if (tiers != nullptr) {
    for (size_t i = 0; i < m->num_blocks && i < num_keys; ++i) {
      tiers[i] = static_cast<unsigned char>(m->tiers[i]);
    }
  }
  return m->num_blocks;
}

kvtier_resume_query_t* kvtier_resume_query_create(uint32_t keys_per_block) {
  auto* q = new kvtier_resume_query_t;
  q->query.keys_per_block = keys_per_block;
  return q;
}
void kvtier_resume_query_destroy(kvtier_resume_query_t* query) { delete query; }
void kvtier_resume_query_add_group(kvtier_resume_query_t* query, const char* name,
                                   uint32_t window_blocks) {
  query->query.groups.push_back({name != nullptr ? name : "", window_blocks});
}

size_t kvtier_client_lookup_resume(kvtier_client_t* client, size_t num_keys,
                                   const unsigned char* keys, const kvtier_resume_query_t* query,
                                   size_t* kv_blocks, uint32_t* resumable, size_t* num_resumable,
                                   char** errptr) {
  kvtier::ResumeQuery q = query->query;
  q.all_lengths = resumable != nullptr;
  Result<kvtier::ResumeMatch> m = client->client->LookupResume(Keys(keys, num_keys), q);
  if (!Check(errptr, m.status())) return 0;
  if (kv_blocks != nullptr) *kv_blocks = m->kv_blocks;
  if (resumable != nullptr) {
    std::copy(m->resumable.begin(), m->resumable.end(), resumable);
    if (num_resumable != nullptr) *num_resumable = m->resumable.size();
  }
  return m->resume_blocks;
}

// ---- Block keys from tokens ----

kvtier_namespace_t* kvtier_namespace_create(const char* tenant, const char* model) {
  auto* ns = new kvtier_namespace_t;
  ns->ns.tenant = tenant != nullptr ? tenant : "";
  ns->ns.model = model != nullptr ? model : "";
  return ns;
}
void kvtier_namespace_destroy(kvtier_namespace_t* ns) { delete ns; }

void kvtier_namespace_set_layout(kvtier_namespace_t* ns, uint32_t num_layers,
                                 uint32_t num_kv_heads, uint32_t head_dim, int dtype,
                                 uint32_t tokens_per_block) {
  ns->ns.layout.num_layers = num_layers;
  ns->ns.layout.num_kv_heads = num_kv_heads;
  ns->ns.layout.head_dim = head_dim;
  ns->ns.layout.dtype = static_cast<kvtier::KvDtype>(dtype);
  ns->ns.layout.tokens_per_block = tokens_per_block;
}

void kvtier_namespace_set_tensor_parallel(kvtier_namespace_t* ns, uint32_t rank, uint32_t size) {
  ns->ns.tp_rank = rank;
  ns->ns.tp_size = size;
}

size_t kvtier_compute_block_keys(const kvtier_namespace_t* ns, const uint32_t* tokens,
                                 size_t num_tokens, unsigned char* keys_out, size_t max_keys,
                                 char** errptr) {
  Result<std::vector<BlockKey>> keys =
      kvtier::ComputeBlockKeys(ns->ns, std::span(tokens, num_tokens));
  if (!Check(errptr, keys.status())) return 0;
  for (size_t i = 0; i < keys->size() && i < max_keys; ++i) {
    std::memcpy(keys_out + i * kvtier::kBlockKeySize, (*keys)[i].data(), kvtier::kBlockKeySize);
  }
  return keys->size();
}

size_t kvtier_client_lookup_prefix_tokens(kvtier_client_t* client, const kvtier_namespace_t* ns,
                                          const uint32_t* tokens, size_t num_tokens,
                                          unsigned char* tiers, size_t max_tiers, char** errptr) {
  Result<std::vector<BlockKey>> keys =
      kvtier::ComputeBlockKeys(ns->ns, std::span(tokens, num_tokens));
  if (!Check(errptr, keys.status())) return 0;
  Result<kvtier::PrefixMatch> m = client->client->LookupPrefix(*keys);
  if (!Check(errptr, m.status())) return 0;
  if (tiers != nullptr) {
    for (size_t i = 0; i < m->num_blocks && i < max_tiers; ++i) {
      tiers[i] = static_cast<unsigned char>(m->tiers[i]);
    }
  }
  return m->num_blocks;
}

// ---- Deletion and pinning ----

int kvtier_client_delete(kvtier_client_t* client, const unsigned char* key, char** errptr) {
  Status s = client->client->Delete(KeyAt(key, 0));
  if (s.code() == kvtier::StatusCode::kNotFound) return 0;
  return Check(errptr, s) ? 1 : 0;
}

size_t kvtier_client_delete_many(kvtier_client_t* client, size_t num_keys,
                                 const unsigned char* keys, char** errptr) {
  std::vector<Status> statuses = client->client->DeleteMany(Keys(keys, num_keys));
  size_t deleted = 0;
  std::vector<Status> failures;
  for (const Status& s : statuses) {
    if (s.ok()) {
      ++deleted;
    } else if (s.code() != kvtier::StatusCode::kNotFound) {
      failures.push_back(s);
    }
  }
  if (!failures.empty()) ReportItems(failures, "deletes", nullptr, errptr);
  return deleted;
}

namespace {

void SaveReport(const Result<kvtier::DeletionReport>& r, uint64_t* memory_blocks,
                uint64_t* disk_blocks, char** errptr) {
  if (memory_blocks != nullptr) *memory_blocks = 0;
  if (disk_blocks != nullptr) *disk_blocks = 0;
  if (!Check(errptr, r.status())) return;
  if (memory_blocks != nullptr) *memory_blocks = r->memory_blocks;
  if (disk_blocks != nullptr) *disk_blocks = r->disk_blocks;
}

}  // namespace

void kvtier_client_delete_session(kvtier_client_t* client, uint64_t session,
                                  uint64_t* memory_blocks, uint64_t* disk_blocks, char** errptr) {
  SaveReport(client->client->DeleteSession(session), memory_blocks, disk_blocks, errptr);
}

static_assert(KVTIER_PRIORITY_LOW == static_cast<int>(kvtier::Store::SessionPriority::kLow) &&
              KVTIER_PRIORITY_HIGH == static_cast<int>(kvtier::Store::SessionPriority::kHigh));

void kvtier_client_hint_session(kvtier_client_t* client, uint64_t session,
                                uint32_t retain_seconds, int finished, int priority,
                                char** errptr) {
  kvtier::Store::SessionHint hint;
  hint.retain_seconds = retain_seconds;
  hint.finished = finished != 0;
  if (priority < KVTIER_PRIORITY_UNCHANGED || priority > KVTIER_PRIORITY_HIGH) {
    SaveError(errptr, Status::InvalidArgument("unknown priority " + std::to_string(priority) +
                                              ": use KVTIER_PRIORITY_*"));
    return;
  }
  if (priority != KVTIER_PRIORITY_UNCHANGED) {
    hint.priority = static_cast<kvtier::Store::SessionPriority>(priority);
  }
  Check(errptr, client->client->HintSession(session, hint));
}

void kvtier_client_delete_all_blocks(kvtier_client_t* client, uint64_t* memory_blocks,
                                     uint64_t* disk_blocks, char** errptr) {
  SaveReport(client->client->DeleteAllBlocks(), memory_blocks, disk_blocks, errptr);
}

void kvtier_client_flush(kvtier_client_t* client, uint64_t* written, char** errptr) {
  kvtier::Result<uint64_t> r = client->client->Flush();
  if (written != nullptr) *written = r.ok() ? *r : 0;
  Check(errptr, r.status());
}

void kvtier_client_pin(kvtier_client_t* client, size_t num_keys, const unsigned char* keys,
                       char** errs, char** errptr) {
  ReportItems(client->client->PinMany(Keys(keys, num_keys)), "pins", errs, errptr);
}

void kvtier_client_unpin(kvtier_client_t* client, size_t num_keys, const unsigned char* keys,
                         char** errs, char** errptr) {
  ReportItems(client->client->UnpinMany(Keys(keys, num_keys)), "unpins", errs, errptr);
}

// ---- Statistics ----

kvtier_stats_t* kvtier_client_stats(kvtier_client_t* client, char** errptr) {
  Result<kvtier::TenantStats> s = client->client->Stats();
  if (!Check(errptr, s.status())) return nullptr;
  auto* out = new kvtier_stats_t;
  out->tenant = s->name;
  for (const auto& [name, field] : kvtier::TenantStats::kCounters) {
    out->counters.emplace_back(name, (*s).*field);
  }
  return out;
}

void kvtier_stats_destroy(kvtier_stats_t* stats) { delete stats; }
const char* kvtier_stats_tenant(const kvtier_stats_t* stats) { return stats->tenant.c_str(); }
size_t kvtier_stats_count(const kvtier_stats_t* stats) { return stats->counters.size(); }
const char* kvtier_stats_name(const kvtier_stats_t* stats, size_t i) {
  return stats->counters[i].first.c_str();
}
uint64_t kvtier_stats_value(const kvtier_stats_t* stats, size_t i) {
  return stats->counters[i].second;
}

uint64_t kvtier_stats_get(const kvtier_stats_t* stats, const char* name, int* found) {
  for (const auto& [n, v] : stats->counters) {
    if (n == name) {
      if (found != nullptr) *found = 1;
      return v;
    }
  }
  if (found != nullptr) *found = 0;
  return 0;
}

// ---- Key helpers ----

void kvtier_block_key_to_hex(const unsigned char* key, char* out) {
  std::string hex = KeyAt(key, 0).ToHex();
  std::memcpy(out, hex.c_str(), hex.size() + 1);
}

int kvtier_block_key_from_hex(const char* hex, unsigned char* key, char** errptr) {
  Result<BlockKey> k = BlockKey::FromHex(hex != nullptr ? hex : "");
  if (!Check(errptr, k.status())) return 0;
  std::memcpy(key, k->data(), kvtier::kBlockKeySize);
  return 1;
}

int kvtier_state_key(const unsigned char* block_key, const char* group, unsigned char* key_out,
                     char** errptr) {
  Result<BlockKey> k = kvtier::StateKey(KeyAt(block_key, 0), group != nullptr ? group : "");
  if (!Check(errptr, k.status())) return 0;
  std::memcpy(key_out, k->data(), kvtier::kBlockKeySize);
  return 1;
}

}  // extern "C"
