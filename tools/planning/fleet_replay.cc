#include "tools/planning/fleet_replay.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "kvtier/block_key.h"
#include "kvtier/events.h"
#include "tools/planning/reference_policies.h"
#include "tools/planning/replay_internal.h"

namespace kvtier::planning {
namespace {

using replay_internal::ClockTier;
using replay_internal::PreparedTrace;
using replay_internal::TraceClock;
using replay_internal::UntouchedBuffer;

constexpr uint32_t kMaxNodes = 1024;
constexpr uint32_t kNoNode = UINT32_MAX;
constexpr uint64_t kMaxWindows = 10'000'000;

// Nearest-rank percentiles and the mean. Sorts `values`.
Percentiles Summarize(std::vector<double>& values) {
  Percentiles out;
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  auto rank = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
    return values[std::clamp<size_t>(i, 1, values.size()) - 1];
  };
  out.p50 = rank(0.50);
  out.p90 = rank(0.90);
  out.p99 = rank(0.99);
  out.max = values.back();
  double sum = 0;
  for (double v : values) sum += v;
  out.mean = sum / static_cast<double>(values.size());
  return out;
}

// The fleet's G4: one bucket, each object remembering the node that uploaded it, and its
// traffic per window of trace time.
class SharedG4 {
 public:
  SharedG4(uint64_t slots, uint32_t ids, uint64_t block_bytes, double window_seconds,
           size_t windows)
      : objects_(slots, ids),
        writer_(ids, kNoNode),
        block_bytes_(block_bytes),
        window_seconds_(window_seconds),
        read_(windows, 0),
        written_(windows, 0) {}

  void SetNow(double seconds) {
    window_ = std::min(static_cast<size_t>(seconds / window_seconds_), read_.size() - 1);
  }
  bool Contains(uint32_t id) const { return writer_[id] != kNoNode; }
  uint32_t Writer(uint32_t id) const { return writer_[id]; }
  void Read(uint32_t id) {
    objects_.Read(id);
    read_[window_] += static_cast<double>(block_bytes_);
    bytes_read_ += block_bytes_;
  }
  // A conditional create: the first node to upload a block writes it, the others nothing.
  void Upload(uint32_t id, uint32_t node) {
    if (Contains(id)) return;
    const uint32_t victim = objects_.Write(id);
    if (victim != ClockTier::kNoBlock) {
      writer_[victim] = kNoNode;
      ++evictions_;
    }
    writer_[id] = node;
    written_[window_] += static_cast<double>(block_bytes_);
    bytes_written_ += block_bytes_;
  }

  void Report(FleetReport* report) {
    for (std::vector<double>* w : {&read_, &written_}) {
      for (double& bytes : *w) bytes /= window_seconds_;
    }
    report->g4_window_seconds = window_seconds_;
    report->g4_read_series = read_;
    report->g4_write_series = written_;
    report->g4_read_bytes_per_second = Summarize(read_);
    report->g4_write_bytes_per_second = Summarize(written_);
    report->g4_bytes_read = bytes_read_;
    report->g4_bytes_written = bytes_written_;
    report->g4_evictions = evictions_;
  }

 private:
  ClockTier objects_;
  std::vector<uint32_t> writer_;  // Per block id: the uploading node, or kNoNode.
  uint64_t block_bytes_;
  double window_seconds_;
  size_t window_ = 0;
  std::vector<double> read_;     // Bytes per window.
  std::vector<double> written_;  // Bytes per window.
  uint64_t bytes_read_ = 0;
  uint64_t bytes_written_ = 0;
  uint64_t evictions_ = 0;
};

// One node: its Store (G2), its simulated G3, what its block events say its G2 holds, and its
// prefill server's queue.
class Node final : public EvictionObserver, public BlockEventListener {
 public:
  // `last_holder`: per block id, the node whose events last said it stored the block in G2;
  // shared by the fleet's nodes.
  Node(uint32_t index, const PreparedTrace& p, uint64_t g3_slots, SharedG4* g4,
       SharedTierOptions::WritePolicy g4_policy, std::vector<uint32_t>* last_holder)
      : index_(index),
        p_(p),
        g4_(g4),
        g4_policy_(g4_policy),
        held_(p.stream.distinct_blocks, 0),
        last_holder_(last_holder) {
    if (g3_slots > 0) g3_.emplace(g3_slots, p.stream.distinct_blocks);
  }

