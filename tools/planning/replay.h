// Trace replay: drives the real kvtier Store, in payload-free simulation mode and on the
// trace's clock, with a prefix-hash trace, and reports what the cache would have done.
//
// Per request, in timestamp order: the virtual clock is set to the request's time; the
// request's whole blocks become BlockKeys (OpaqueBlockKey of the hash id, in a namespace per
// tenant), put under the request's session when the trace names one; a trailing partial block
// is never keyed by kvtier, so it is neither looked up nor stored (its tokens still count in
// the prompt). LookupPrefix finds the prefix cached in G2;
// the prefix goes on in G3, then G4, when they are simulated, and the blocks found there are
// promoted into G2 (Put without a parent, as the Store promotes); the missing blocks are Put
// in order, each with its predecessor as PutOptions::parent. A block's value size is the KV
// bytes of its tokens (KvBytesForTokens); the bytes themselves are never touched. Eviction,
// chains, budgets, TTLs and G3 admission are the Store's own: nothing here re-implements them.
//
// A hybrid model (ReplayOptions::state_bytes > 0) resumes only where a state snapshot is
// (docs/state.md): a request's hit is the Store's LookupResume of its blocks with one
// boundary state group, its missing blocks are put as KV that needs state, and it stores a
// snapshot of `state_bytes` at its last whole block and, with `snapshot_every` N, at every
// N-th block boundary it computes (interior snapshots, as engines that keep states at their
// prefix tree's nodes do). G2 only.
//
// G3 and G4 are simulated deterministically, on the same clock, with demotion and upload
// synchronous: every block G2 evicts that G3 admission (AdmissionOptions) takes is written to
// G3, whose capacity evicts in CLOCK order as the disk tier does, and, unless G4 holds it
// already, uploaded to G4 under the on-demotion write policy; under on-put every stored block
// is uploaded. G4 is unbounded (a bucket). Records are counted at the block's raw size.
//
// Thread safety: the functions are reentrant; each replay opens its own Store.

#ifndef KVTIER_TOOLS_PLANNING_REPLAY_H_
#define KVTIER_TOOLS_PLANNING_REPLAY_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/options.h"
#include "tools/planning/reference_policies.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "tools/planning/catalog.h"
#include "tools/planning/crossover.h"
#include "tools/planning/kv_math.h"
#include "tools/planning/trace.h"

namespace kvtier::planning {

inline constexpr int kNumTiers = 3;  // G2, G3, G4.
inline constexpr int TierSlot(TierLevel tier) { return static_cast<int>(tier) - 2; }

struct ReplayOptions {
  // The model whose KV the blocks hold; with kv_precision it sets every block's size.
  ModelSpec model;
  KvPrecision kv_precision = KvPrecision::kBf16;
  // Host DRAM (G2) capacity of the simulated store.
  uint64_t g2_capacity_bytes = 64 * kGiB;
  // Store allocation page; 0 = 64 KiB, raised when the capacity would exceed 2^32 pages.
  // Blocks waste under one page each, so the page should be small against a block.
  uint32_t page_bytes = 0;
  // G2 eviction's reused-queue shares (MemoryTierOptions).
  double initial_reused_share = MemoryTierOptions{}.initial_reused_share;
  double max_reused_share = MemoryTierOptions{}.max_reused_share;
  // Per-tenant TTL since last access, in trace seconds; 0 = never expire.
  uint64_t ttl_seconds = 0;
  // Simulated G3 (local SSD) capacity; 0 = no G3.
  uint64_t g3_capacity_bytes = 0;
  // Which G2 evictions are written to G3 (and to G4 on demotion): the Store's own rule.
  AdmissionOptions g3_admission;
  // Simulate G4, written under `g4_write_policy`.
  bool g4 = false;
  SharedTierOptions::WritePolicy g4_write_policy = SharedTierOptions::WritePolicy::kOnDemotion;
  // For prefill time saved: the prefill model with the link that serves hits from each
  // tier, indexed by TierSlot. A tier without one has its hits valued with the G2 model;
  // without a G2 model no time is computed.
  std::array<std::optional<PrefillModel>, kNumTiers> reload_by_tier;
  // A hybrid model's state snapshot (StateBytesPerSnapshot); 0 = none needed. G2 only.
  uint64_t state_bytes = 0;
  // Also store a snapshot at every N-th block boundary a request computes; 0 = at its last
  // whole block only.
  uint32_t snapshot_every = 0;
  // Send the trace's session hints (retain_s, finished) to the Store after each request.
  bool apply_hints = false;
};

struct TierReplayStats {
  uint64_t hit_blocks = 0;
  uint64_t hit_tokens = 0;
  uint64_t bytes_read = 0;     // KV bytes of the blocks served from this tier.
  uint64_t bytes_written = 0;  // KV bytes put into this tier (puts and promotions land in G2).
  uint64_t blocks_written = 0;
  uint64_t blocks_never_read = 0;  // Of the copies written here, those never read from here.
};

struct ReplayReport {
  uint64_t capacity_bytes = 0;
  uint64_t requests = 0;
  uint64_t block_references = 0;
  uint64_t prompt_tokens = 0;      // Sum of input_length.
  uint64_t referenced_tokens = 0;  // Tokens covered by hash ids (the cacheable part).
  uint64_t unique_blocks = 0;
  uint64_t unique_block_bytes = 0;  // Footprint of every distinct block: capacity for 100%.
  uint64_t block_bytes = 0;         // KV bytes of one block.
  double duration_seconds = 0;      // Trace time from the first request to the last.
  std::array<TierReplayStats, kNumTiers> tiers;
  uint64_t g3_capacity_bytes = 0;   // 0 = G3 not simulated.
  bool g4 = false;                  // G4 simulated.
  uint64_t puts_accepted = 0;      // Puts of blocks that returned OK (promotions too).
  uint64_t puts_stored = 0;        // Of those, blocks the store kept (TenantStats::puts).
  uint64_t puts_failed = 0;        // Puts that returned an error (nothing evictable).
  std::string first_put_error;     // The first such error, for the report.
  uint64_t hints_sent = 0;         // Session hints the Store took (ReplayOptions::apply_hints).
  uint64_t hints_refused = 0;      // ...and refused (the session had no block left in G2).
  uint64_t evictions = 0;
  uint64_t expirations = 0;
  uint64_t lru_trials = 0;         // Times G2 eviction followed LRU for a trial (TenantStats).
  // G2 evictions G3 admission took, and those it declined (bytes that were not written to
  // G3: what admission saved the SSD), counted whether or not G3 is simulated.
  uint64_t evictions_admitted = 0;
  uint64_t evictions_declined = 0;
  // Hybrid models: snapshot size, snapshots stored, and KV blocks found in G2 past the last
  // snapshot a request could resume from (stored, but of no use to it).
  uint64_t state_bytes = 0;
  uint64_t snapshots_written = 0;
  uint64_t unresumable_kv_blocks = 0;
  bool has_prefill_model = false;
  double prefill_seconds_without_cache = 0;
  double prefill_seconds_with_cache = 0;
  uint32_t tensor_parallel = 1;

