#include "tools/planning/kv_math.h"

#include <gtest/gtest.h>

#include "tools/planning/catalog.h"
#include "tools/planning/hf_config.h"

namespace kvtier::planning {
namespace {

ModelSpec Model(const char* name) {
  Result<ModelSpec> m = FindModel(name);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

TEST(KvMathTest, GqaBytesPerTokenByHand) {
  // Llama 3.1 70B: 80 layers, 8 KV heads of 128 -> 2 x 80 x 8 x 128 = 163,840 elements.
  const ModelSpec m = Model("llama-3.1-70b");
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kBf16), 327'680u);  // 320 KiB
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kFp8), 163'840u);
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kFp4), 81'920u);
  EXPECT_EQ(KvBytesForTokens(m, KvPrecision::kBf16, 1000), 327'680'000u);
  // Llama 3.1 8B: 2 x 32 x 8 x 128 x 2 = 131,072 (128 KiB).
  EXPECT_EQ(KvBytesPerToken(Model("llama-3.1-8b"), KvPrecision::kBf16), 131'072u);
}

TEST(KvMathTest, MlaBytesPerTokenByHand) {
  // DeepSeek-V3: 61 layers x (kv_lora_rank 512 + rope 64) = 35,136 elements.
  const ModelSpec m = Model("deepseek-r1");
  EXPECT_EQ(m.name, "deepseek-v3");
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kBf16), 70'272u);
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kFp8), 35'136u);
  // Kimi K2 has the same latent and layer count, so the same KV despite half the heads.
  EXPECT_EQ(KvBytesPerToken(Model("kimi-k2"), KvPrecision::kBf16), 70'272u);
}

TEST(KvMathTest, SlidingWindowLayersAreCappedAtTheWindow) {
  // gpt-oss-120b: 36 layers, 18 with a 128-token window; 2 x 8 x 64 x 2 = 2,048 B/layer/token.
  const ModelSpec m = Model("gpt-oss-120b");
  EXPECT_EQ(KvBytesPerTokenPerLayer(m, KvPrecision::kBf16), 2'048u);
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kBf16), 73'728u);
  EXPECT_EQ(KvBytesPerTokenBeyondWindow(m, KvPrecision::kBf16), 36'864u);
  EXPECT_EQ(KvBytesForTokens(m, KvPrecision::kBf16, 100), 100u * 73'728);
  // 10,000 tokens: 18 x 10,000 + 18 x 128 layer-tokens.
  EXPECT_EQ(KvBytesForTokens(m, KvPrecision::kBf16, 10'000), 2'048u * (18 * 10'000 + 18 * 128));
}

TEST(KvMathTest, ParameterCountsMatchPublishedFigures) {
  // Meta publishes 8,030,261,248 parameters for Llama 3.1 8B; the architecture gives it exactly.
  const ParameterCounts llama8 = CountParameters(Model("llama-3.1-8b"));
  EXPECT_EQ(llama8.total, 8'030'261'248u);
  EXPECT_EQ(llama8.active, llama8.total);
  EXPECT_EQ(llama8.active_matmul, 8'030'261'248u - 2u * 128'256 * 4'096);
  EXPECT_EQ(CountParameters(Model("llama-3.1-70b")).total, 70'553'706'496u);
  // DeepSeek-V3: 671B total, 37B active (36.6B + the 0.9B input embedding).
  const ParameterCounts ds = CountParameters(Model("deepseek-v3"));
  EXPECT_NEAR(ds.total / 1e9, 671, 1);
  EXPECT_NEAR((ds.active - ds.embedding / 2) / 1e9, 36.6, 0.1);
  // Mixtral 8x7B: 46.7B total, 12.9B active.
  const ParameterCounts mix = CountParameters(Model("mixtral-8x7b"));
  EXPECT_NEAR(mix.total / 1e9, 46.7, 0.1);
  EXPECT_NEAR(mix.active / 1e9, 12.9, 0.1);
  // gpt-oss-120b: 116.8B total, 5.1B active (model card).
  const ParameterCounts oss = CountParameters(Model("gpt-oss-120b"));
  EXPECT_NEAR(oss.total / 1e9, 116.8, 0.2);
  EXPECT_NEAR(oss.active / 1e9, 5.7, 0.1);  // 5.1B plus the 0.58B input embedding.
  EXPECT_NEAR(CountParameters(Model("qwen3-235b-a22b")).active / 1e9, 22.2, 0.2);
}

TEST(KvMathTest, EveryCatalogModelIsValid) {
  for (const ModelSpec& m : BuiltinModels()) {
    EXPECT_TRUE(m.Validate().ok()) << m.Validate().ToString();
    EXPECT_GT(KvBytesPerToken(m, KvPrecision::kBf16), 0u) << m.name;
  }
}

TEST(KvMathTest, UnknownNamesListWhatIsKnown) {
  Result<ModelSpec> m = FindModel("llama-9");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("llama-3.1-70b"), std::string_view::npos);
  Result<GpuSpec> g = FindGpu("tpu");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("h100"), std::string_view::npos);
  EXPECT_FALSE(ParseKvPrecision("int3").ok());
  EXPECT_TRUE(FindModel("LLAMA-3.1-70B").ok());
}

TEST(HfConfigTest, ReadsLlamaConfigJson) {
  const char* json = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8192,
    "intermediate_size": 28672, "num_attention_heads": 64, "num_hidden_layers": 80,
    "num_key_value_heads": 8, "tie_word_embeddings": false, "vocab_size": 128256,
    "rope_theta": 500000.0})";
  Result<ModelSpec> m = ModelFromHfConfig(json, "llama70.json");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->head_dim, 128u);
  EXPECT_EQ(KvBytesPerToken(*m, KvPrecision::kBf16), 327'680u);
  EXPECT_EQ(CountParameters(*m).total, 70'553'706'496u);
}

TEST(HfConfigTest, ReadsMlaAndLayerTypesAndTextConfig) {
  const char* kimi = R"({"text_config": {"model_type": "kimi_k2", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "tie_word_embeddings": false, "vocab_size": 163840}})";
  Result<ModelSpec> k = ModelFromHfConfig(kimi, "kimi");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->attention, AttentionKind::kMla);
  EXPECT_EQ(KvBytesPerToken(*k, KvPrecision::kBf16), 70'272u);
  EXPECT_EQ(CountParameters(*k).total, CountParameters(Model("kimi-k2")).total);

  const char* oss = R"({"hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 4,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
    "num_local_experts": 32, "experts_per_token": 4, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]})";
  Result<ModelSpec> o = ModelFromHfConfig(oss, "oss");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->num_sliding_layers, 2u);
  EXPECT_EQ(o->sliding_window, 128u);
}

TEST(HfConfigTest, RejectsBrokenConfigs) {
  EXPECT_FALSE(ModelFromHfConfig("{not json", "x").ok());
  EXPECT_FALSE(ModelFromHfConfig(R"({"hidden_size": 4096})", "x").ok());
  Result<ModelSpec> negative = ModelFromHfConfig(
      R"({"hidden_size": 4096, "num_hidden_layers": -3, "num_attention_heads": 32,
          "vocab_size": 10, "intermediate_size": 10})", "x");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("num_hidden_layers"), std::string_view::npos);
  EXPECT_EQ(ModelFromHfConfigFile("/nonexistent/config.json").status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvtier::planning