  // EvictionObserver: an admitted G2 eviction is written to G3 (and uploaded on demotion).
  void OnEvicted(uint32_t, const BlockKey& key, bool admitted) override {
    if (!admitted) return;
    const auto found = p_.id_of.find(key);
    if (found == p_.id_of.end()) return;
    if (g3_ && !g3_->Contains(found->second)) g3_->Write(found->second);
    if (g4_ != nullptr && g4_policy_ == SharedTierOptions::WritePolicy::kOnDemotion) {
      g4_->Upload(found->second, index_);
    }
  }
  // BlockEventListener: the G2 events a KV-aware router indexes.
  void OnStored(uint32_t, const BlockKey& key, const BlockKey*, BlockMedium medium,
                const EngineHash*) override {
    SetHeld(key, medium, 1);
  }
  void OnRemoved(uint32_t, const BlockKey& key, BlockMedium medium) override {
    SetHeld(key, medium, 0);
  }
  // A replay never deletes a tenant; forgetting every block only costs the router locality.
  void OnCleared(uint32_t) override { std::fill(held_.begin(), held_.end(), 0); }

  void Stored(uint32_t id) {
    if (g4_ != nullptr && g4_policy_ == SharedTierOptions::WritePolicy::kOnPut) {
      g4_->Upload(id, index_);
    }
  }
  bool HeldInG2(uint32_t id) const { return held_[id] != 0; }
  ClockTier* g3() { return g3_ ? &*g3_ : nullptr; }
  const ClockTier* g3() const { return g3_ ? &*g3_ : nullptr; }

  // Seconds of queued work at `now`.
  double Queued(double now) const { return std::max(0.0, free_at_ - now); }
  // Busy time decayed to `now` with `half_life` seconds.
  double Load(double now, double half_life) {
    if (now > load_time_) {
      load_ *= std::exp2(-(now - load_time_) / half_life);
      load_time_ = now;
    }
    return load_;
  }
  // Queues a request of `service` seconds arriving at `now`; returns its TTFT.
  double Serve(double now, double service, double half_life) {
    const double start = std::max(now, free_at_);
    free_at_ = start + service;
    load_ = Load(now, half_life) + service;
    stats.busy_seconds += service;
    ++stats.requests;
    return free_at_ - now;
  }

  std::unique_ptr<Store> store;
  std::vector<TenantId> tenants;
  FleetNodeStats stats;

 private:
  void SetHeld(const BlockKey& key, BlockMedium medium, uint8_t held) {
    if (medium != BlockMedium::kCpu) return;
    const auto found = p_.id_of.find(key);
    if (found == p_.id_of.end()) return;
    held_[found->second] = held;
    if (held != 0) (*last_holder_)[found->second] = index_;
  }

