#include "tools/planning/replay.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "kvtier/block_key.h"
#include "kvtier/events.h"
#include "tools/planning/replay_internal.h"
#include "tools/planning/units.h"

namespace kvtier::planning {
namespace replay_internal {
namespace {

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

}  // namespace

Result<PreparedTrace> Prepare(const Trace& trace, const ReplayOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.model.Validate());
  PreparedTrace p;
  p.block_bytes = KvBytesForTokens(options.model, options.kv_precision, trace.block_tokens);
  if (p.block_bytes > kMaxStoreBlockBytes) {
    return Status::InvalidArgument("a block of " + std::to_string(trace.block_tokens) +
                                   " tokens holds " + std::to_string(p.block_bytes) +
                                   " bytes of KV, over the store's 1 GiB block limit");
  }
  p.stream.request_begin.reserve(trace.requests.size() + 1);
  std::vector<Namespace> namespaces;
  for (const std::string& tenant : trace.tenants) {
    namespaces.push_back(ReplayNamespace(tenant, options, trace.block_tokens));
  }
  std::vector<std::unordered_map<uint64_t, uint32_t>> ids(trace.tenants.size());
  std::vector<BlockKey>& unique_keys = p.unique_keys;
  std::unordered_map<std::string, SessionId> session_ids;  // Sessions are named per tenant.
  for (const TraceRequest& r : trace.requests) {
    SessionId session = 0;
    if (!r.session.empty()) {
      const std::string name = trace.tenants[r.tenant] + '\0' + r.session;
      session = session_ids.try_emplace(name, session_ids.size() + 1).first->second;
    }
    p.sessions.push_back(session);
    p.stream.request_begin.push_back(p.keys.size());
    const size_t whole = trace.WholeBlocks(r);
    for (size_t i = 0; i < whole; ++i) {
      const uint64_t id = r.hash_ids[i];
      auto [it, inserted] =
          ids[r.tenant].try_emplace(id, static_cast<uint32_t>(unique_keys.size()));
      if (inserted) {
        uint8_t le[8];
        for (int b = 0; b < 8; ++b) le[b] = static_cast<uint8_t>(id >> (8 * b));
        Result<BlockKey> key = OpaqueBlockKey(namespaces[r.tenant], le);
        if (!key.ok()) return key.status();
        p.id_of.emplace(*key, it->second);
        unique_keys.push_back(*key);
        p.unique_bytes += p.block_bytes;
      }
      p.keys.push_back(unique_keys[it->second]);
      p.stream.blocks.push_back(it->second);
    }
  }
  p.stream.request_begin.push_back(p.keys.size());
  p.stream.distinct_blocks = static_cast<uint32_t>(unique_keys.size());
  return p;
}

uint32_t PickPageBytes(uint64_t capacity, uint32_t requested) {
  uint32_t page = requested != 0 ? requested : kDefaultPageBytes;
  while (requested == 0 && page < kMaxPageBytes && capacity / page > UINT32_MAX) page *= 2;
  return page;
}

Result<std::unique_ptr<Store>> OpenReplayStore(const Trace& trace, const PreparedTrace& p,
                                               const ReplayOptions& options, uint64_t capacity,
                                               Env* clock, EvictionObserver* observer,
                                               BlockEventListener* events,
                                               std::vector<TenantId>* tenants) {
  const uint32_t page = PickPageBytes(capacity, options.page_bytes);
  if (capacity < p.block_bytes || capacity < page) {
    return Status::InvalidArgument("G2 capacity " + std::to_string(capacity) +
                                   " bytes is smaller than one block (" +
                                   std::to_string(p.block_bytes) + " bytes)");
  }
  if (capacity / page > UINT32_MAX) {
    return Status::InvalidArgument(
        "G2 capacity " + FormatBytes(static_cast<double>(capacity)) +
        " is more than the Store can address: 2^32 pages of " + FormatBytes(page) + ", " +
        FormatBytes(static_cast<double>(uint64_t{UINT32_MAX} * page)) + "; the largest page is " +
        FormatBytes(kMaxPageBytes));
  }
  Options o;
  o.payload_free = true;
  o.env = clock;
  o.memory.capacity_bytes = capacity;
  o.memory.page_bytes = page;
  o.memory.initial_reused_share = options.initial_reused_share;
  o.memory.max_reused_share = options.max_reused_share;
  o.max_block_bytes = std::max(p.block_bytes, options.state_bytes);
  o.disk_admission = options.g3_admission;
  o.eviction_observer = observer;
  o.event_listener = events;
  o.tenants.clear();
  for (const std::string& name : trace.tenants) {
    TenantOptions t;
    t.name = name;
    t.ttl_seconds = options.ttl_seconds;
    o.tenants.push_back(t);
  }
  Result<std::unique_ptr<Store>> opened = Store::Open(o);
  if (!opened.ok()) return opened.status();
  tenants->clear();
  for (const std::string& name : trace.tenants) {
    Result<TenantId> id = (*opened)->FindTenant(name);
    if (!id.ok()) return id.status();
    tenants->push_back(*id);
  }
  return opened;
}

std::optional<Store::SessionHint> TraceHint(const TraceRequest& request) {
  if (request.retain_seconds <= 0 && !request.finished) return std::nullopt;
  Store::SessionHint hint;
  hint.finished = request.finished;
  if (!hint.finished) {
    const double most = MemoryTierOptions{}.max_hint_retain_seconds;
    hint.retain_seconds =
        static_cast<uint32_t>(std::ceil(std::min(request.retain_seconds, most)));
  }
  return hint;
}

double PrefillSecondsWithCache(
    const std::array<std::optional<PrefillModel>, kNumTiers>& reload_by_tier,
    const std::array<uint64_t, kNumTiers>& served, double tokens) {
  const PrefillModel& g2 = *reload_by_tier[0];
  double cached = 0;
  double reload = 0;
  for (int slot = 0; slot < kNumTiers; ++slot) {
    if (served[slot] == 0) continue;
    const PrefillModel& m = reload_by_tier[slot] ? *reload_by_tier[slot] : g2;
    cached += static_cast<double>(served[slot]);
    reload += m.ReloadSeconds(static_cast<double>(served[slot]));
  }
  return reload + g2.SuffixSeconds(cached, tokens);
}

}  // namespace replay_internal

