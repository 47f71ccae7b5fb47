#include "tools/planning/replay.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <unordered_map>

#include "kvtier/block_key.h"
#include "kvtier/env.h"

namespace kvtier::planning {
namespace {

constexpr uint64_t kMaxStoreBlockBytes = 1 * kGiB;  // Options::max_block_bytes limit.
constexpr uint32_t kDefaultPageBytes = 64 * kKiB;
constexpr uint32_t kMaxPageBytes = 2 * kMiB;
// Trace time 0 maps to this wall-clock instant, so TTL arithmetic never sees a zero clock.
constexpr uint64_t kEpochMicros = uint64_t{1'700'000'000} * 1'000'000;

// The trace's clock: the Store reads the time of the request being replayed.
class TraceClock final : public Env {
 public:
  uint64_t NowMicros() override { return now_.load(std::memory_order_relaxed); }
  void SetTraceMillis(uint64_t ms) {
    now_.store(kEpochMicros + ms * 1000, std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t> now_{kEpochMicros};
};

// Address space that backs every simulated value. The payload-free store reads only the
// span's size, so the pages are mapped PROT_NONE and never committed; a stray read would
// fault instead of silently succeeding.
class UntouchedBuffer {
 public:
  explicit UntouchedBuffer(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  ~UntouchedBuffer() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  UntouchedBuffer(const UntouchedBuffer&) = delete;
  UntouchedBuffer& operator=(const UntouchedBuffer&) = delete;

  bool ok() const { return data_ != nullptr; }
  std::span<const std::byte> Prefix(size_t n) const { return {data_, n}; }

 private:
  size_t bytes_;
  std::byte* data_ = nullptr;
};

// The trace turned into store keys once, shared by every replay of a capacity curve.
struct PreparedTrace {
  std::vector<BlockKey> keys;          // One per block reference, request after request.
  std::vector<uint32_t> block_index;   // Distinct (tenant, hash id) of each reference.
  std::vector<uint32_t> tokens;        // Tokens of each reference.
  std::vector<uint64_t> bytes;         // Value size of each reference.
  std::vector<size_t> request_begin;   // First reference of each request; one extra at the end.
  uint64_t unique_blocks = 0;
  uint64_t unique_bytes = 0;
  uint64_t max_block_bytes = 0;
};

Namespace ReplayNamespace(const std::string& tenant, const ReplayOptions& options,
                          uint32_t block_tokens) {
  // Keys only have to be distinct per tenant and stable within one replay; the layout just
  // describes the simulated model.
  Namespace ns;
  ns.tenant = tenant;
  ns.model = options.model.name.empty() ? "replay" : options.model.name;
  ns.layout.num_layers = options.model.num_layers;
  ns.layout.num_kv_heads =
      options.model.attention == AttentionKind::kMla ? 1 : options.model.num_kv_heads;
  ns.layout.head_dim = options.model.attention == AttentionKind::kMla
                           ? options.model.kv_lora_rank + options.model.qk_rope_head_dim
                           : options.model.head_dim;
  ns.layout.dtype = options.kv_precision == KvPrecision::kBf16 ? KvDtype::kBf16 : KvDtype::kFp8E4M3;
  ns.layout.tokens_per_block = block_tokens;
  return ns;
}

Result<PreparedTrace> Prepare(const Trace& trace, const ReplayOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.model.Validate());
  PreparedTrace p;
  const uint64_t references = trace.TotalBlockReferences();
  p.keys.reserve(references);
  p.block_index.reserve(references);
  p.tokens.reserve(references);
  p.bytes.reserve(references);
  p.request_begin.reserve(trace.requests.size() + 1);
  std::vector<Namespace> namespaces;
  for (const std::string& tenant : trace.tenants) {
    namespaces.push_back(ReplayNamespace(tenant, options, trace.block_tokens));
  }
  std::vector<std::unordered_map<uint64_t, uint32_t>> ids(trace.tenants.size());
  std::vector<BlockKey> unique_keys;
  for (const TraceRequest& r : trace.requests) {
    p.request_begin.push_back(p.keys.size());
    for (size_t i = 0; i < r.hash_ids.size(); ++i) {
      const uint64_t id = r.hash_ids[i];
      const uint64_t tokens = trace.BlockTokens(r, i);
      const uint64_t bytes = KvBytesForTokens(options.model, options.kv_precision, tokens);
      auto [it, inserted] = ids[r.tenant].try_emplace(id, static_cast<uint32_t>(unique_keys.size()));
      if (inserted) {
        uint8_t le[8];
        for (int b = 0; b < 8; ++b) le[b] = static_cast<uint8_t>(id >> (8 * b));
        Result<BlockKey> key = OpaqueBlockKey(namespaces[r.tenant], le);
        if (!key.ok()) return key.status();
        unique_keys.push_back(*key);
        p.unique_bytes += bytes;
      }
      p.keys.push_back(unique_keys[it->second]);
      p.block_index.push_back(it->second);
      p.tokens.push_back(static_cast<uint32_t>(tokens));
      p.bytes.push_back(bytes);
      p.max_block_bytes = std::max(p.max_block_bytes, bytes);
    }
  }
  p.request_begin.push_back(p.keys.size());
  p.unique_blocks = unique_keys.size();
  if (p.max_block_bytes > kMaxStoreBlockBytes) {
    return Status::InvalidArgument("a block of " + std::to_string(trace.block_tokens) +
                                   " tokens holds " + std::to_string(p.max_block_bytes) +
                                   " bytes of KV, over the store's 1 GiB block limit");
  }
  return p;
}

uint32_t PickPageBytes(uint64_t capacity, uint32_t requested) {
  uint32_t page = requested != 0 ? requested : kDefaultPageBytes;
  while (requested == 0 && page < kMaxPageBytes && capacity / page > UINT32_MAX) page *= 2;
  return page;
}

// Hits served by one tier within one request, for the reload-time model.
struct RequestTierTokens {
  std::array<uint64_t, kNumTiers> tokens{};
};

Result<ReplayReport> ReplayPrepared(const Trace& trace, const PreparedTrace& p,
                                    const ReplayOptions& options, uint64_t capacity,
                                    bool model_time) {
  ReplayReport report;
  report.capacity_bytes = capacity;
  report.requests = trace.requests.size();
  report.block_references = p.keys.size();
  report.unique_blocks = p.unique_blocks;
  report.unique_block_bytes = p.unique_bytes;
  for (const TraceRequest& r : trace.requests) report.prompt_tokens += r.input_length;
  for (uint32_t t : p.tokens) report.referenced_tokens += t;
  if (p.keys.empty()) return report;

  const uint32_t page = PickPageBytes(capacity, options.page_bytes);
  const uint64_t max_block = std::max<uint64_t>(p.max_block_bytes, 1);
  if (capacity < max_block || capacity < page) {
    return Status::InvalidArgument("G2 capacity " + std::to_string(capacity) +
                                   " bytes is smaller than the largest block (" +
                                   std::to_string(max_block) + " bytes)");
  }
  TraceClock clock;
  Options o;
  o.payload_free = true;
  o.env = &clock;
  o.memory.capacity_bytes = capacity;
  o.memory.page_bytes = page;
  o.memory.small_queue_fraction = options.small_queue_fraction;
  o.max_block_bytes = max_block;
  o.tenants.clear();
  for (const std::string& name : trace.tenants) {
    TenantOptions t;
    t.name = name;
    t.ttl_seconds = options.ttl_seconds;
    o.tenants.push_back(t);
  }
  Result<std::unique_ptr<Store>> opened = Store::Open(o);
  if (!opened.ok()) return opened.status();
  Store& store = **opened;
  std::vector<TenantId> tenants;
  for (const std::string& name : trace.tenants) {
    Result<TenantId> id = store.FindTenant(name);
    if (!id.ok()) return id.status();
    tenants.push_back(*id);
  }
  UntouchedBuffer values(max_block);
  if (!values.ok()) return Status::ResourceExhausted("cannot reserve address space for values");

  const PrefillModel* g2_model =
      options.reload_by_tier[0] ? &*options.reload_by_tier[0] : nullptr;
  report.has_prefill_model = model_time && g2_model != nullptr;
  if (report.has_prefill_model) report.tensor_parallel = g2_model->options().tensor_parallel;

  // Per distinct block: whether its current stored copy has been read since it was written.
  std::vector<uint8_t> written(p.unique_blocks, 0);
  std::vector<uint8_t> read_since_write(p.unique_blocks, 0);

  for (size_t r = 0; r < trace.requests.size(); ++r) {
    const TraceRequest& request = trace.requests[r];
    clock.SetTraceMillis(request.timestamp_ms);
    const size_t begin = p.request_begin[r];
    const size_t n = p.request_begin[r + 1] - begin;
    std::span<const BlockKey> keys(p.keys.data() + begin, n);
    RequestTierTokens served;
    size_t hits = 0;
    if (n > 0) {
      Result<PrefixMatch> match = store.LookupPrefix(tenants[request.tenant], keys);
      if (!match.ok()) return match.status();
      hits = match->num_blocks;
      for (size_t i = 0; i < hits; ++i) {
        const size_t ref = begin + i;
        const int slot = TierSlot(match->tiers[i]);
        TierReplayStats& tier = report.tiers[slot];
        ++tier.hit_blocks;
        tier.hit_tokens += p.tokens[ref];
        tier.bytes_read += p.bytes[ref];
        served.tokens[slot] += p.tokens[ref];
        read_since_write[p.block_index[ref]] = 1;
      }
    }
    for (size_t i = hits; i < n; ++i) {
      const size_t ref = begin + i;
      PutOptions put;
      if (i > 0) put.parent = keys[i - 1];
      Status s = store.Put(tenants[request.tenant], keys[i], values.Prefix(p.bytes[ref]), put);
      if (!s.ok()) {
        // The rest of the chain would hang off a block that is not there; engines stop too.
        if (report.puts_failed++ == 0) report.first_put_error = s.ToString();
        break;
      }
      ++report.puts_accepted;
      const uint32_t block = p.block_index[ref];
      if (written[block] && !read_since_write[block]) ++report.blocks_never_read;
      written[block] = 1;
      read_since_write[block] = 0;
      ++report.blocks_written;
      TierReplayStats& g2 = report.tiers[TierSlot(TierLevel::kG2)];
      ++g2.blocks_written;
      g2.bytes_written += p.bytes[ref];
    }
    if (report.has_prefill_model) {
      const double tokens = static_cast<double>(request.input_length);
      double cached = 0;
      double reload = 0;
      for (int slot = 0; slot < kNumTiers; ++slot) {
        if (served.tokens[slot] == 0) continue;
        const PrefillModel* m =
            options.reload_by_tier[slot] ? &*options.reload_by_tier[slot] : g2_model;
        cached += static_cast<double>(served.tokens[slot]);
        reload += m->ReloadSeconds(static_cast<double>(served.tokens[slot]));
      }
      report.prefill_seconds_without_cache += g2_model->RecomputeSeconds(tokens);
      report.prefill_seconds_with_cache += reload + g2_model->SuffixSeconds(cached, tokens);
    }
  }
  for (uint64_t b = 0; b < p.unique_blocks; ++b) {
    if (written[b] && !read_since_write[b]) ++report.blocks_never_read;
  }
  const StoreStats stats = store.Stats();
  for (const TenantStats& t : stats.tenants) {
    report.puts_stored += t.puts;
    report.evictions += t.evictions;
    report.expirations += t.expirations;
  }
  return report;
}

}  // namespace

uint64_t ReplayReport::hit_blocks() const {
  uint64_t n = 0;
  for (const TierReplayStats& t : tiers) n += t.hit_blocks;
  return n;
}

uint64_t ReplayReport::hit_tokens() const {
  uint64_t n = 0;
  for (const TierReplayStats& t : tiers) n += t.hit_tokens;
  return n;
}

double ReplayReport::block_hit_rate() const {
  return block_references == 0 ? 0 : static_cast<double>(hit_blocks()) / block_references;
}

double ReplayReport::token_hit_rate() const {
  return prompt_tokens == 0 ? 0 : static_cast<double>(hit_tokens()) / prompt_tokens;
}

double ReplayReport::never_read_share() const {
  return blocks_written == 0 ? 0 : static_cast<double>(blocks_never_read) / blocks_written;
}

Result<ReplayReport> Replay(const Trace& trace, const ReplayOptions& options) {
  Result<PreparedTrace> prepared = Prepare(trace, options);
  if (!prepared.ok()) return prepared.status();
  return ReplayPrepared(trace, *prepared, options, options.g2_capacity_bytes, true);
}

Result<std::vector<CapacityPoint>> CapacityCurve(const Trace& trace, const ReplayOptions& options,
                                                 std::vector<uint64_t> capacities) {
  Result<PreparedTrace> prepared = Prepare(trace, options);
  if (!prepared.ok()) return prepared.status();
  if (capacities.empty()) {
    for (int shift = 6; shift >= 0; --shift) {
      const uint64_t c = prepared->unique_bytes >> shift;
      if (c >= prepared->max_block_bytes && c >= kDefaultPageBytes) capacities.push_back(c);
    }
  }
  std::sort(capacities.begin(), capacities.end());
  std::vector<CapacityPoint> curve;
  for (uint64_t capacity : capacities) {
    Result<ReplayReport> r = ReplayPrepared(trace, *prepared, options, capacity, false);
    if (!r.ok()) return r.status();
    curve.push_back({capacity, r->block_hit_rate(), r->token_hit_rate()});
  }
  return curve;
}

}  // namespace kvtier::planning