  const uint32_t index_;
  const PreparedTrace& p_;
  SharedG4* const g4_;
  const SharedTierOptions::WritePolicy g4_policy_;
  std::vector<uint8_t> held_;  // Per block id: in this node's G2, by its events.
  std::vector<uint32_t>* const last_holder_;
  std::optional<ClockTier> g3_;
  double free_at_ = 0;    // When the node's last queued request is done, trace seconds.
  double load_ = 0;       // Decayed busy seconds.
  double load_time_ = 0;  // When load_ was last decayed.
};

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer.
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class FleetRun {
 public:
  FleetRun(const Trace& trace, const PreparedTrace& p, const FleetOptions& options)
      : trace_(trace), p_(p), options_(options), node_(options.node) {}

  Result<FleetReport> Run();

 private:
  Status Validate() const;
  uint32_t Route(size_t r, double now);
  uint32_t SessionNode(size_t r);
  // Blocks of request r's prefix that `node` holds in its G2 (by its block events) and then
  // its G3.
  size_t LocalPrefixBlocks(const Node& node, size_t r) const;
  // The node whose events last said it stored the deepest block of request r from its
  // `from`th on; kNoNode when none did.
  uint32_t LastHolder(size_t r, size_t from) const;

  const Trace& trace_;
  const PreparedTrace& p_;
  const FleetOptions& options_;
  const ReplayOptions& node_;
  std::optional<SharedG4> g4_;
  std::vector<std::unique_ptr<Node>> nodes_;
  // The session router's conversations: the node of each request's last whole block, and how
  // many conversations were placed.
  std::unordered_map<uint32_t, uint32_t> conversation_node_;
  std::unordered_set<uint32_t> seen_;  // Blocks some request held.
  uint64_t conversations_ = 0;
  // The kv-aware router's: per block id, the node whose G2 last stored it (by its events).
  std::vector<uint32_t> last_holder_;
  std::vector<size_t> held_;  // Per node, the request's prefix it holds (Route's scratch).
};

Status FleetRun::Validate() const {
  if (options_.nodes == 0 || options_.nodes > kMaxNodes) {
    return Status::InvalidArgument("nodes must be 1 to " + std::to_string(kMaxNodes));
  }
  if (!node_.reload_by_tier[0]) {
    return Status::InvalidArgument("a fleet replay needs a prefill model: it times requests");
  }
  if (node_.state_bytes > 0) {
    return Status::InvalidArgument(
        "a hybrid model's fleet replay is not simulated (state snapshots replay on one node)");
  }
  if (!(options_.load_cap >= 1)) return Status::InvalidArgument("the load cap must be >= 1");
  if (!(options_.load_half_life_seconds > 0) || !(options_.bandwidth_window_seconds > 0)) {
    return Status::InvalidArgument("the load half-life and the bandwidth window must be > 0");
  }
  if (options_.g4_capacity_bytes != 0 && !node_.g4) {
    return Status::InvalidArgument("a G4 capacity needs G4");
  }
  if (options_.g4_capacity_bytes != 0 && options_.g4_capacity_bytes < p_.block_bytes) {
    return Status::InvalidArgument("G4 capacity " + std::to_string(options_.g4_capacity_bytes) +
                                   " bytes is smaller than one block (" +
                                   std::to_string(p_.block_bytes) + " bytes)");
  }
  if (node_.g3_capacity_bytes != 0 && node_.g3_capacity_bytes < p_.block_bytes) {
    return Status::InvalidArgument("G3 capacity " + std::to_string(node_.g3_capacity_bytes) +
                                   " bytes is smaller than one block (" +
                                   std::to_string(p_.block_bytes) + " bytes)");
  }
  return Status::OK();
}

size_t FleetRun::LocalPrefixBlocks(const Node& node, size_t r) const {
  const size_t begin = p_.stream.request_begin[r];
  const size_t end = p_.stream.request_begin[r + 1];
  size_t i = begin;
  while (i < end && node.HeldInG2(p_.stream.blocks[i])) ++i;
  const ClockTier* g3 = node.g3();
  while (g3 != nullptr && i < end && g3->Contains(p_.stream.blocks[i])) ++i;
  return i - begin;
}

uint32_t FleetRun::LastHolder(size_t r, size_t from) const {
  const size_t begin = p_.stream.request_begin[r] + from;
  for (size_t i = p_.stream.request_begin[r + 1]; i-- > begin;) {
    if (const uint32_t k = last_holder_[p_.stream.blocks[i]]; k != kNoNode) return k;
  }
  return kNoNode;
}

uint32_t FleetRun::SessionNode(size_t r) {
  const uint32_t n = options_.nodes;
  if (p_.sessions[r] != 0) return static_cast<uint32_t>(Mix(p_.sessions[r]) % n);
  const size_t begin = p_.stream.request_begin[r];
  const size_t end = p_.stream.request_begin[r + 1];
  if (begin == end) return static_cast<uint32_t>(conversations_++ % n);
  // The conversation this request continues: the latest turn whose whole prompt it extends.
  uint32_t node = kNoNode;
  for (size_t i = end; i-- > begin && node == kNoNode;) {
    const auto found = conversation_node_.find(p_.stream.blocks[i]);
    if (found != conversation_node_.end()) node = found->second;
  }
  if (node == kNoNode) node = static_cast<uint32_t>(conversations_++ % n);
  // Only a block this request is the first to hold marks its turn: a prompt that ends inside
  // a prefix others share (a system prompt alone) must not join every later conversation.
  if (seen_.insert(p_.stream.blocks[end - 1]).second) {
    conversation_node_[p_.stream.blocks[end - 1]] = node;
  }
  for (size_t i = begin; i + 1 < end; ++i) seen_.insert(p_.stream.blocks[i]);
  return node;
}

uint32_t FleetRun::Route(size_t r, double now) {
  const uint32_t n = options_.nodes;
  const uint32_t first = static_cast<uint32_t>(r % n);
  Router router = options_.one_cache ? Router::kLeastLoaded : options_.router;
  switch (router) {
    case Router::kRoundRobin:
      return first;
    case Router::kSession:
      return SessionNode(r);
    case Router::kLeastLoaded: {
      uint32_t best = first;
      for (uint32_t j = 1; j < n; ++j) {
        const uint32_t k = (first + j) % n;
        if (nodes_[k]->Queued(now) < nodes_[best]->Queued(now)) best = k;
      }
      return best;
    }
    case Router::kKvAware:
      break;
  }
  const double half_life = options_.load_half_life_seconds;
  double mean_load = 0;
  for (auto& node : nodes_) mean_load += node->Load(now, half_life);
  mean_load /= n;
  auto load = [&](uint32_t k) {
    return mean_load > 0 ? nodes_[k]->Load(now, half_life) / mean_load : 0;
  };
  size_t most = 0;
  uint32_t holding_most = 0;
  for (uint32_t k = 0; k < n; ++k) {
    held_[k] = LocalPrefixBlocks(*nodes_[k], r);
    if (held_[k] > most) holding_most = 0;
    most = std::max(most, held_[k]);
    holding_most += held_[k] == most;
  }
  // A tie: back to the node that held the conversation last (fleet_replay.h, kv-aware).
  if (holding_most > 1) {
    const uint32_t last = LastHolder(r, most);
    if (last != kNoNode && held_[last] == most && load(last) <= options_.load_cap) return last;
  }
  const double tokens = std::max(1.0, static_cast<double>(trace_.requests[r].input_length));
  uint32_t best = kNoNode;
  double best_score = 0;
  for (uint32_t j = 0; j < n; ++j) {
    const uint32_t k = (first + j) % n;
    const double relative_load = load(k);
    if (relative_load > options_.load_cap) continue;
    const double score =
        static_cast<double>(held_[k] * trace_.block_tokens) / tokens - relative_load;
    if (best == kNoNode || score > best_score) {
      best = k;
      best_score = score;
    }
  }
  return best;  // The least loaded node is never above the mean, so one was eligible.
}

Result<FleetReport> FleetRun::Run() {
  KVTIER_RETURN_IF_ERROR(Validate());
  FleetReport report;
  report.router = options_.router;
  report.nodes = options_.nodes;
  report.one_cache = options_.one_cache;
  report.g4 = node_.g4;
  report.label = options_.one_cache ? "one cache" : std::string(RouterName(options_.router));
  if (!node_.g4) report.label += " (no G4)";
  report.requests = trace_.requests.size();
  report.block_references = p_.keys.size();
  report.block_tokens = trace_.block_tokens;
  report.block_bytes = p_.block_bytes;
  report.per_node.resize(options_.nodes);
  const uint64_t t0 = trace_.requests.empty() ? 0 : trace_.requests.front().timestamp_ms;
  if (!trace_.requests.empty()) {
    report.duration_seconds =
        static_cast<double>(trace_.requests.back().timestamp_ms - t0) / 1000;
  }
  for (const TraceRequest& r : trace_.requests) report.prompt_tokens += r.input_length;
  const PrefillModel& model = *node_.reload_by_tier[0];
  report.tensor_parallel = model.options().tensor_parallel;

  const double windows =
      std::floor(report.duration_seconds / options_.bandwidth_window_seconds) + 1;
  if (windows > static_cast<double>(kMaxWindows)) {
    return Status::InvalidArgument("a bandwidth window that short makes over " +
                                   std::to_string(kMaxWindows) + " windows of this trace");
  }
  if (node_.g4) {
    const uint64_t slots = options_.g4_capacity_bytes == 0
                               ? std::max<uint64_t>(p_.stream.distinct_blocks, 1)
                               : options_.g4_capacity_bytes / p_.block_bytes;
    g4_.emplace(slots, p_.stream.distinct_blocks, p_.block_bytes,
                options_.bandwidth_window_seconds, static_cast<size_t>(windows));
  }
  // One cache: node 0's Store and G3, N times as large, serve every node.
  const uint32_t caches = options_.one_cache ? 1 : options_.nodes;
  const uint64_t scale = options_.one_cache ? options_.nodes : 1;
  const uint64_t g3_slots =
      p_.block_bytes == 0 ? 0 : node_.g3_capacity_bytes * scale / p_.block_bytes;
  TraceClock clock;
  last_holder_.assign(p_.stream.distinct_blocks, kNoNode);
  held_.resize(options_.nodes);
  for (uint32_t k = 0; k < options_.nodes; ++k) {
    auto node = std::make_unique<Node>(k, p_, g3_slots, g4_ ? &*g4_ : nullptr,
                                       node_.g4_write_policy, &last_holder_);
    if (k < caches && !p_.keys.empty()) {
      Result<std::unique_ptr<Store>> opened =
          replay_internal::OpenReplayStore(trace_, p_, node_, node_.g2_capacity_bytes * scale,
                                           &clock, node.get(), node.get(), &node->tenants);
      if (!opened.ok()) return opened.status();
      node->store = std::move(*opened);
    }
    nodes_.push_back(std::move(node));
  }
  UntouchedBuffer values(std::max<uint64_t>(p_.block_bytes, 1));
  if (!values.ok()) return Status::ResourceExhausted("cannot reserve address space for values");
  const std::span<const std::byte> value = values.Prefix(p_.block_bytes);
  const Options defaults;  // The promotion rules the Stores were opened with.

  std::vector<double> ttft;
  ttft.reserve(trace_.requests.size());
  double flops_all = 0;
  double flops_saved = 0;
  for (size_t r = 0; r < trace_.requests.size(); ++r) {
    const TraceRequest& request = trace_.requests[r];
    const double now = static_cast<double>(request.timestamp_ms - t0) / 1000;
    clock.SetTraceMillis(request.timestamp_ms);
    if (g4_) g4_->SetNow(now);
    const uint32_t k = Route(r, now);
    Node& exec = *nodes_[k];
    const uint32_t cache_index = options_.one_cache ? 0 : k;
    Node& cache = *nodes_[cache_index];
    const size_t begin = p_.stream.request_begin[r];
    const size_t n = p_.stream.request_begin[r + 1] - begin;
    std::array<uint64_t, kNumTiers> served{};
    size_t hits = 0;
    if (n > 0) {
      const TenantId tenant = cache.tenants[request.tenant];
      std::span<const BlockKey> keys(p_.keys.data() + begin, n);
      Result<PrefixMatch> match = cache.store->LookupPrefix(tenant, keys);
      if (!match.ok()) return match.status();
      auto count = [&](HitSource source, int slot) {
        ++report.hit_blocks[static_cast<int>(source)];
        served[slot] += trace_.block_tokens;
      };
      for (; hits < match->num_blocks; ++hits) count(HitSource::kOwnG2, 0);
      const SessionId session = p_.sessions[r];
      for (; hits < n; ++hits) {
        const uint32_t id = p_.stream.blocks[begin + hits];
        bool promote = false;
        if (ClockTier* g3 = cache.g3(); g3 != nullptr && g3->Contains(id)) {
          g3->Read(id);
          count(HitSource::kOwnG3, 1);
          promote = defaults.promote_on_hit;
        } else if (g4_ && g4_->Contains(id)) {
          g4_->Read(id);
          count(g4_->Writer(id) == cache_index ? HitSource::kG4Own : HitSource::kG4Other, 2);
          promote = defaults.shared.promote_on_hit;
        } else {
          break;
        }
        PutOptions put;
        put.session = session;
        if (promote && cache.store->Put(tenant, keys[hits], value, put).ok()) cache.Stored(id);
      }
      for (size_t i = hits; i < n; ++i) {
        PutOptions put;
        if (i > 0) put.parent = keys[i - 1];
        put.session = session;
        Status s = cache.store->Put(tenant, keys[i], value, put);
        if (!s.ok()) {
          if (report.puts_failed++ == 0) report.first_put_error = s.ToString();
          break;
        }
        cache.Stored(p_.stream.blocks[begin + i]);
      }
      if (std::optional<Store::SessionHint> hint = replay_internal::TraceHint(request);
          hint && node_.apply_hints && session != 0) {
        // A refusal (no block of the session left in G2) is the Store's answer, not an error.
        (void)cache.store->HintSession(tenant, session, *hint);
      }
    }
    FleetNodeStats& stats = exec.stats;
    stats.block_references += n;
    stats.hit_blocks += hits;
    const double tokens = static_cast<double>(request.input_length);
    const double cached = static_cast<double>(hits * trace_.block_tokens);
    const double service =
        replay_internal::PrefillSecondsWithCache(node_.reload_by_tier, served, tokens);
    ttft.push_back(exec.Serve(now, service, options_.load_half_life_seconds));
    report.prefill_seconds_without_cache += model.RecomputeSeconds(tokens);
    report.prefill_seconds_with_cache += service;
    flops_all += model.DenseFlops(0, tokens) + model.AttentionFlops(0, tokens);
    flops_saved += model.DenseFlops(0, cached) + model.AttentionFlops(0, cached);
  }
  report.flop_hit_rate = flops_all == 0 ? 0 : flops_saved / flops_all;
  report.ttft_seconds = Summarize(ttft);
  for (uint32_t k = 0; k < options_.nodes; ++k) {
    report.per_node[k] = nodes_[k]->stats;
    if (report.per_node[k].requests == 0) ++report.idle_nodes;
  }
  if (g4_) g4_->Report(&report);
  return report;
}

Result<FleetReport> RunPrepared(const Trace& trace, const PreparedTrace& p,
                                const FleetOptions& options) {
  return FleetRun(trace, p, options).Run();
}

}  // namespace