namespace {

using replay_internal::ClockTier;
using replay_internal::PreparedTrace;
using replay_internal::TraceClock;
using replay_internal::UntouchedBuffer;
using replay_internal::kDefaultPageBytes;

// What one replay tracks beside the Store: the simulated G3 and G4, and whether each tier's
// copy of a block was read since it was written.
class LowerTiers final : public EvictionObserver {
 public:
  LowerTiers(const PreparedTrace& p, const ReplayOptions& options, ReplayReport* report)
      : p_(p),
        options_(options),
        report_(report),
        g4_(options.g4 ? p.stream.distinct_blocks : 0, 0) {
    if (options.g3_capacity_bytes >= p.block_bytes && p.block_bytes > 0) {
      g3_.emplace(options.g3_capacity_bytes / p.block_bytes, p.stream.distinct_blocks);
    }
    for (int t = 0; t < kNumTiers; ++t) unread_[t].assign(p.stream.distinct_blocks, 0);
  }

  void OnEvicted(uint32_t, const BlockKey& key, bool admitted) override {
    if (!admitted) {
      ++report_->evictions_declined;
      return;
    }
    ++report_->evictions_admitted;
    const auto found = p_.id_of.find(key);
    if (found == p_.id_of.end()) return;  // A state value: hybrid replays simulate G2 only.
    const uint32_t id = found->second;
    if (g3_ && !g3_->Contains(id)) {  // The Store does not write what G3 holds already.
      const uint32_t victim = g3_->Write(id);
      if (victim != ClockTier::kNoBlock) Forget(TierLevel::kG3, victim);
      Wrote(TierLevel::kG3, id);
    }
    if (!g4_.empty() && options_.g4_write_policy == SharedTierOptions::WritePolicy::kOnDemotion) {
      Upload(id);
    }
  }
  void Stored(uint32_t id) {
    Wrote(TierLevel::kG2, id);
    if (!g4_.empty() && options_.g4_write_policy == SharedTierOptions::WritePolicy::kOnPut) {
      Upload(id);
    }
  }
  // The tier below G2 that holds the block, or nullopt.
  std::optional<TierLevel> Find(uint32_t id) const {
    if (g3_ && g3_->Contains(id)) return TierLevel::kG3;
    if (!g4_.empty() && g4_[id]) return TierLevel::kG4;
    return std::nullopt;
  }
  void Read(TierLevel tier, uint32_t id) {
    if (tier == TierLevel::kG3) g3_->Read(id);
    unread_[TierSlot(tier)][id] = 0;
  }
  // Copies still unread at the end count as never read.
  void Finish() {
    for (int t = 0; t < kNumTiers; ++t) {
      for (uint8_t u : unread_[t]) report_->tiers[t].blocks_never_read += u;
    }
  }

