// Fleet replay: a trace replayed across N nodes, each with the real kvtier Store as its G2 and
// a simulated G3, all sharing one simulated G4, with a router choosing the node of each
// request, as a KV-aware router (Dynamo's, llm-d's) or a plain load balancer would.
//
// Per request, in timestamp order, on the trace's clock: the router picks a node; the node's
// Store looks the prefix up in its G2, then the node's G3, then G4 (written by any node); what
// is found below G2 is promoted into G2, the rest is put in order, as replay.h describes for
// one node. Every node runs the same Store options (ReplayOptions, per node). G4 is one bucket
// for the fleet: a block is uploaded once, whichever node uploads it first (a conditional
// create), and read by every node; `g4_capacity_bytes` bounds it (CLOCK order, as an object
// store's lifecycle rule would keep the recently used).
//
// Time: each node is one prefill server (its tensor-parallel group) that serves its requests
// in arrival order. A request's service time is the prefill model's: its hits reloaded over
// the link of the tier that served them, the rest computed (crossover.h). It starts when it
// arrives or when the node's previous request is done, whichever is later; its TTFT (the
// prefill part) is its wait plus its service time. Decode is not modelled: a node's time is
// prefill only. The cache is looked up and written at the request's arrival.
//
// Routers:
//   round-robin   request i goes to node i mod N.
//   least-loaded  the node with the least queued work (seconds until it is free), ties going
//                 round-robin.
//   session       sticky by conversation: the trace's session when it names one (hashed to a
//                 node); otherwise the conversation of the latest earlier request whose last
//                 whole block this request holds (a turn's prompt holds the previous turn's)
//                 and was the first to hold it (a prompt that ends inside a shared system
//                 prompt marks no conversation); a request that continues none starts a
//                 conversation, placed round-robin.
//                 (Sticky by the chain's first block would send all of Mooncake's conversation
//                 trace to one node: every request there starts with the same block.)
//   kv-aware      scores each node by the prefix of the request that its own G2 and then G3
//                 hold, as a fraction of the prompt, less the node's recent load over the
//                 fleet's mean load, and picks the highest score (ties in round-robin order).
//                 Load is prefill busy time decaying with `load_half_life_seconds`; a node
//                 whose load is above `load_cap` times the mean is skipped. It learns what a
//                 node's G2 holds only from that Store's block events (what kvtierd publishes
//                 as KV events) and its G3 as the node's disk events would say. G4 is left out
//                 of the score: every node reads it alike. A prefix that only G4 holds is
//                 nearly as fast to reload as one in G2, so scoring by estimated TTFT (tried:
//                 docs/planning.md) spreads a conversation over the nodes and halves the hits
//                 each node serves itself.
//                 When several nodes hold the longest prefix (a conversation evicted from
//                 every node, which all still hold its system prompt), the request goes to
//                 the node whose events last said it stored the deepest block beyond that
//                 prefix, if that node is one of them and within the load cap: its G2's ghost
//                 lists and its G3 admission's access counts still know the conversation, so
//                 its blocks come back as returning blocks, where another node would take
//                 them for new ones.
//
// One cache (`one_cache`): the N nodes share one Store with N times the G2 and G3 of a node,
// routed least-loaded: perfect locality, the bound a router's locality is measured against.
//
// Thread safety: the functions are reentrant; each replay opens its own Stores.

#ifndef KVTIER_TOOLS_PLANNING_FLEET_REPLAY_H_
#define KVTIER_TOOLS_PLANNING_FLEET_REPLAY_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "tools/planning/replay.h"
#include "tools/planning/trace.h"