  uint64_t admission_saved_bytes() const { return evictions_declined * block_bytes; }
  uint64_t hit_blocks() const;
  uint64_t hit_tokens() const;
  double block_hit_rate() const;
  double token_hit_rate() const;  // Hit tokens / prompt tokens.
  // Of the G2 copies written, those never read.
  double never_read_share() const;
  // Writes the store declined while returning OK: what an admission policy saves.
  uint64_t writes_declined() const { return puts_accepted - puts_stored; }
  double prefill_seconds_saved() const {
    return prefill_seconds_without_cache - prefill_seconds_with_cache;
  }
  double gpu_hours_saved() const { return prefill_seconds_saved() * tensor_parallel / 3600; }
};

// InvalidArgument when a block exceeds the store's 1 GiB block limit or the capacity is
// smaller than the largest block; errors from Store::Open otherwise.
Result<ReplayReport> Replay(const Trace& trace, const ReplayOptions& options);

struct CapacityPoint {
  uint64_t capacity_bytes = 0;
  double block_hit_rate = 0;
  double token_hit_rate = 0;
};

// Replays once per capacity, G2 only. An empty `capacities` picks 1/64, 1/32, ..., 1/2 and 1
// times the trace's unique footprint (capacities below one block are left out).
Result<std::vector<CapacityPoint>> CapacityCurve(const Trace& trace, const ReplayOptions& options,
                                                 std::vector<uint64_t> capacities);

// One policy's outcome at one G2 capacity.
struct PolicyResult {
  std::string policy;  // "kvtier", or a ReferencePolicyName.
  uint64_t hit_blocks = 0;
  uint64_t hit_tokens = 0;
  double block_hit_rate = 0;  // Of the block references.
  double token_hit_rate = 0;  // Of the prompt tokens.
  // Of the prefill FLOPs of every prompt, those the hits saved: a hit at depth d saves the
  // dense FLOPs of its tokens and their attention to the d tokens before them, so deep hits
  // weigh more. 0 without a G2 prefill model.
  double flop_hit_rate = 0;
  double gpu_hours_saved = 0;  // Reloading hits over the G2 link; 0 without a model.
};

struct ComparePoint {
  uint64_t capacity_bytes = 0;
  uint64_t capacity_blocks = 0;  // Whole blocks (page-rounded) that fit.
  // kvtier first, then "kvtier+hints" when the trace has hints, then kReferencePolicies in
  // order.
  std::vector<PolicyResult> policies;
};

// kvtier's G2 (the Store, G3 and G4 off) beside the reference policies at each capacity
// (chosen as CapacityCurve does), on the same references; for a trace with hints, kvtier with
// them too.
Result<std::vector<ComparePoint>> ComparePolicies(const Trace& trace, const ReplayOptions& options,
                                                  std::vector<uint64_t> capacities);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_REPLAY_H_
