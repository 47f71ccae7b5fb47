// Hybrid, sliding-window and sparse-attention models in the planning tools: KV from the
// attention layers only, state snapshots of linear layers, their recompute cost, and their
// config.json files. Every figure is worked out by hand from the published shapes.

#include <gtest/gtest.h>

#include "tools/planning/catalog.h"
#include "tools/planning/crossover.h"
#include "tools/planning/hf_config.h"
#include "tools/planning/kv_math.h"

namespace kvtier::planning {
namespace {

ModelSpec Model(const char* name) {
  Result<ModelSpec> m = FindModel(name);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

// Qwen3-Next-80B-A3B's config.json (the fields that shape its KV, state and weights).
constexpr const char* kQwen3Next = R"({"architectures": ["Qwen3NextForCausalLM"],
  "decoder_sparse_step": 1, "full_attention_interval": 4, "head_dim": 256, "hidden_size": 2048,
  "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
  "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
  "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_next",
  "moe_intermediate_size": 512, "num_attention_heads": 16, "num_experts": 512,
  "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
  "shared_expert_intermediate_size": 512, "tie_word_embeddings": false, "vocab_size": 151936})";

TEST(HybridModelsTest, QwenNextKeepsKvInItsAttentionLayersAndAStateInTheOthers) {
  const ModelSpec m = Model("qwen3-next");
  EXPECT_EQ(m.num_attention_layers(), 12u);
  EXPECT_EQ(m.num_linear_layers, 36u);
  // KV: 12 layers x K and V x 2 KV heads x 256 x 2 bytes.
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kBf16), 12u * 2 * 2 * 256 * 2);
  EXPECT_EQ(KvBytesForTokens(m, KvPrecision::kBf16, 100'000), 24'576u * 100'000);
  // State per linear layer: 32 value heads x 128 x 128 in fp32, and the convolution's last 3
  // inputs of q, k and v (2 x 16 x 128 + 32 x 128 = 8,192 channels) in bf16.
  EXPECT_EQ(m.linear_state_bytes, 32u * 128 * 128 * 4 + 8'192u * 3 * 2);
  EXPECT_EQ(StateBytesPerSnapshot(m), 36u * 2'146'304);
  EXPECT_EQ(ResumeBytes(m, KvPrecision::kBf16, 1000), 24'576'000u + 77'266'944u);
  EXPECT_EQ(ResumeBytes(m, KvPrecision::kBf16, 0), 0u);
  // Qwen publishes 80B total, 3B active (without embeddings and the attention gates here).
  const ParameterCounts p = CountParameters(m);
  EXPECT_NEAR(p.total / 1e9, 79.6, 0.5);
  EXPECT_NEAR((p.active - p.embedding) / 1e9, 3.2, 0.3);
}

TEST(HybridModelsTest, NemotronHsMambaBlocksHoldAStateAndNoKv) {
  const ModelSpec m = Model("nemotron-h-8b");
  EXPECT_EQ(m.num_attention_layers(), 4u);
  EXPECT_EQ(m.num_ffn_layers(), 24u);
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kBf16), 4u * 2 * 8 * 128 * 2);
  // Mamba2: 128 heads x 64 x state 128 in fp32; conv over x, B and C (8,192 + 2 x 8 x 128).
  EXPECT_EQ(m.linear_state_bytes, 128u * 64 * 128 * 4 + 10'240u * 3 * 2);
  EXPECT_EQ(StateBytesPerSnapshot(m), 24u * 4'255'744);
  // NVIDIA publishes 8.1B parameters (8,100,852,736).
  EXPECT_NEAR(CountParameters(m).total / 1e9, 8.10, 0.01);
}

TEST(HybridModelsTest, SparseAttentionCachesAnIndexKeyBesideTheLatent) {
  const ModelSpec m = Model("deepseek-v3.2");
  // Per layer: the latent 512 + rope 64 at the KV dtype, and a 128-byte fp8 key with a 4-byte
  // scale.
  EXPECT_EQ(KvBytesPerTokenPerLayer(m, KvPrecision::kBf16), 576u * 2 + 132);
  EXPECT_EQ(KvBytesPerToken(m, KvPrecision::kFp8), 61u * (576 + 132));
  EXPECT_EQ(StateBytesPerSnapshot(m), 0u);
  EXPECT_NEAR(CountParameters(m).total / 1e9, 671.9, 1);
}

TEST(HybridModelsTest, LinearLayersCostTheSameForEveryToken) {
  const ModelSpec next = Model("qwen3-next");
  Result<PrefillModel> p = PrefillModel::Create(next, *FindGpu("h100"), *FindLink("pcie-gen5"), {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // Attention: 12 layers x 2 x 16 heads x (256 + 256) per causal pair; linear layers: a fixed
  // cost per token.
  const double pair = 2.0 * 16 * 512;
  const double linear = 36.0 * next.linear_flops_per_token;
  for (double t : {1000.0, 100'000.0}) {
    EXPECT_DOUBLE_EQ(p->AttentionFlops(0, t), pair * 12 * t * t / 2 + linear * t);
  }
  // A resume reloads the KV and one state snapshot.
  EXPECT_DOUBLE_EQ(p->ReloadBytesPerGpu(1000), 24'576'000.0 + 77'266'944.0);
  // Sparse attention: queries past the top-k attend to 2,048 keys; the index covers all pairs.
  const ModelSpec ds = Model("deepseek-v3.2");
  Result<PrefillModel> q = PrefillModel::Create(ds, *FindGpu("h100"), *FindLink("pcie-gen5"), {});
  ASSERT_TRUE(q.ok());
  const double t = 100'000;
  const double sparse_pairs = 2048 * t - 2048.0 * 2048 / 2;
  EXPECT_DOUBLE_EQ(q->AttentionFlops(0, t), 2.0 * 128 * (192 + 128) * 61 * sparse_pairs +
                                                2.0 * 64 * 128 * 61 * t * t / 2);
}

TEST(HybridModelsTest, ConfigJsonOfEachReadsAsTheCatalogHasIt) {
  Result<ModelSpec> next = ModelFromHfConfig(kQwen3Next, "qwen3-next.json");
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  const ModelSpec catalog = Model("qwen3-next");
  EXPECT_EQ(next->num_linear_layers, catalog.num_linear_layers);
  EXPECT_EQ(next->linear_state_bytes, catalog.linear_state_bytes);
  EXPECT_EQ(next->num_shared_experts, 1u);
  EXPECT_EQ(CountParameters(*next).total, CountParameters(catalog).total);

  const char* nemotron = R"({"architectures": ["NemotronHForCausalLM"], "hidden_size": 4096,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-M-M-M-M-",
    "intermediate_size": 21504, "mamba_head_dim": 64, "mamba_num_heads": 128,
    "mlp_hidden_act": "relu2", "n_groups": 8, "conv_kernel": 4, "num_attention_heads": 32,
    "num_hidden_layers": 52, "num_key_value_heads": 8, "head_dim": 128, "ssm_state_size": 128,
    "tie_word_embeddings": false, "vocab_size": 131072})";
  Result<ModelSpec> n = ModelFromHfConfig(nemotron, "nemotron.json");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->num_linear_layers, 24u);
  EXPECT_EQ(n->num_attention_layers(), 4u);
  EXPECT_EQ(StateBytesPerSnapshot(*n), StateBytesPerSnapshot(Model("nemotron-h-8b")));
  EXPECT_EQ(CountParameters(*n).total, CountParameters(Model("nemotron-h-8b")).total);

  const char* v32 = R"({"hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,
    "tie_word_embeddings": false, "vocab_size": 129280})";
  Result<ModelSpec> v = ModelFromHfConfig(v32, "v32.json");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(KvBytesPerToken(*v, KvPrecision::kBf16),
            KvBytesPerToken(Model("deepseek-v3.2"), KvPrecision::kBf16));
  EXPECT_EQ(CountParameters(*v).total, CountParameters(Model("deepseek-v3.2")).total);
}

