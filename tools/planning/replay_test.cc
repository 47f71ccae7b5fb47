#include "tools/planning/replay.h"

#include <gtest/gtest.h>

#include <sstream>

namespace kvtier::planning {
namespace {

// Llama 3.1 8B, BF16: 131,072 bytes per token, so a 4-token block is 512 KiB.
constexpr uint64_t kBlockBytes = 4 * 131'072;

Trace ParseOrDie(const std::string& text) {
  std::istringstream in(text);
  Result<Trace> t = ParseTrace(in, {});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return *t;
}

ReplayOptions Options(uint64_t capacity) {
  ReplayOptions o;
  o.model = *FindModel("llama-3.1-8b");
  o.g2_capacity_bytes = capacity;
  return o;
}

// Four requests with 4-token blocks and room for everything:
//   t=0s  [1 2 3]  12 tokens: 3 misses
//   t=1s  [1 2 4]  12 tokens: 1, 2 hit (8 tokens), 4 missed
//   t=2s  [1 2 5]  10 tokens: 1, 2 hit (8 tokens), 5 (2 tokens) missed
//   t=3s  [9]       4 tokens: miss
// Block hit rate 4/10, token hit rate 16/38; of the six blocks written only 1 and 2 are read.
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
  EXPECT_EQ(r->block_references, 10u);
  EXPECT_EQ(r->hit_blocks(), 4u);
  EXPECT_DOUBLE_EQ(r->block_hit_rate(), 0.4);
  EXPECT_EQ(r->prompt_tokens, 38u);
  EXPECT_EQ(r->hit_tokens(), 16u);
  EXPECT_DOUBLE_EQ(r->token_hit_rate(), 16.0 / 38);
  const TierReplayStats& g2 = r->tiers[TierSlot(TierLevel::kG2)];
  EXPECT_EQ(g2.hit_blocks, 4u);
  EXPECT_EQ(g2.bytes_read, 4 * kBlockBytes);
  EXPECT_EQ(g2.bytes_written, 5 * kBlockBytes + kBlockBytes / 2);
  EXPECT_EQ(r->blocks_written, 6u);
  EXPECT_EQ(r->blocks_never_read, 4u);
  EXPECT_EQ(r->puts_accepted, 6u);
  EXPECT_EQ(r->puts_stored, 6u);
  EXPECT_EQ(r->writes_declined(), 0u);
  EXPECT_EQ(r->evictions, 0u);
  EXPECT_EQ(r->unique_blocks, 6u);
  EXPECT_EQ(r->tiers[TierSlot(TierLevel::kG3)].hit_blocks, 0u);
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
  EXPECT_EQ(r->blocks_written, 3u);
  EXPECT_EQ(r->blocks_never_read, 2u);

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
  // Footprint: five full blocks and one half block = 5.5 blocks.
  EXPECT_EQ(curve->back().capacity_bytes, 5 * kBlockBytes + kBlockBytes / 2);
  EXPECT_DOUBLE_EQ(curve->back().block_hit_rate, 0.4);
  for (const CapacityPoint& p : *curve) EXPECT_LE(p.block_hit_rate, 0.4);
}

}  // namespace
}  // namespace kvtier::planning