namespace kvtier::planning {

enum class Router { kRoundRobin, kLeastLoaded, kSession, kKvAware };

inline constexpr Router kRouters[] = {Router::kRoundRobin, Router::kLeastLoaded,
                                      Router::kSession, Router::kKvAware};

std::string_view RouterName(Router router);
// InvalidArgument naming the routers for an unknown name.
Result<Router> ParseRouter(std::string_view name);

struct FleetOptions {
  // Every node's Store and tiers: G2 capacity, G3 capacity and admission, TTL, G4 on or off
  // and its write policy, the links of each tier's hits. reload_by_tier[0] (the G2 prefill
  // model) is required: it times every request. Hybrid models (state_bytes > 0) are refused.
  ReplayOptions node;
  uint32_t nodes = 8;
  Router router = Router::kKvAware;
  // G4's capacity for the whole fleet; 0 = unbounded. Only with node.g4.
  uint64_t g4_capacity_bytes = 0;
  // Perfect locality: one Store of `nodes` times the G2 and G3 for every node (router ignored:
  // least-loaded).
  bool one_cache = false;
  // kv-aware: a node whose recent busy time is above load_cap times the fleet's mean is
  // skipped. >= 1.
  double load_cap = 1.2;
  // kv-aware: the half-life of the busy time its score and the load cap read, trace seconds
  // (> 0). Longer keeps conversations where they are; shorter follows bursts.
  double load_half_life_seconds = 300;
  // G4 bandwidth is measured over windows of this many trace seconds (> 0).
  double bandwidth_window_seconds = 1;
};

// Where a hit was served from.
enum class HitSource { kOwnG2, kOwnG3, kG4Own, kG4Other };
inline constexpr int kNumHitSources = 4;
// "own G2", "own G3", "G4 (own)", "G4 (other)".
std::string_view HitSourceName(HitSource source);

struct FleetNodeStats {
  uint64_t requests = 0;
  uint64_t block_references = 0;
  uint64_t hit_blocks = 0;
  double busy_seconds = 0;  // Prefill time served.
};

struct Percentiles {
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
  double mean = 0;
};

struct FleetReport {
  std::string label;  // The router's name, "one cache", with " (no G4)" when G4 is off.
  Router router = Router::kKvAware;
  uint32_t nodes = 0;
  bool one_cache = false;
  bool g4 = false;
  uint64_t requests = 0;
  uint64_t block_references = 0;
  uint64_t prompt_tokens = 0;
  uint32_t block_tokens = 0;
  uint64_t block_bytes = 0;
  double duration_seconds = 0;  // Trace time from the first request to the last.
  std::array<uint64_t, kNumHitSources> hit_blocks{};  // Indexed by HitSource.
  double flop_hit_rate = 0;  // Of every prompt's prefill FLOPs, those the hits saved.
  std::vector<FleetNodeStats> per_node;
  uint32_t idle_nodes = 0;  // Nodes the router sent nothing.
  // G4 traffic of the whole fleet, bytes per second over each window of the trace.
  Percentiles g4_read_bytes_per_second;
  Percentiles g4_write_bytes_per_second;
  // The same per window, in order: what a chart of G4 traffic over time draws.
  double g4_window_seconds = 0;
  std::vector<double> g4_read_series;
  std::vector<double> g4_write_series;
  uint64_t g4_bytes_read = 0;
  uint64_t g4_bytes_written = 0;
  uint64_t g4_evictions = 0;  // Objects a bounded G4 dropped.
  Percentiles ttft_seconds;   // Prefill part: queueing plus prefill with the cache.
  double prefill_seconds_without_cache = 0;
  double prefill_seconds_with_cache = 0;
  uint32_t tensor_parallel = 1;
  uint64_t puts_failed = 0;
  std::string first_put_error;

  uint64_t total_hit_blocks() const;
  double block_hit_rate() const;
  double token_hit_rate() const;  // Hit tokens / prompt tokens.
  double source_hit_rate(HitSource source) const;  // Of the block references.
  double local_hit_rate() const;  // Own G2 and G3.
  // Largest node busy time over the mean; 1 when the nodes are equally busy.
  double imbalance() const;
  // Busy time of the busiest node over the trace's duration: above 1, its queue grows.
  double peak_utilization() const;
  double gpu_hours_saved() const;
};

// InvalidArgument for 0 nodes, a missing G2 prefill model, a hybrid model, a load cap below 1,
// a G4 capacity without G4 or below one block, and Replay's errors.
Result<FleetReport> FleetReplay(const Trace& trace, const FleetOptions& options);

struct FleetComparison {
  // Every router with G4 as the options say (unbounded, on put, when they have none), every
  // router without G4, then one cache with and without G4.
  std::vector<FleetReport> runs;
  double infinite_block_hit_rate = 0;  // Every block ever stored stays, anywhere.
  double infinite_token_hit_rate = 0;
};

Result<FleetComparison> CompareFleet(const Trace& trace, const FleetOptions& options);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_FLEET_REPLAY_H_
