// Capacity sizing: from a workload description to the KV capacity each tier needs, the hit
// rate to expect, and what it buys in time to first token and GPU-hours.
//
// The model (docs/planning.md, "kvtier size", has the derivation):
// - Sessions arrive at sessions_per_day / 86,400 per second and make `turns` requests;
//   the idle gap before each later turn is exponential with mean g = idle_seconds.
// - A prompt of T tokens (T drawn from the context distribution) reuses its first
//   T - new_tokens_per_turn tokens from the previous turn, if the gap is at most the
//   retention R: probability 1 - exp(-R / g). First turns reuse shared_prefix_tokens.
// - A block idle for t seconds lives in G2 while t < g2_idle_seconds, in G3 while
//   t < g3_idle_seconds, then in G4 until R. By Little's law the bytes a tier holds are
//   (rate of gaps) x (KV bytes) x (expected time a gap spends in the tier's age band):
//   band [a, b): g x (exp(-a/g) - exp(-b/g)) for gaps between turns, (min(b,R) - min(a,R))
//   for the KV left after a session's last turn, which stays until retention drops it.
// - SSD (G3) writes: when retention outlasts g2_idle_seconds, every session's KV reaches G3
//   (after its last turn, if not in an earlier gap), and kvtier writes a block there once:
//   the demoter skips blocks G3 holds. So G3 takes sessions_per_day x the context's KV,
//   divided by the data reduction; more where G3 drops blocks a session comes back to
//   (g3_idle_seconds shorter than its gaps), less where G3 admission declines blocks. Drive
//   writes per day = those bytes / the drives' capacity (g3_drive_bytes, or the G3 capacity
//   sized here), against the drives' rating.
// - Capacity with data reduction divides by the ratio; hit rate and times are unchanged.
// - A fleet (nodes > 1): each node has its own G2 and G3 and all share G4, written on put so
//   that a node finds what another stored; G4 then holds every session's KV until retention
//   drops it. Sessions spread evenly, so a node's G2 and G3 hold 1/nodes of the fleet's. A
//   later turn finds its KV in its node's G2 or G3 (its gap's band) when the router keeps the
//   conversation there (kv-aware, session: `kvtier replay --nodes` measures how nearly), or
//   one time in `nodes` (round-robin, least-loaded); otherwise G4 serves it. G4 bandwidth:
//   reads are the turns G4 serves times the KV they reuse; writes are each request's new KV
//   (a first turn's past the shared prefix, a later turn's new tokens, all of it after the
//   retention dropped the session).
// - A target token hit rate sets the retention: the shortest one (to 30 days) that reaches
//   it, found by bisection (the hit rate grows with retention).

#ifndef KVTIER_TOOLS_PLANNING_SIZING_H_
#define KVTIER_TOOLS_PLANNING_SIZING_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "tools/planning/crossover.h"

namespace kvtier::planning {

struct ModelShare {
  std::string model;   // Catalog name or config.json path.
  double share = 1;    // Fraction of sessions; shares are normalised to sum to 1.
  uint32_t tensor_parallel = 8;
};

struct ContextBucket {
  uint64_t tokens = 0;  // Prompt length.
  double share = 1;     // Fraction of requests; normalised.
};

struct Scenario {
  std::string gpu = "h100";
  double mfu = 0.5;
  std::string kv_dtype = "bf16";
  double weight_bytes_per_param = 2;   // 2 = BF16 weights, 1 = FP8, 0.5 = FP4.
  double hbm_reserve_fraction = 0.1;   // HBM kept for activations, CUDA graphs, fragmentation.
  double gpu_hour_usd = 2.5;
  std::vector<ModelShare> models = {{"llama-3.1-70b", 1, 8}};
  uint64_t concurrent_sessions = 1000; // Sessions being served at once (their KV is in HBM).
  double sessions_per_day = 100000;
  std::vector<ContextBucket> context = {{8192, 0.6}, {32768, 0.3}, {131072, 0.1}};
  double turns_per_session = 6;
  uint64_t new_tokens_per_turn = 600;  // Prompt tokens a turn adds (not reusable).
  uint64_t shared_prefix_tokens = 0;   // System prompt every first turn finds cached.
  double idle_seconds = 60;            // Mean gap between a session's turns.
  double retention_seconds = 3600;
  double g2_idle_seconds = 120;
  double g3_idle_seconds = 1800;
  double data_reduction_ratio = 1;     // Compression/deduplication; >= 1.
  double g3_drive_bytes = 0;           // Raw capacity of the G3 drives; 0 = the sized G3.
  double drive_dwpd_rating = 1;        // Endurance rating, drive writes per day (1 = read-
                                       // intensive NVMe, 3 = mixed use).
  std::array<std::string, 3> tier_links = {"pcie-gen5", "nvme-gen5", "400gbe"};
  uint32_t nodes = 1;                  // Nodes with their own G2 and G3, sharing G4.
  std::string router = "kv-aware";     // A fleet's router (fleet_replay.h's names).
  double target_hit_rate = 0;          // > 0: solve the retention for this token hit rate.

