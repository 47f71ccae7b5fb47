#include "tools/planning/sizing.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvtier::planning {
namespace {

// One Llama 3.1 8B replica on one H100; one session a second, two turns, 10,000-token
// prompts of which 1,000 are new per turn; gaps average 60 s and retention keeps blocks for
// 60 ln 4 s, so 3/4 of the second turns come back in time. Everything lives in G2.
Scenario HandScenario() {
  Scenario s;
  s.gpu = "h100";
  s.models = {{"llama-3.1-8b", 1, 1}};
  s.context = {{10'000, 1}};
  s.sessions_per_day = 86'400;
  s.concurrent_sessions = 10;
  s.turns_per_session = 2;
  s.new_tokens_per_turn = 1'000;
  s.idle_seconds = 60;
  s.retention_seconds = 60 * std::log(4.0);
  s.g2_idle_seconds = s.retention_seconds;
  s.g3_idle_seconds = s.retention_seconds;
  s.data_reduction_ratio = 2;
  return s;
}

TEST(SizingTest, HandWorkedScenario) {
  Result<SizingReport> r = ComputeSizing(HandScenario());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->models.size(), 1u);
  const ModelSizing& m = r->models[0];
  // 80 GiB x 0.9 minus 8,030,261,248 BF16 weights.
  EXPECT_DOUBLE_EQ(m.free_hbm_per_gpu_for_kv, 80.0 * (1 << 30) * 0.9 - 8'030'261'248.0 * 2);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 131'072);
  // Hit rate: half the requests are second turns, reusing 9,000 of 10,000 tokens 3/4 of
  // the time: 0.5 x 0.9 x 0.75.
  EXPECT_NEAR(m.token_hit_rate, 0.3375, 1e-12);
  // G2 holds 1.31 GB per gap for 60 x (1 - 1/4) s on average, and every session's final
  // KV for the whole retention time: 1.31072e9 x (45 + 60 ln 4) bytes.
  const double expected = 1.31072e9 * (45 + 60 * std::log(4.0));
  EXPECT_NEAR(m.tier_bytes[0], expected, 1);
  EXPECT_NEAR(m.tier_bytes[1], 0, 1e-6);
  EXPECT_NEAR(r->tier_bytes[0], expected, 1);
  EXPECT_NEAR(m.tier_hit_share[0], 1, 1e-12);
  EXPECT_LT(m.ttft_with_cache, m.ttft_without_cache);
  EXPECT_GT(m.gpu_hours_saved_per_day, 0);
  EXPECT_NE(SizingText(*r).find("33.8%"), std::string::npos);
  EXPECT_NE(SizingJson(*r).find("\"token_hit_rate\""), std::string::npos);
  EXPECT_NE(SizingHtml(*r).find("<table>"), std::string::npos);
}

TEST(SizingTest, SsdTakesEverySessionsKvOnce) {
  // Retention outlasts G2, so each of the sessions (one a second) writes its 10,000 tokens x
  // 131,072 bytes of KV to G3 once, halved by reduction; without that, G3 takes nothing.
  Scenario s = HandScenario();
  s.retention_seconds = 7200;
  s.g2_idle_seconds = 60 * std::log(2.0);
  s.g3_idle_seconds = 7200;
  s.g3_drive_bytes = 1e13;
  s.drive_dwpd_rating = 3;
  Result<SizingReport> r = ComputeSizing(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const double per_day = 86'400 * 1.31072e9 / 2;
  EXPECT_NEAR(r->models[0].g3_write_bytes_per_day, per_day, per_day * 1e-12);
  EXPECT_NEAR(r->g3_write_bytes_per_day, per_day, per_day * 1e-12);
  EXPECT_NEAR(r->g3_drive_writes_per_day, per_day / 1e13, 1e-9);
  EXPECT_NE(SizingText(*r).find("OVER the rating"), std::string::npos);
  s.g3_drive_bytes = 1e15;
  r = ComputeSizing(s);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(SizingText(*r).find("within it"), std::string::npos);
  s.g2_idle_seconds = s.g3_idle_seconds = s.retention_seconds;
  r = ComputeSizing(s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->g3_write_bytes_per_day, 0);
  EXPECT_FALSE(ParseScenarioJson(R"({"drive_dwpd_rating": 0})").ok());
  EXPECT_TRUE(ParseScenarioJson(R"({"drive_dwpd_rating": 3, "g3_drive_bytes": 8e12})").ok());
}

TEST(SizingTest, ATomlScenarioReadsAsItsJsonTwin) {
  Result<Scenario> json = ParseScenarioJson(R"({"gpu": "h200", "sessions_per_day": 5000,
      "models": [{"model": "llama-3.1-8b", "share": 1, "tp": 1}],
      "context": [{"tokens": 8192, "share": 0.7}, {"tokens": 32768, "share": 0.3}],
      "tier_links": {"g2": "pcie-gen5", "g3": "nvme-gen4", "g4": "100gbe"},
      "drive_dwpd_rating": 3})");
  Result<Scenario> toml = ParseScenarioToml(R"(
gpu = "h200"
sessions_per_day = 5000
drive_dwpd_rating = 3
tier_links = { g2 = "pcie-gen5", g3 = "nvme-gen4", g4 = "100gbe" }

[[models]]
model = "llama-3.1-8b"
share = 1
tp = 1

[[context]]
tokens = 8192
share = 0.7

[[context]]
tokens = 32768
share = 0.3
)");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  ASSERT_TRUE(toml.ok()) << toml.status().ToString();
  Result<SizingReport> a = ComputeSizing(*json), b = ComputeSizing(*toml);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(SizingJson(*a), SizingJson(*b));
  EXPECT_EQ(toml->tier_links[1], "nvme-gen4");
  EXPECT_EQ(toml->context.size(), 2u);
  // Bad TOML, and good TOML with a misspelt field, are clear errors.
  Result<Scenario> broken = ParseScenarioToml("gpu = \"h200\"\nsessions_per_day = [");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().ToString().find("not valid TOML"), std::string::npos);
  Result<Scenario> typo = ParseScenarioToml("sesions_per_day = 5");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().ToString().find("sesions_per_day"), std::string::npos);
}