std::string_view RouterName(Router router) {
  switch (router) {
    case Router::kRoundRobin: return "round-robin";
    case Router::kLeastLoaded: return "least-loaded";
    case Router::kSession: return "session";
    case Router::kKvAware: return "kv-aware";
  }
  return "?";
}

Result<Router> ParseRouter(std::string_view name) {
  std::string names;
  for (Router r : kRouters) {
    if (name == RouterName(r)) return r;
    names += names.empty() ? "" : ", ";
    names += RouterName(r);
  }
  return Status::InvalidArgument("unknown router '" + std::string(name) + "'; the routers are " +
                                 names);
}

std::string_view HitSourceName(HitSource source) {
  switch (source) {
    case HitSource::kOwnG2: return "own G2";
    case HitSource::kOwnG3: return "own G3";
    case HitSource::kG4Own: return "G4 (own)";
    case HitSource::kG4Other: return "G4 (other)";
  }
  return "?";
}

uint64_t FleetReport::total_hit_blocks() const {
  uint64_t n = 0;
  for (uint64_t h : hit_blocks) n += h;
  return n;
}

double FleetReport::block_hit_rate() const {
  return block_references == 0 ? 0
                               : static_cast<double>(total_hit_blocks()) / block_references;
}

double FleetReport::token_hit_rate() const {
  return prompt_tokens == 0
             ? 0
             : static_cast<double>(total_hit_blocks() * block_tokens) / prompt_tokens;
}