  // InvalidArgument with the reason for nonsense (negative sizes, shares, turns < 1, ...).
  Status Validate() const;
};

// Reads a scenario from JSON (the field names above; every field optional). Unknown fields
// are an error so that typos do not silently fall back to defaults.
Result<Scenario> ParseScenarioJson(std::string_view json_text);
// The same scenario written as TOML: the same field names, `models` and `context` as arrays
// of tables, `tier_links` as a table.
Result<Scenario> ParseScenarioToml(std::string_view toml_text);

struct ModelSizing {
  std::string model;
  uint32_t tensor_parallel = 1;
  double session_share = 0;
  double kv_bytes_per_token = 0;        // At the mean context length.
  double weights_bytes_per_gpu = 0;
  double free_hbm_per_gpu_for_kv = 0;   // Bytes.
  double hbm_sessions_per_replica = 0;  // Sessions of mean context that fit in a replica's HBM.
  double replicas_for_concurrency = 0;  // Replicas whose HBM holds the concurrent sessions.
  std::array<double, 3> tier_bytes{};   // G2, G3, G4 capacity without data reduction.
  double token_hit_rate = 0;
  std::array<double, 3> tier_hit_share{};  // Share of hit tokens served by each tier.
  double ttft_without_cache = 0;        // Mean seconds.
  double ttft_with_cache = 0;
  double gpu_hours_saved_per_day = 0;
  double usd_saved_per_day = 0;
  double g3_write_bytes_per_day = 0;    // After data reduction.
  double g4_read_bytes_per_second = 0;  // Mean, the whole fleet, before data reduction.
  double g4_write_bytes_per_second = 0;
};

struct SizingReport {
  Scenario scenario;
  std::vector<ModelSizing> models;
  std::array<double, 3> tier_bytes{};   // Totals without data reduction.
  double token_hit_rate = 0;            // Request-weighted over models.
  double gpu_hours_saved_per_day = 0;
  double usd_saved_per_day = 0;
  double g3_write_bytes_per_day = 0;    // After data reduction.
  double g3_drive_writes_per_day = 0;   // Of the G3 drives (g3_drive_bytes or the sized G3).
  double g4_read_bytes_per_second = 0;  // Mean, the whole fleet, before data reduction.
  double g4_write_bytes_per_second = 0;
  // G2 and G3 of one node (tier_bytes / nodes); G4 is the fleet's.
  std::array<double, 3> tier_bytes_per_node{};
  // With a target hit rate: scenario.retention_seconds is the retention found for it.
  bool retention_solved = false;
};

// InvalidArgument for a scenario Validate refuses, an unknown GPU, dtype, link, model or
// router, a model that does not fit, and a target hit rate no retention reaches.
Result<SizingReport> ComputeSizing(const Scenario& scenario);

std::string SizingText(const SizingReport& report);
std::string SizingJson(const SizingReport& report);
std::string SizingHtml(const SizingReport& report);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_SIZING_H_