TEST(SizingTest, LongerGapsMoveCapacityDownTheTiers) {
  Scenario s = HandScenario();
  s.retention_seconds = 7200;
  s.g2_idle_seconds = 30;
  s.g3_idle_seconds = 600;
  Result<SizingReport> r = ComputeSizing(s);
  ASSERT_TRUE(r.ok());
  const ModelSizing& m = r->models[0];
  EXPECT_GT(m.tier_bytes[2], m.tier_bytes[1]);
  EXPECT_NEAR(m.tier_hit_share[0] + m.tier_hit_share[1] + m.tier_hit_share[2], 1, 1e-9);
  EXPECT_GT(m.tier_hit_share[0], m.tier_hit_share[2]);
}

TEST(SizingTest, AFleetSharesG4AndItsRouterDecidesWhereHitsComeFrom) {
  // The hand-worked scenario on 4 nodes: every return within retention is a G2 hit on the
  // conversation's node under the KV-aware router; round-robin finds it there one time in
  // four and in G4 otherwise. The hit rate is the same either way: G4, written on put, holds
  // every session's KV for the retention.
  Scenario s = HandScenario();
  s.nodes = 4;
  Result<SizingReport> kv = ComputeSizing(s);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  const double g2 = 1.31072e9 * (45 + 60 * std::log(4.0));
  EXPECT_NEAR(kv->tier_bytes_per_node[0], g2 / 4, 1);
  EXPECT_NEAR(kv->tier_bytes[2], g2, 1);  // G4 holds what G2 holds, for the whole fleet.
  EXPECT_NEAR(kv->models[0].tier_hit_share[0], 1, 1e-12);
  EXPECT_NEAR(kv->g4_read_bytes_per_second, 0, 1e-6);
  // Writes: a first turn's 10,000 tokens; a second turn's 1,000 new ones when it comes back
  // in time (3/4), all 10,000 otherwise: 13,250 tokens of 131,072 bytes a second.
  EXPECT_NEAR(kv->g4_write_bytes_per_second, 13'250 * 131'072.0, 1);
  s.router = "round-robin";
  Result<SizingReport> rr = ComputeSizing(s);
  ASSERT_TRUE(rr.ok());
  EXPECT_NEAR(rr->token_hit_rate, kv->token_hit_rate, 1e-12);
  EXPECT_NEAR(rr->models[0].tier_hit_share[0], 0.25, 1e-12);
  EXPECT_NEAR(rr->models[0].tier_hit_share[2], 0.75, 1e-12);
  // 9/16 of the second turns (one a second) reload their 9,000 tokens from G4.
  EXPECT_NEAR(rr->g4_read_bytes_per_second, 9.0 / 16 * 9'000 * 131'072, 1);
  EXPECT_NE(SizingText(*rr).find("per node"), std::string::npos);
  s.router = "nearest";
  EXPECT_EQ(ComputeSizing(s).status().code(), StatusCode::kInvalidArgument);
}

