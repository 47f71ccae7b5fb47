#include "tools/planning/replay.h"

#include <gtest/gtest.h>

#include <map>

#include "tools/planning/replay_test_util.h"
#include "tools/planning/trace_gen.h"

namespace kvtier::planning {
namespace {

ReplayOptions Options(uint64_t capacity) {
  ReplayOptions o;
  o.model = *FindModel("llama-3.1-8b");
  o.g2_capacity_bytes = capacity;
  return o;
}

// Four requests with 4-token blocks and room for everything:
//   t=0s  [1 2 3]  12 tokens: 3 misses
//   t=1s  [1 2 4]  12 tokens: 1, 2 hit (8 tokens), 4 missed
//   t=2s  [1 2 5]  10 tokens: 1, 2 hit (8 tokens); 5 holds 2 tokens, a partial block kvtier
//                  never keys: neither looked up nor stored
//   t=3s  [9]       4 tokens: miss
// Block hit rate 4/9, token hit rate 16/38; of the five blocks written only 1 and 2 are read.
const char* kSharedPrefixTrace =
    "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
    "{\"timestamp\": 0, \"input_length\": 12, \"hash_ids\": [1, 2, 3]}\n"
    "{\"timestamp\": 1000, \"input_length\": 12, \"hash_ids\": [1, 2, 4]}\n"
    "{\"timestamp\": 2000, \"input_length\": 10, \"hash_ids\": [1, 2, 5]}\n"
    "{\"timestamp\": 3000, \"input_length\": 4, \"hash_ids\": [9]}\n";

TEST(ReplayTest, HitRatesOfASharedPrefixWorkedByHand) {
  const Trace trace = ParseOrDie(kSharedPrefixTrace);
  Result<ReplayReport> r = Replay(trace, Options(64 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->requests, 4u);
  EXPECT_EQ(r->block_references, 9u);
  EXPECT_EQ(r->hit_blocks(), 4u);
  EXPECT_DOUBLE_EQ(r->block_hit_rate(), 4.0 / 9);
  EXPECT_EQ(r->prompt_tokens, 38u);
  EXPECT_EQ(r->hit_tokens(), 16u);
  EXPECT_DOUBLE_EQ(r->token_hit_rate(), 16.0 / 38);
  const TierReplayStats& g2 = r->tiers[TierSlot(TierLevel::kG2)];
  EXPECT_EQ(g2.hit_blocks, 4u);
  EXPECT_EQ(g2.bytes_read, 4 * kBlockBytes);
  EXPECT_EQ(g2.bytes_written, 5 * kBlockBytes);
  EXPECT_EQ(g2.blocks_written, 5u);
  EXPECT_EQ(g2.blocks_never_read, 3u);
  EXPECT_EQ(r->puts_accepted, 5u);
  EXPECT_EQ(r->puts_stored, 5u);
  EXPECT_EQ(r->writes_declined(), 0u);
  EXPECT_EQ(r->evictions, 0u);
  EXPECT_EQ(r->unique_blocks, 5u);
  EXPECT_EQ(r->referenced_tokens, 36u);
  EXPECT_EQ(r->tiers[TierSlot(TierLevel::kG3)].hit_blocks, 0u);
}

TEST(ReplayTest, AHybridModelResumesOnlyWhereASnapshotIs) {
  // Qwen3-Next: the KV of blocks 1 and 2 is there for the second and third requests, but with
  // snapshots at request tips only none is after block 2 (the first request's is after 3):
  //   r0 [1 2 3]  miss; snapshot after 3       r1 [1 2 4]  KV 1, 2 found, no resume; after 4
  //   r2 [1 2 (5)] KV found, no resume; after 2 r3 [9]      miss; after 9
  // Keeping a snapshot at every block boundary turns both into 2-block hits.
  const Trace trace = ParseOrDie(kSharedPrefixTrace);
  ReplayOptions o;
  o.model = *FindModel("qwen3-next");
  o.g2_capacity_bytes = 8 * kGiB;
  o.state_bytes = StateBytesPerSnapshot(o.model);
  Result<ReplayReport> tips = Replay(trace, o);
  ASSERT_TRUE(tips.ok()) << tips.status().ToString();
  EXPECT_EQ(tips->hit_blocks(), 0u);
  EXPECT_EQ(tips->unresumable_kv_blocks, 4u);
  EXPECT_EQ(tips->snapshots_written, 4u);
  EXPECT_EQ(tips->writes_declined(), 0u);  // Snapshots are not counted as blocks.
  o.snapshot_every = 1;
  Result<ReplayReport> every = Replay(trace, o);
  ASSERT_TRUE(every.ok()) << every.status().ToString();
  EXPECT_EQ(every->hit_blocks(), 4u);
  EXPECT_EQ(every->hit_tokens(), 16u);
  EXPECT_EQ(every->unresumable_kv_blocks, 0u);
  EXPECT_EQ(every->snapshots_written, 5u);  // 1, 2, 3; then 4; then 9.
  // Room for two snapshots: they and the KV evict each other, and the replay goes on.
  o.g2_capacity_bytes = 2 * o.state_bytes + 8 * 4 * 24'576;
  Result<ReplayReport> tight = Replay(trace, o);
  ASSERT_TRUE(tight.ok()) << tight.status().ToString();
  EXPECT_GT(tight->evictions, 0u);
  // A hybrid replay is G2's only.
  o.g4 = true;
  EXPECT_EQ(Replay(trace, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(ReplayTest, PrefillTimeSavedUsesTheCrossoverModel) {
  const Trace trace = ParseOrDie(kSharedPrefixTrace);
  ReplayOptions o = Options(64 * kMiB);
  Result<PrefillModel> m = PrefillModel::Create(o.model, *FindGpu("h100"),
                                                *FindLink("pcie-gen5"), {});
  ASSERT_TRUE(m.ok());
  o.reload_by_tier[0] = *m;
  Result<ReplayReport> r = Replay(trace, o);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_prefill_model);
  const double without =
      2 * m->RecomputeSeconds(12) + m->RecomputeSeconds(10) + m->RecomputeSeconds(4);
  const double with = m->RecomputeSeconds(12) + m->PrefillWithCacheSeconds(8, 12) +
                      m->PrefillWithCacheSeconds(8, 10) + m->RecomputeSeconds(4);
  EXPECT_NEAR(r->prefill_seconds_without_cache, without, 1e-12);
  EXPECT_NEAR(r->prefill_seconds_with_cache, with, 1e-12);
  EXPECT_NEAR(r->gpu_hours_saved(), (without - with) / 3600, 1e-15);
}

TEST(ReplayTest, TenantsNeverShareBlocks) {
  const Trace trace = ParseOrDie(
      "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
      "{\"timestamp\": 0, \"input_length\": 8, \"hash_ids\": [1, 2], \"tenant\": \"a\"}\n"
      "{\"timestamp\": 1, \"input_length\": 8, \"hash_ids\": [1, 2], \"tenant\": \"b\"}\n"
      "{\"timestamp\": 2, \"input_length\": 8, \"hash_ids\": [1, 2], \"tenant\": \"a\"}\n");
  Result<ReplayReport> r = Replay(trace, Options(64 * kMiB));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_blocks(), 2u);  // Only tenant a's second request hits.
  EXPECT_EQ(r->unique_blocks, 4u);
}

TEST(ReplayTest, OneBlockOfCapacityHoldsOnlyTheLastBlock) {
  // A, B, A with room for exactly one block: B must evict A, so nothing ever hits.
  const Trace trace = ParseOrDie(
      "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
      "{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 1, \"input_length\": 4, \"hash_ids\": [2]}\n"
      "{\"timestamp\": 2, \"input_length\": 4, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 3, \"input_length\": 4, \"hash_ids\": [1]}\n");
  Result<ReplayReport> r = Replay(trace, Options(kBlockBytes));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hit_blocks(), 1u);  // Only the last request, right after the same block.
  EXPECT_EQ(r->evictions, 2u);
  EXPECT_EQ(r->tiers[TierSlot(TierLevel::kG2)].blocks_written, 3u);
  EXPECT_EQ(r->tiers[TierSlot(TierLevel::kG2)].blocks_never_read, 2u);

  Result<ReplayReport> too_small = Replay(trace, Options(kBlockBytes / 2));
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), StatusCode::kInvalidArgument);
}

TEST(ReplayTest, TtlRunsOnTraceTime) {
  // TTL 10 s since last access: the return after 5 s hits, the one 15 s later does not.
  const Trace trace = ParseOrDie(
      "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
      "{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 5000, \"input_length\": 4, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 20000, \"input_length\": 4, \"hash_ids\": [1]}\n");
  ReplayOptions o = Options(64 * kMiB);
  o.ttl_seconds = 10;
  Result<ReplayReport> r = Replay(trace, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_blocks(), 1u);
  EXPECT_EQ(r->expirations, 1u);
}

TEST(ReplayTest, CapacityCurveReachesTheAmpleCaseAtFullFootprint) {
  const Trace trace = ParseOrDie(kSharedPrefixTrace);
  Result<std::vector<CapacityPoint>> curve = CapacityCurve(trace, Options(0), {});
  ASSERT_TRUE(curve.ok()) << curve.status().ToString();
  ASSERT_FALSE(curve->empty());
  // Footprint: five whole blocks.
  EXPECT_EQ(curve->back().capacity_bytes, 5 * kBlockBytes);
  EXPECT_DOUBLE_EQ(curve->back().block_hit_rate, 4.0 / 9);
  for (const CapacityPoint& p : *curve) EXPECT_LE(p.block_hit_rate, 4.0 / 9);
}

TEST(ReplayTest, APartialBlockIsNeitherLookedUpNorStored) {
  // Block 7 holds 3 of its 4 tokens the first time: kvtier never keys it, so the second
  // request, where it is whole, misses it.
  const Trace trace = ParseOrDie(
      "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
      "{\"timestamp\": 0, \"input_length\": 7, \"hash_ids\": [6, 7]}\n"
      "{\"timestamp\": 1, \"input_length\": 8, \"hash_ids\": [6, 7]}\n");
  Result<ReplayReport> r = Replay(trace, Options(64 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->block_references, 3u);
  EXPECT_EQ(r->hit_blocks(), 1u);
  EXPECT_EQ(r->tiers[TierSlot(TierLevel::kG2)].blocks_written, 2u);
  EXPECT_EQ(r->prompt_tokens, 15u);
  EXPECT_EQ(r->referenced_tokens, 12u);
}

// Requests of single blocks, one per second.
Trace SingleBlockTrace(std::initializer_list<int> blocks) {
  std::string text = "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n";
  int t = 0;
  for (int b : blocks) {
    text += "{\"timestamp\": " + std::to_string(1000 * t++) + ", \"input_length\": 4, " +
            "\"hash_ids\": [" + std::to_string(b) + "]}\n";
  }
  return ParseOrDie(text);
}

TEST(ReplayTest, ComparePoliciesRunsEveryPolicyOnTheSameReferences) {
  // Room for two blocks when 3 arrives: OPT evicts 2 (needed after 1), OPT+bypass does not
  // store 3 at all, LRU evicts 1 and then misses everything.
  const Trace trace = SingleBlockTrace({1, 2, 3, 1, 2});
  Result<std::vector<ComparePoint>> points =
      ComparePolicies(trace, Options(0), {2 * kBlockBytes, 8 * kBlockBytes});
  ASSERT_TRUE(points.ok()) << points.status().ToString();
  ASSERT_EQ(points->size(), 2u);
  const ComparePoint& small = (*points)[0];
  EXPECT_EQ(small.capacity_blocks, 2u);
  std::map<std::string, uint64_t> hits;
  for (const PolicyResult& p : small.policies) hits[p.policy] = p.hit_blocks;
  EXPECT_EQ(hits.size(), 6u);
  EXPECT_EQ(hits["LRU"], 0u);
  EXPECT_EQ(hits["OPT"], 1u);
  EXPECT_EQ(hits["OPT+bypass"], 2u);
  EXPECT_EQ(hits["infinite"], 2u);
  EXPECT_LE(hits["kvtier"], hits["infinite"]);
  // With room for everything every policy hits both returns.
  for (const PolicyResult& p : (*points)[1].policies) {
    EXPECT_EQ(p.hit_blocks, 2u) << p.policy;
    EXPECT_DOUBLE_EQ(p.block_hit_rate, 0.4) << p.policy;
  }
}

TEST(ReplayTest, G3AdmissionAndPromotionAreReplayedDeterministically) {
  // G2 holds one block, G3 four; G3 admits blocks accessed twice.
  //   1     put
  //   1     G2 hit (second access)
  //   2     put: evicts 1, admitted, written to G3
  //   1     G3 hit, promoted: evicts 2 (one access), declined
  //   2     miss, put: evicts 1 again, admitted, but G3 holds it: not written again
  const Trace trace = SingleBlockTrace({1, 1, 2, 1, 2});
  ReplayOptions o = Options(kBlockBytes);
  o.g3_capacity_bytes = 4 * kBlockBytes;
  Result<ReplayReport> r = Replay(trace, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TierReplayStats& g2 = r->tiers[TierSlot(TierLevel::kG2)];
  const TierReplayStats& g3 = r->tiers[TierSlot(TierLevel::kG3)];
  EXPECT_EQ(g2.hit_blocks, 1u);
  EXPECT_EQ(g3.hit_blocks, 1u);
  EXPECT_EQ(g3.bytes_read, kBlockBytes);
  EXPECT_EQ(g3.blocks_written, 1u);
  EXPECT_EQ(g3.blocks_never_read, 0u);
  EXPECT_EQ(r->evictions_admitted, 2u);
  EXPECT_EQ(r->evictions_declined, 1u);
  EXPECT_EQ(r->admission_saved_bytes(), kBlockBytes);
  EXPECT_EQ(g2.blocks_written, 4u);  // Three puts and one promotion.
  // G2 stored every put it took, the promotion included: no write was declined.
  EXPECT_EQ(r->puts_accepted, 4u);
  EXPECT_EQ(r->writes_declined(), 0u);

  Result<ReplayReport> again = Replay(trace, o);
  ASSERT_TRUE(again.ok());
  for (int t = 0; t < kNumTiers; ++t) {
    EXPECT_EQ(again->tiers[t].hit_blocks, r->tiers[t].hit_blocks);
    EXPECT_EQ(again->tiers[t].bytes_written, r->tiers[t].bytes_written);
    EXPECT_EQ(again->tiers[t].blocks_never_read, r->tiers[t].blocks_never_read);
  }
  EXPECT_EQ(again->evictions, r->evictions);
}

TEST(ReplayTest, G4OnPutUploadsEveryBlockOnceAndServesWhatG2Lost) {
  // G2 holds one block and no G3: every block is uploaded when put; 1 comes back from G4.
  const Trace trace = SingleBlockTrace({1, 2, 1});
  ReplayOptions o = Options(kBlockBytes);
  o.g4 = true;
  o.g4_write_policy = SharedTierOptions::WritePolicy::kOnPut;
  Result<ReplayReport> r = Replay(trace, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TierReplayStats& g4 = r->tiers[TierSlot(TierLevel::kG4)];
  EXPECT_EQ(g4.blocks_written, 2u);
  EXPECT_EQ(g4.hit_blocks, 1u);
  EXPECT_EQ(g4.blocks_never_read, 1u);  // Block 2.
  EXPECT_EQ(r->tiers[TierSlot(TierLevel::kG3)].blocks_written, 0u);
}

TEST(ReplayTest, SessionHintsReachTheStoreAndShowInTheComparison) {
  // Room for two one-block prompts. Session a waits on a tool call (retain 60 s) while b and c
  // come and go; a comes back at t=20 s. Without the hint LRU's order evicts a for c; with it,
  // b goes instead and a hits.
  const Trace trace = ParseOrDie(
      "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
      "{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1], \"session\": \"a\", "
      "\"retain_s\": 60}\n"
      "{\"timestamp\": 5000, \"input_length\": 4, \"hash_ids\": [2], \"session\": \"b\"}\n"
      "{\"timestamp\": 10000, \"input_length\": 4, \"hash_ids\": [3], \"session\": \"c\"}\n"
      "{\"timestamp\": 20000, \"input_length\": 4, \"hash_ids\": [1], \"session\": \"a\", "
      "\"finished\": true}\n");
  ASSERT_TRUE(trace.HasHints());
  ReplayOptions o = Options(2 * kBlockBytes);
  Result<ReplayReport> plain = Replay(trace, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->hit_blocks(), 0u);
  o.apply_hints = true;
  Result<ReplayReport> hinted = Replay(trace, o);
  ASSERT_TRUE(hinted.ok());
  EXPECT_EQ(hinted->hit_blocks(), 1u);
  EXPECT_EQ(hinted->hints_sent, 2u);
  Result<std::vector<ComparePoint>> points = ComparePolicies(trace, Options(0), {2 * kBlockBytes});
  ASSERT_TRUE(points.ok()) << points.status().ToString();
  std::map<std::string, uint64_t> hits;
  for (const PolicyResult& p : (*points)[0].policies) hits[p.policy] = p.hit_blocks;
  EXPECT_EQ(hits["kvtier"], 0u);
  EXPECT_EQ(hits["kvtier+hints"], 1u);
}

// A generated trace replayed at `blocks` blocks of G2: kvtier's and LRU's hits, and the LRU
// check's trials.
struct GeneratedRun {
  uint64_t kvtier = 0;
  uint64_t lru = 0;
  uint64_t lru_trials = 0;
};
GeneratedRun ReplayGenerated(Workload workload, uint64_t seed, uint64_t max_requests,
                             uint64_t blocks) {
  TraceGenOptions g = DefaultsFor(workload);
  g.seed = seed;
  g.max_requests = max_requests;
  Result<Trace> trace = GenerateTrace(g);
  EXPECT_TRUE(trace.ok()) << trace.status().ToString();
  if (!trace.ok()) return {};
  const uint64_t capacity = blocks * 512 * 131'072;  // Llama 3.1 8B, BF16, 512-token blocks.
  Result<ReplayReport> r = Replay(*trace, Options(capacity));
  Result<std::vector<ComparePoint>> points = ComparePolicies(*trace, Options(capacity), {capacity});
  EXPECT_TRUE(r.ok() && points.ok());
  if (!r.ok() || !points.ok()) return {};
  std::map<std::string, uint64_t> hits;
  for (const PolicyResult& p : (*points)[0].policies) hits[p.policy] = p.hit_blocks;
  EXPECT_EQ(hits["kvtier"], r->hit_blocks());
  return {hits["kvtier"], hits["LRU"], r->lru_trials};
}

// Where the policy's signals mislead, G2 follows LRU: on the first 6,000 requests of a generated
// coding-agent trace at 640 blocks the policy alone serves 180,438 blocks against LRU's 182,445
// (measured with the check switched off by hand); the check finds LRU ahead and follows it.
TEST(ReplayTest, WhereLruServesMoreTheStoreFollowsIt) {
  const GeneratedRun run = ReplayGenerated(Workload::kCodingAgent, 1, 6000, 640);
  EXPECT_GE(run.lru_trials, 1u);
  EXPECT_GE(run.kvtier, run.lru);
}

// Where the policy beats LRU it never leaves it: a generated chat trace at its smallest
// capacity, where the policy is 5 points above LRU.
TEST(ReplayTest, WhereThePolicyServesMoreItKeepsIt) {
  const GeneratedRun run = ReplayGenerated(Workload::kChat, 7, 0, 38);
  EXPECT_EQ(run.lru_trials, 0u);
  EXPECT_GT(run.kvtier, run.lru + run.lru / 10);
}

}  // namespace
}  // namespace kvtier::planning