 private:
  void Upload(uint32_t id) {
    if (g4_[id]) return;  // The object exists: a conditional create writes nothing.
    g4_[id] = 1;
    Wrote(TierLevel::kG4, id);
  }
  void Wrote(TierLevel tier, uint32_t id) {
    TierReplayStats& t = report_->tiers[TierSlot(tier)];
    uint8_t& unread = unread_[TierSlot(tier)][id];
    t.blocks_never_read += unread;  // The copy it replaces was never read.
    unread = 1;
    ++t.blocks_written;
    t.bytes_written += p_.block_bytes;
  }
  void Forget(TierLevel tier, uint32_t id) {
    uint8_t& unread = unread_[TierSlot(tier)][id];
    report_->tiers[TierSlot(tier)].blocks_never_read += unread;
    unread = 0;
  }

  const PreparedTrace& p_;
  const ReplayOptions& options_;
  ReplayReport* report_;
  std::optional<ClockTier> g3_;
  std::vector<uint8_t> g4_;  // Per block: uploaded. Empty without G4.
  std::array<std::vector<uint8_t>, kNumTiers> unread_;  // Per tier and block.
};

struct ReplayRun {
  ReplayReport report;
  std::vector<uint32_t> hits;  // Hit blocks of each request, from any tier.
};

Result<ReplayRun> ReplayPrepared(const Trace& trace, const PreparedTrace& p,
                                 const ReplayOptions& options, uint64_t capacity,
                                 bool model_time) {
  ReplayRun run;
  ReplayReport& report = run.report;
  report.capacity_bytes = capacity;
  report.requests = trace.requests.size();
  report.block_references = p.keys.size();
  report.unique_blocks = p.stream.distinct_blocks;
  report.unique_block_bytes = p.unique_bytes;
  report.block_bytes = p.block_bytes;
  report.referenced_tokens = p.keys.size() * trace.block_tokens;
  report.g3_capacity_bytes = options.g3_capacity_bytes;
  report.g4 = options.g4;
  for (const TraceRequest& r : trace.requests) report.prompt_tokens += r.input_length;
  if (!trace.requests.empty()) {
    const uint64_t span_ms =
        trace.requests.back().timestamp_ms - trace.requests.front().timestamp_ms;
    report.duration_seconds = static_cast<double>(span_ms) / 1000;
  }
  run.hits.assign(trace.requests.size(), 0);
  if (p.keys.empty()) return run;

  const bool hybrid = options.state_bytes > 0;
  if (hybrid && (options.g3_capacity_bytes != 0 || options.g4)) {
    return Status::InvalidArgument("a hybrid model's replay simulates G2 only: no G3 or G4");
  }
  if (options.g3_capacity_bytes != 0 && options.g3_capacity_bytes < p.block_bytes) {
    return Status::InvalidArgument("G3 capacity " + std::to_string(options.g3_capacity_bytes) +
                                   " bytes is smaller than one block (" +
                                   std::to_string(p.block_bytes) + " bytes)");
  }
  LowerTiers lower(p, options, &report);
  TraceClock clock;
  std::vector<TenantId> tenants;
  Result<std::unique_ptr<Store>> opened = replay_internal::OpenReplayStore(
      trace, p, options, capacity, &clock, &lower, nullptr, &tenants);
  if (!opened.ok()) return opened.status();
  Store& store = **opened;
  const uint64_t largest = std::max(p.block_bytes, options.state_bytes);
  const Options defaults;  // The promotion rules the Store was opened with.
  UntouchedBuffer values(largest);
  if (!values.ok()) return Status::ResourceExhausted("cannot reserve address space for values");
  const std::span<const std::byte> value = values.Prefix(p.block_bytes);
  const std::span<const std::byte> state = values.Prefix(options.state_bytes);
  report.state_bytes = options.state_bytes;
  const ResumeQuery resume{1, {{"state", 1}}, false};

  const PrefillModel* g2_model =
      options.reload_by_tier[0] ? &*options.reload_by_tier[0] : nullptr;
  report.has_prefill_model = model_time && g2_model != nullptr;
  if (report.has_prefill_model) report.tensor_parallel = g2_model->options().tensor_parallel;
  const uint64_t block_tokens = trace.block_tokens;

  for (size_t r = 0; r < trace.requests.size(); ++r) {
    const TraceRequest& request = trace.requests[r];
    const TenantId tenant = tenants[request.tenant];
    clock.SetTraceMillis(request.timestamp_ms);
    const size_t begin = p.stream.request_begin[r];
    const size_t n = p.stream.request_begin[r + 1] - begin;
    std::span<const BlockKey> keys(p.keys.data() + begin, n);
    std::array<uint64_t, kNumTiers> served{};  // Hit tokens per tier.
    auto hit = [&](TierLevel tier, size_t ref) {
      TierReplayStats& t = report.tiers[TierSlot(tier)];
      ++t.hit_blocks;
      t.hit_tokens += block_tokens;
      t.bytes_read += p.block_bytes;
      served[TierSlot(tier)] += block_tokens;
      lower.Read(tier, p.stream.blocks[ref]);
    };
    size_t hits = 0;
    if (n > 0 && hybrid) {
      Result<ResumeMatch> match = store.LookupResume(tenant, keys, resume);
      if (!match.ok()) return match.status();
      for (; hits < match->resume_blocks; ++hits) hit(TierLevel::kG2, begin + hits);
      report.unresumable_kv_blocks += match->kv_blocks - match->resume_blocks;
    } else if (n > 0) {
      Result<PrefixMatch> match = store.LookupPrefix(tenant, keys);
      if (!match.ok()) return match.status();
      for (; hits < match->num_blocks; ++hits) hit(match->tiers[hits], begin + hits);
    }
    // The prefix goes on below G2; what is found there is promoted.
    for (; hits < n; ++hits) {
      const std::optional<TierLevel> tier = lower.Find(p.stream.blocks[begin + hits]);
      if (!tier) break;
      hit(*tier, begin + hits);
      const bool promote = *tier == TierLevel::kG3 ? defaults.promote_on_hit
                                                     : defaults.shared.promote_on_hit;
      PutOptions put;
      put.session = p.sessions[r];
      if (promote && store.Put(tenant, keys[hits], value, put).ok()) {
        ++report.puts_accepted;
        lower.Stored(p.stream.blocks[begin + hits]);
      }
    }
    run.hits[r] = static_cast<uint32_t>(hits);
    size_t stored = hits;
    for (; stored < n; ++stored) {
      const size_t i = stored;
      PutOptions put;
      if (i > 0) put.parent = keys[i - 1];
      put.session = p.sessions[r];
      if (hybrid) put.role = BlockRole::kKvNeedsState;
      Status s = store.Put(tenant, keys[i], value, put);
      if (!s.ok()) {
        // The rest of the chain would hang off a block that is not there; engines stop too.
        if (report.puts_failed++ == 0) report.first_put_error = s.ToString();
        break;
      }
      ++report.puts_accepted;
      lower.Stored(p.stream.blocks[begin + i]);
    }
    // The states the request's prefill passed through: at its last whole block, and at the
    // interior boundaries it keeps.
    for (size_t i = hits; hybrid && i < stored; ++i) {
      const bool interior = options.snapshot_every > 0 && (i + 1) % options.snapshot_every == 0;
      if (i + 1 != stored && !interior) continue;
      PutOptions put;
      put.parent = keys[i];
      put.session = p.sessions[r];
      put.role = BlockRole::kState;
      Result<BlockKey> key = StateKey(keys[i], "state");
      if (key.ok() && store.Put(tenant, *key, state, put).ok()) ++report.snapshots_written;
    }
    if (std::optional<Store::SessionHint> hint = replay_internal::TraceHint(request);
        hint && options.apply_hints && p.sessions[r] != 0) {
      Status s = store.HintSession(tenant, p.sessions[r], *hint);
      ++(s.ok() ? report.hints_sent : report.hints_refused);
    }
    if (report.has_prefill_model) {
      const double tokens = static_cast<double>(request.input_length);
      report.prefill_seconds_without_cache += g2_model->RecomputeSeconds(tokens);
      report.prefill_seconds_with_cache +=
          replay_internal::PrefillSecondsWithCache(options.reload_by_tier, served, tokens);
    }
  }
  lower.Finish();
  const StoreStats stats = store.Stats();
  for (const TenantStats& t : stats.tenants) {
    report.puts_stored += t.puts;
    report.evictions += t.evictions;
    report.expirations += t.expirations;
    report.lru_trials += t.lru_trials;
  }
  return run;
}

std::vector<uint64_t> DefaultCapacities(const PreparedTrace& p) {
  std::vector<uint64_t> capacities;
  for (int shift = 6; shift >= 0; --shift) {
    const uint64_t c = p.unique_bytes >> shift;
    if (c >= p.block_bytes && c >= kDefaultPageBytes) capacities.push_back(c);
  }
  return capacities;
}

PolicyResult Summarize(std::string name, const Trace& trace, const PreparedTrace& p,
                       const std::vector<uint32_t>& hits, const PrefillModel* model) {
  PolicyResult out;
  out.policy = std::move(name);
  uint64_t prompt_tokens = 0;
  double flops_all = 0;
  double flops_saved = 0;
  double seconds_saved = 0;
  for (size_t r = 0; r < trace.requests.size(); ++r) {
    const double tokens = static_cast<double>(trace.requests[r].input_length);
    const double cached = static_cast<double>(hits[r]) * trace.block_tokens;
    out.hit_blocks += hits[r];
    prompt_tokens += trace.requests[r].input_length;
    if (model == nullptr) continue;
    flops_all += model->DenseFlops(0, tokens) + model->AttentionFlops(0, tokens);
    flops_saved += model->DenseFlops(0, cached) + model->AttentionFlops(0, cached);
    seconds_saved +=
        model->RecomputeSeconds(tokens) - model->PrefillWithCacheSeconds(cached, tokens);
  }
  out.hit_tokens = out.hit_blocks * trace.block_tokens;
  out.block_hit_rate = p.keys.empty() ? 0 : static_cast<double>(out.hit_blocks) / p.keys.size();
  out.token_hit_rate = prompt_tokens == 0 ? 0 : static_cast<double>(out.hit_tokens) / prompt_tokens;
  if (model != nullptr) {
    out.flop_hit_rate = flops_all == 0 ? 0 : flops_saved / flops_all;
    out.gpu_hours_saved = seconds_saved * model->options().tensor_parallel / 3600;
  }
  return out;
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
  const TierReplayStats& g2 = tiers[TierSlot(TierLevel::kG2)];
  return g2.blocks_written == 0 ? 0 : static_cast<double>(g2.blocks_never_read) / g2.blocks_written;
}

Result<ReplayReport> Replay(const Trace& trace, const ReplayOptions& options) {
  Result<PreparedTrace> prepared = replay_internal::Prepare(trace, options);
  if (!prepared.ok()) return prepared.status();
  Result<ReplayRun> run =
      ReplayPrepared(trace, *prepared, options, options.g2_capacity_bytes, true);
  if (!run.ok()) return run.status();
  return std::move(run->report);
}

// Replays the trace G2-only at each capacity, smallest first (by default those of
// DefaultCapacities), and calls visit(prepared, capacity, run) after each.
template <typename Visit>
Status ForEachCapacity(const Trace& trace, ReplayOptions options,
                       std::vector<uint64_t> capacities, Visit visit) {
  Result<PreparedTrace> prepared = replay_internal::Prepare(trace, options);
  if (!prepared.ok()) return prepared.status();
  if (capacities.empty()) capacities = DefaultCapacities(*prepared);
  std::sort(capacities.begin(), capacities.end());
  options.g3_capacity_bytes = 0;
  options.g4 = false;
  for (uint64_t capacity : capacities) {
    Result<ReplayRun> r = ReplayPrepared(trace, *prepared, options, capacity, false);
    if (!r.ok()) return r.status();
    visit(*prepared, capacity, *r);
  }
  return Status::OK();
}

Result<std::vector<CapacityPoint>> CapacityCurve(const Trace& trace, const ReplayOptions& options,
                                                 std::vector<uint64_t> capacities) {
  std::vector<CapacityPoint> curve;
  KVTIER_RETURN_IF_ERROR(ForEachCapacity(
      trace, options, std::move(capacities),
      [&](const PreparedTrace&, uint64_t capacity, const ReplayRun& r) {
        curve.push_back({capacity, r.report.block_hit_rate(), r.report.token_hit_rate()});
      }));
  return curve;
}

Result<std::vector<ComparePoint>> ComparePolicies(const Trace& trace, const ReplayOptions& options,
                                                  std::vector<uint64_t> capacities) {
  const PrefillModel* model = options.reload_by_tier[0] ? &*options.reload_by_tier[0] : nullptr;
  std::vector<ComparePoint> points;
  Status failed;
  KVTIER_RETURN_IF_ERROR(ForEachCapacity(
      trace, options, std::move(capacities),
      [&](const PreparedTrace& prepared, uint64_t capacity, const ReplayRun& r) {
        ComparePoint point;
        point.capacity_bytes = capacity;
        const uint64_t page = replay_internal::PickPageBytes(capacity, options.page_bytes);
        point.capacity_blocks = capacity / ((prepared.block_bytes + page - 1) / page * page);
        point.policies.push_back(Summarize("kvtier", trace, prepared, r.hits, model));
        if (trace.HasHints()) {
          ReplayOptions hinted = options;
          hinted.g3_capacity_bytes = 0;
          hinted.g4 = false;
          hinted.apply_hints = true;
          Result<ReplayRun> h = ReplayPrepared(trace, prepared, hinted, capacity, false);
          if (!h.ok()) {
            failed = h.status();
            return;
          }
          point.policies.push_back(Summarize("kvtier+hints", trace, prepared, h->hits, model));
        }
        for (ReferencePolicy policy : kReferencePolicies) {
          point.policies.push_back(Summarize(
              std::string(ReferencePolicyName(policy)), trace, prepared,
              SimulateReferencePolicy(prepared.stream, policy, point.capacity_blocks), model));
        }
        points.push_back(std::move(point));
      }));
  KVTIER_RETURN_IF_ERROR(failed);
  return points;
}

}  // namespace kvtier::planning