TEST(SizingTest, ATargetHitRateSetsTheRetention) {
  // The hand-worked scenario reaches 33.75% at 60 ln 4 s of retention and at most 45% (every
  // second turn back in time).
  Scenario s = HandScenario();
  s.retention_seconds = 7200;
  s.target_hit_rate = 0.3375;
  Result<SizingReport> r = ComputeSizing(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->retention_solved);
  EXPECT_NEAR(r->scenario.retention_seconds, 60 * std::log(4.0), 1.5);
  EXPECT_GE(r->token_hit_rate, 0.3375);
  EXPECT_NE(SizingText(*r).find("the shortest that reaches"), std::string::npos);
  s.target_hit_rate = 0.46;
  Result<SizingReport> unreachable = ComputeSizing(s);
  ASSERT_FALSE(unreachable.ok());
  EXPECT_NE(unreachable.status().message().find("no retention reaches"), std::string_view::npos);
}

TEST(SizingTest, ParsesJsonAndRejectsNonsense) {
  Result<Scenario> s = ParseScenarioJson(R"({"gpu": "h200", "models": [{"model": "deepseek-v3",
      "share": 1, "tp": 8}], "context": [{"tokens": 4096, "share": 1}], "kv_dtype": "fp8",
      "weight_bytes_per_param": 1})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(ComputeSizing(*s).ok());

  EXPECT_FALSE(ParseScenarioJson(R"({"gpus": "h100"})").ok());  // Typo: unknown field.
  Result<Scenario> negative = ParseScenarioJson(R"({"retention_seconds": -5})");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("negative"), std::string_view::npos);
  EXPECT_FALSE(ParseScenarioJson(R"({"data_reduction_ratio": 0.5})").ok());
  EXPECT_FALSE(ParseScenarioJson(R"({"context": [{"tokens": 0, "share": 1}]})").ok());
  EXPECT_FALSE(ParseScenarioJson(R"({"nodes": 0})").ok());
  EXPECT_FALSE(ParseScenarioJson(R"({"target_hit_rate": 1.2})").ok());
  EXPECT_TRUE(ParseScenarioJson(R"({"nodes": 8, "router": "session"})").ok());

  Scenario too_big = HandScenario();
  too_big.models = {{"llama-3.1-405b", 1, 1}};  // 810 GB of BF16 weights on one GPU.
  Result<SizingReport> r = ComputeSizing(too_big);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not fit"), std::string_view::npos);
  Scenario unknown = HandScenario();
  unknown.gpu = "tpu-v5";
  EXPECT_EQ(ComputeSizing(unknown).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvtier::planning