TEST(HybridModelsTest, HeldOutConfigsOfOtherHybrids) {
  // A Qwen3.5-style dense hybrid given by layer_types (every fourth layer attends), and a
  // Granite 4-style Mamba2 hybrid with experts: shapes not in the catalog.
  std::string types;
  for (int i = 0; i < 32; ++i) {
    types += std::string(i ? ", " : "") + (i % 4 == 3 ? "\"full_attention\"" : "\"linear_attention\"");
  }
  const std::string qwen35 = R"({"hidden_size": 4096, "intermediate_size": 12288,
    "num_hidden_layers": 32, "num_attention_heads": 16, "num_key_value_heads": 4,
    "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "vocab_size": 248320, "layer_types": [)" + types + "]}";
  Result<ModelSpec> q = ModelFromHfConfig(qwen35, "qwen35.json");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(KvBytesPerToken(*q, KvPrecision::kBf16), 8u * 2 * 4 * 256 * 2);
  EXPECT_EQ(StateBytesPerSnapshot(*q), 24u * (32 * 128 * 128 * 4 + 8'192 * 3 * 2));

  std::string kinds;
  for (int i = 0; i < 40; ++i) kinds += std::string(i ? ", " : "") + (i % 10 == 5 ? "\"attention\"" : "\"mamba\"");
  const std::string granite = R"({"hidden_size": 4096, "intermediate_size": 1024,
    "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 100352, "num_local_experts": 72, "num_experts_per_tok": 10,
    "shared_intermediate_size": 1024, "mamba_n_heads": 128, "mamba_d_head": 64,
    "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "layer_types": [)" +
                              kinds + "]}";
  Result<ModelSpec> g = ModelFromHfConfig(granite, "granite.json");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->num_attention_layers(), 4u);
  EXPECT_EQ(KvBytesPerToken(*g, KvPrecision::kBf16), 4u * 2 * 8 * 128 * 2);
  EXPECT_EQ(g->linear_state_bytes, 128u * 64 * 128 * 4 + (8'192 + 256) * 3 * 2);
  EXPECT_EQ(g->num_shared_experts, 1u);

  // Linear layers of an unknown kind, and a list of the wrong length, are errors.
  EXPECT_FALSE(ModelFromHfConfig(R"({"hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 10,
    "layer_types": ["linear_attention", "full_attention"]})", "x").ok());
  EXPECT_FALSE(ModelFromHfConfig(R"({"hidden_size": 64, "num_hidden_layers": 3,
    "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 10,
    "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8})", "x").ok());
}

}  // namespace
}  // namespace kvtier::planning