double FleetReport::source_hit_rate(HitSource source) const {
  return block_references == 0
             ? 0
             : static_cast<double>(hit_blocks[static_cast<int>(source)]) / block_references;
}

double FleetReport::local_hit_rate() const {
  return source_hit_rate(HitSource::kOwnG2) + source_hit_rate(HitSource::kOwnG3);
}

double FleetReport::imbalance() const {
  double sum = 0;
  double most = 0;
  for (const FleetNodeStats& n : per_node) {
    sum += n.busy_seconds;
    most = std::max(most, n.busy_seconds);
  }
  return sum == 0 ? 1 : most * static_cast<double>(per_node.size()) / sum;
}

double FleetReport::peak_utilization() const {
  double most = 0;
  for (const FleetNodeStats& n : per_node) most = std::max(most, n.busy_seconds);
  return duration_seconds == 0 ? 0 : most / duration_seconds;
}

double FleetReport::gpu_hours_saved() const {
  return (prefill_seconds_without_cache - prefill_seconds_with_cache) * tensor_parallel / 3600;
}

Result<FleetReport> FleetReplay(const Trace& trace, const FleetOptions& options) {
  Result<PreparedTrace> p = replay_internal::Prepare(trace, options.node);
  if (!p.ok()) return p.status();
  return RunPrepared(trace, *p, options);
}

