#include "tools/planning/crossover.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tools/planning/cli_util.h"
#include "tools/planning/cost.h"

namespace kvtier::planning {
namespace {

// Llama 3.1 8B by hand: 6,979,588,096 matmul parameters per token (8,030,261,248 minus the
// two 128,256 x 4,096 embedding tables); attention 2 x 32 heads x (128 + 128) x 32 layers x
// T^2 / 2 = 262,144 T^2 FLOPs; KV 131,072 bytes per token. H100 BF16 at 50% MFU: 494.5 TFLOP/s.
constexpr double kDenseFlopsPerToken = 2.0 * 6'979'588'096;
constexpr double kAttentionFlopsPerTokenSquared = 262'144;
constexpr double kFlopsPerSecond = 989e12 * 0.5;
constexpr double kKvBytesPerToken = 131'072;

PrefillModel Llama8b(const char* gpu, const char* link, PrefillOptions options = {}) {
  Result<PrefillModel> m =
      PrefillModel::Create(*FindModel("llama-3.1-8b"), *FindGpu(gpu), *FindLink(link), options);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

TEST(CrossoverTest, RecomputeAndReloadTimesByHand) {
  const PrefillModel m = Llama8b("h100", "nvme-gen4");
  const double t = 10'000;
  const double recompute =
      (kDenseFlopsPerToken * t + kAttentionFlopsPerTokenSquared * t * t) / kFlopsPerSecond;
  EXPECT_NEAR(m.RecomputeSeconds(t), recompute, 1e-12);
  EXPECT_NEAR(m.RecomputeSeconds(t), 0.335301, 1e-6);
  // One shared 7 GB/s SSD, 100 us per reload.
  const double reload = 100e-6 + kKvBytesPerToken * t / 7e9;
  EXPECT_NEAR(m.ReloadSeconds(t), reload, 1e-12);
  EXPECT_NEAR(m.Speedup(t), recompute / reload, 1e-9);
  EXPECT_NEAR(m.Speedup(t), 1.78974, 1e-5);
}

TEST(CrossoverTest, CrossoverLengthByHand) {
  // reload(T) <= recompute(T)  <=>  b T^2 + (a - c) T - L >= 0 with
  // a = dense seconds per token, b = attention seconds per token^2, c = link seconds per
  // token, L = latency: the positive root, rounded up to a whole token.
  const PrefillModel m = Llama8b("h100", "nvme-gen4");
  const double a = kDenseFlopsPerToken / kFlopsPerSecond;
  const double b = kAttentionFlopsPerTokenSquared / kFlopsPerSecond;
  const double c = kKvBytesPerToken / 7e9;
  const double latency = 100e-6;
  const double root = (-(a - c) + std::sqrt((a - c) * (a - c) + 4 * b * latency)) / (2 * b);
  EXPECT_NEAR(root, 10.52, 0.01);
  ASSERT_TRUE(m.CrossoverTokens().has_value());
  EXPECT_EQ(*m.CrossoverTokens(), static_cast<uint64_t>(std::ceil(root)));
  EXPECT_EQ(*m.CrossoverTokens(), 11u);
}

TEST(CrossoverTest, FastGpusAndASlowSharedLinkPushTheCrossoverOut) {
  // Eight B200s at FP8 recompute a token in 0.78 us, while the one SSD moves the whole
  // group's 128 KiB per token in 18.7 us: only the quadratic attention term catches up.
  PrefillOptions o;
  o.tensor_parallel = 8;
  o.fp8_compute = true;
  const PrefillModel m = Llama8b("b200", "nvme-gen4", o);
  const double flops = 8 * 4500e12 * 0.5;
  const double a = kDenseFlopsPerToken / flops;
  const double b = kAttentionFlopsPerTokenSquared / flops;
  const double c = kKvBytesPerToken / 7e9;  // 1/8 per GPU, times 8 GPUs on one link.
  const double root = (-(a - c) + std::sqrt((a - c) * (a - c) + 4 * b * 100e-6)) / (2 * b);
  ASSERT_TRUE(m.CrossoverTokens().has_value());
  EXPECT_EQ(*m.CrossoverTokens(), static_cast<uint64_t>(std::ceil(root)));
  EXPECT_GT(*m.CrossoverTokens(), 1'000'000u);
  EXPECT_FALSE(m.CrossoverTokens(100'000).has_value());
}

TEST(CrossoverTest, TensorParallelSplitsGqaKvButNotMlaLatent) {
  PrefillOptions o;
  o.tensor_parallel = 16;
  // 8 KV heads over 16 ranks: each rank holds one head, 1/8 of the KV.
  const PrefillModel llama = Llama8b("h100", "pcie-gen5", o);
  EXPECT_DOUBLE_EQ(llama.ReloadBytesPerGpu(1000), kKvBytesPerToken * 1000 / 8);
  Result<PrefillModel> ds = PrefillModel::Create(*FindModel("deepseek-v3"), *FindGpu("h200"),
                                                 *FindLink("400gbe"), o);
  ASSERT_TRUE(ds.ok());
  EXPECT_DOUBLE_EQ(ds->ReloadBytesPerGpu(1000), 70'272.0 * 1000);
}

TEST(CrossoverTest, SlidingWindowAttentionIsLinearPastTheWindow) {
  const PrefillModel m = Llama8b("h100", "pcie-gen5");
  Result<PrefillModel> mistral = PrefillModel::Create(*FindModel("mistral-7b"), *FindGpu("h100"),
                                                      *FindLink("pcie-gen5"), {});
  ASSERT_TRUE(mistral.ok());
  // 32 layers x 32 heads x 256 x 2 FLOPs per pair; pairs of a 4096 window at T = 10,000:
  // 4096 x 10,000 - 4096^2 / 2.
  const double pairs = 4096.0 * 10'000 - 4096.0 * 4096 / 2;
  EXPECT_DOUBLE_EQ(mistral->AttentionFlops(0, 10'000), 2.0 * 32 * 256 * 32 * pairs);
  EXPECT_DOUBLE_EQ(m.AttentionFlops(0, 10'000), kAttentionFlopsPerTokenSquared * 1e8);
}

TEST(CrossoverTest, RejectsNonsense) {
  const ModelSpec model = *FindModel("llama-3.1-8b");
  PrefillOptions o;
  o.mfu = 1.5;
  EXPECT_EQ(PrefillModel::Create(model, *FindGpu("h100"), *FindLink("pcie-gen5"), o)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  o.mfu = 0.5;
  o.tensor_parallel = 0;
  EXPECT_FALSE(PrefillModel::Create(model, *FindGpu("h100"), *FindLink("pcie-gen5"), o).ok());
  o.tensor_parallel = 1;
  o.fp8_compute = true;
  EXPECT_FALSE(PrefillModel::Create(model, *FindGpu("a100"), *FindLink("pcie-gen5"), o).ok());
}

TEST(CostTest, DollarsPerMillionTokensByHand) {
  const PrefillModel m = Llama8b("h100", "pcie-gen5");
  // Hit rate 0.5 on a 1,000-token prompt: reload 500 tokens over PCIe 5 (64 GB/s, 10 us),
  // prefill positions 500..1000.
  const double reload = 10e-6 + 500 * kKvBytesPerToken / 64e9;
  const double suffix = (kDenseFlopsPerToken * 500 +
                         kAttentionFlopsPerTokenSquared * (1000.0 * 1000 - 500.0 * 500)) /
                        kFlopsPerSecond;
  Result<CostPoint> p = CostAtHitRate(m, 2.0, 1000, 0.5);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->ttft_seconds, reload + suffix, 1e-12);
  EXPECT_NEAR(p->usd_per_million_prompt_tokens, (reload + suffix) * 2.0 / 3600 * 1e6 / 1000,
              1e-12);
  EXPECT_NEAR(p->usd_per_million_prompt_tokens, 0.0086367, 1e-6);
  Result<CostPoint> cold = CostAtHitRate(m, 2.0, 1000, 0.0);
  ASSERT_TRUE(cold.ok());
  EXPECT_NEAR(cold->usd_per_million_prompt_tokens, 0.0159772, 1e-6);
}

TEST(CostTest, CurveFallsWithHitRateAndRejectsBadInput) {
  const PrefillModel m = Llama8b("h100", "pcie-gen5");
  Result<std::vector<CostPoint>> curve = CostCurve(m, 2.0, 8192, 10);
  ASSERT_TRUE(curve.ok());
  ASSERT_EQ(curve->size(), 11u);
  for (size_t i = 1; i < curve->size(); ++i) {
    EXPECT_LT((*curve)[i].usd_per_million_prompt_tokens,
              (*curve)[i - 1].usd_per_million_prompt_tokens);
  }
  EXPECT_EQ(CostAtHitRate(m, 2.0, 1000, 1.2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(CostAtHitRate(m, -1.0, 1000, 0.5).ok());
  EXPECT_FALSE(CostAtHitRate(m, 2.0, 0, 0.5).ok());
}

TEST(CostTest, PublishedWorkedExampleReloads128kTokensOfLlama70bFp8In859Ms) {
  // Llama 3.3 70B, FP8 KV (80 layers x 8 KV heads x 128 x 2 x 1 byte = 163,840 B per token),
  // 131,072 tokens = 21.47 GB, over one 25 GB/s link (200GbE): 858.99 ms plus 20 us latency.
  PrefillOptions o;
  o.kv_precision = KvPrecision::kFp8;
  Result<PrefillModel> m =
      PrefillModel::Create(*FindModel("llama-3.3-70b"), *FindGpu("h100"), *FindLink("200gbe"), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NEAR(m->ReloadSeconds(131072), 20e-6 + 131072.0 * 163840 / 25e9, 1e-12);
  EXPECT_NEAR(m->ReloadSeconds(131072), 0.859, 0.0005);
}

TEST(CostTest, ComparisonSetsTheCacheAgainstNoCache) {
  const PrefillModel m = Llama8b("h100", "pcie-gen5");
  CostScenario sc;
  sc.prompt_tokens = 1000;
  sc.hit_rate = 0.5;
  sc.usd_per_gpu_hour = 2.0;
  sc.data_reduction_ratio = 1.25;
  Result<CostComparison> c = CompareCost(m, sc);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // The same figures as DollarsPerMillionTokensByHand, put side by side.
  EXPECT_NEAR(c->without_cache.usd_per_million_prompt_tokens, 0.0159772, 1e-6);
  EXPECT_NEAR(c->with_cache.usd_per_million_prompt_tokens, 0.0086367, 1e-6);
  EXPECT_NEAR(c->gpu_seconds_saved,
              c->without_cache.gpu_seconds_per_prompt - c->with_cache.gpu_seconds_per_prompt, 1e-15);
  EXPECT_NEAR(c->gpu_time_saved_fraction, 1 - 0.0086367 / 0.0159772, 1e-4);
  EXPECT_NEAR(c->ttft_speedup, c->without_cache.ttft_seconds / c->with_cache.ttft_seconds, 1e-12);
  EXPECT_EQ(c->kv_bytes_per_session, 1000 * kKvBytesPerToken);
  EXPECT_EQ(c->kv_bytes_per_session_reduced, 1000 * kKvBytesPerToken / 1.25);
  sc.data_reduction_ratio = 0.9;
  EXPECT_EQ(CompareCost(m, sc).status().code(), StatusCode::kInvalidArgument);
}

TEST(CostTest, PriceTablesParseAndBadOnesSayWhatIsWrong) {
  Result<std::vector<ApiPrice>> builtin = ParseApiPrices(BuiltinApiPricesToml());
  ASSERT_TRUE(builtin.ok()) << builtin.status().ToString();
  ASSERT_GE(builtin->size(), 5u);
  for (const ApiPrice& p : *builtin) {
    EXPECT_FALSE(p.as_of.empty()) << p.model;
    EXPECT_TRUE(p.url.starts_with("https://")) << p.model;
  }
  Result<std::vector<ApiPrice>> one = ParseApiPrices(
      "[[price]]\nprovider = \"X\"\nmodel = \"m\"\ninput_usd_per_m = 2\n"
      "cached_input_usd_per_m = 0.5\n");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ((*one)[0].input_usd_per_million, 2.0);
  EXPECT_EQ((*one)[0].cached_input_usd_per_million, 0.5);
  auto error = [](std::string_view text) {
    Result<std::vector<ApiPrice>> r = ParseApiPrices(text);
    EXPECT_FALSE(r.ok());
    return std::string(r.status().message());
  };
  EXPECT_NE(error("[[price]\n").find("not valid TOML"), std::string::npos);
  EXPECT_NE(error("x = 1\n").find("no [[price]]"), std::string::npos);
  EXPECT_NE(error("[[price]]\nprovider = \"X\"\nmodel = \"m\"\ninput_usd_per_m = 1\n")
                .find("needs provider, model"),
            std::string::npos);
  EXPECT_NE(error("[[price]]\nprovider = \"X\"\nmodel = \"m\"\ninput_usd_per_m = 1\n"
                  "cached_input_usd_per_m = 2\n")
                .find("not above the input price"),
            std::string::npos);
  EXPECT_NE(error("[[price]]\nprovider = \"X\"\nmodel = \"m\"\ninput_usd = 1\n")
                .find("unknown field 'input_usd'"),
            std::string::npos);
}

}  // namespace
TEST(CrossoverTest, MeasuredRatesStandInForTheCatalog) {
  cli::PrefillFlags f;
  f.model = "llama-3.1-8b";
  f.gpu = "no-such-gpu";
  f.link = "no-such-link";
  f.gpu_tflops = 0.5;
  f.mfu = 1;
  f.link_gbps = 4;
  f.link_latency_us = 100;
  Result<PrefillModel> m = f.Build();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_DOUBLE_EQ(m->GroupFlopsPerSecond(), 0.5e12);
  const double t = 4096;
  EXPECT_DOUBLE_EQ(m->RecomputeSeconds(t), (m->DenseFlops(0, t) + m->AttentionFlops(0, t)) / 0.5e12);
  EXPECT_NEAR(m->ReloadSeconds(t), 100e-6 + m->ReloadBytesPerGpu(t) / 4e9, 1e-12);
  f.gpu_tflops = 0;  // Without the rates, the names must resolve.
  EXPECT_FALSE(f.Build().ok());
}

TEST(CrossoverTest, AttentionRunsAtItsOwnUtilisation) {
  cli::PrefillFlags f;
  f.model = "llama-3.1-8b";
  f.gpu_tflops = 1;
  f.mfu = 0.8;
  f.link_gbps = 10;
  Result<PrefillModel> same = f.Build();
  f.attention_mfu = 0.2;
  Result<PrefillModel> slow = f.Build();
  ASSERT_TRUE(same.ok() && slow.ok());
  const double t = 65536;
  EXPECT_DOUBLE_EQ(slow->RecomputeSeconds(t),
                   slow->DenseFlops(0, t) / 0.8e12 + slow->AttentionFlops(0, t) / 0.2e12);
  // Only the attention part grows: a suffix after a long cached prefix is mostly attention.
  EXPECT_GT(slow->SuffixSeconds(t - 256, t) / same->SuffixSeconds(t - 256, t),
            slow->RecomputeSeconds(1024) / same->RecomputeSeconds(1024));
  EXPECT_DOUBLE_EQ(slow->ReloadSeconds(t), same->ReloadSeconds(t));
  f.attention_mfu = 1.5;
  EXPECT_FALSE(f.Build().ok());
}

}  // namespace kvtier::planning