Result<FleetComparison> CompareFleet(const Trace& trace, const FleetOptions& options) {
  Result<PreparedTrace> p = replay_internal::Prepare(trace, options.node);
  if (!p.ok()) return p.status();
  FleetComparison out;
  FleetOptions o = options;
  if (!o.node.g4) {
    o.node.g4 = true;
    o.node.g4_write_policy = SharedTierOptions::WritePolicy::kOnPut;
  }
  FleetOptions without = o;
  without.node.g4 = false;
  without.g4_capacity_bytes = 0;
  for (FleetOptions* variant : {&o, &without}) {
    for (Router router : kRouters) {
      variant->router = router;
      variant->one_cache = false;
      Result<FleetReport> run = RunPrepared(trace, *p, *variant);
      if (!run.ok()) return run.status();
      out.runs.push_back(std::move(*run));
    }
  }
  for (FleetOptions* variant : {&o, &without}) {
    variant->one_cache = true;
    Result<FleetReport> run = RunPrepared(trace, *p, *variant);
    if (!run.ok()) return run.status();
    out.runs.push_back(std::move(*run));
  }
  const std::vector<uint32_t> hits =
      SimulateReferencePolicy(p->stream, ReferencePolicy::kInfinite, 1);
  uint64_t hit_blocks = 0;
  uint64_t prompt_tokens = 0;
  for (uint32_t h : hits) hit_blocks += h;
  for (const TraceRequest& r : trace.requests) prompt_tokens += r.input_length;
  if (!p->keys.empty()) {
    out.infinite_block_hit_rate = static_cast<double>(hit_blocks) / p->keys.size();
  }
  if (prompt_tokens > 0) {
    out.infinite_token_hit_rate =
        static_cast<double>(hit_blocks * trace.block_tokens) / prompt_tokens;
  }
  return out;
}

}  // namespace kvtier::planning
