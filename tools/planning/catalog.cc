#include "tools/planning/catalog.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace kvtier::planning {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

ModelSpec Dense(std::string name, std::string source, uint32_t layers, uint32_t hidden,
                uint32_t heads, uint32_t kv_heads, uint32_t head_dim, uint32_t intermediate,
                uint32_t vocab) {
  ModelSpec m;
  m.name = std::move(name);
  m.source = std::move(source);
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_heads = heads;
  m.num_kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.intermediate_size = intermediate;
  m.num_dense_layers = layers;
  m.vocab_size = vocab;
  return m;
}

ModelSpec WithExperts(ModelSpec m, uint32_t dense_layers, uint32_t experts, uint32_t per_token,
                      uint32_t shared, uint32_t moe_intermediate) {
  m.num_dense_layers = dense_layers;
  m.num_experts = experts;
  m.experts_per_token = per_token;
  m.num_shared_experts = shared;
  m.moe_intermediate_size = moe_intermediate;
  return m;
}

// DeepSeek-V3 style MLA; the heads' dimensions are the same in V3, R1 and Kimi K2.
ModelSpec WithMla(ModelSpec m, uint32_t q_lora, uint32_t kv_lora, uint32_t nope, uint32_t rope,
                  uint32_t v) {
  m.attention = AttentionKind::kMla;
  m.num_kv_heads = m.num_heads;
  m.head_dim = 0;
  m.q_lora_rank = q_lora;
  m.kv_lora_rank = kv_lora;
  m.qk_nope_head_dim = nope;
  m.qk_rope_head_dim = rope;
  m.v_head_dim = v;
  return m;
}

// DeepSeek V3.2's lightning indexer: 64 heads of 128, the top 2048 keys; index keys in fp8
// with a 4-byte scale per token.
ModelSpec WithIndexer(ModelSpec m, uint32_t heads, uint32_t head_dim, uint32_t topk) {
  m.indexer_heads = heads;
  m.indexer_head_dim = head_dim;
  m.indexer_key_bytes = head_dim + 4;
  m.sparse_topk = topk;
  return m;
}

ModelSpec WithAliases(ModelSpec m, std::vector<std::string> aliases) {
  m.aliases = std::move(aliases);
  return m;
}

std::vector<ModelSpec> MakeModels() {
  std::vector<ModelSpec> models;
  // Llama 3.1 (3.3 70B has the same architecture as 3.1 70B).
  models.push_back(WithAliases(Dense("llama-3.1-8b", "meta-llama/Llama-3.1-8B", 32, 4096, 32, 8,
                                     128, 14336, 128256),
                               {"llama3-8b", "llama-3-8b", "llama-3.1-8b-instruct"}));
  models.push_back(WithAliases(Dense("llama-3.1-70b", "meta-llama/Llama-3.1-70B", 80, 8192, 64,
                                     8, 128, 28672, 128256),
                               {"llama3-70b", "llama-3-70b", "llama-3.3-70b"}));
  models.push_back(WithAliases(Dense("llama-3.1-405b", "meta-llama/Llama-3.1-405B", 126, 16384,
                                     128, 8, 128, 53248, 128256),
                               {"llama3-405b"}));
  // Qwen3: head_dim 128 regardless of hidden size, so heads x head_dim != hidden for 32B.
  models.push_back(
      Dense("qwen3-8b", "Qwen/Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151936));
  models.push_back(
      Dense("qwen3-32b", "Qwen/Qwen3-32B", 64, 5120, 64, 8, 128, 25600, 151936));
  models.push_back(WithExperts(Dense("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 94, 4096, 64, 4,
                                     128, 12288, 151936),
                               0, 128, 8, 0, 1536));
  models.push_back(WithExperts(Dense("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 2048, 32, 4, 128,
                                     6144, 151936),
                               0, 128, 8, 0, 768));
  // Mistral 7B v0.1 slides a 4096-token window on every layer; Mixtral v0.1's config.json has
  // "sliding_window": null, so it attends to the whole context.
  ModelSpec mistral = Dense("mistral-7b", "mistralai/Mistral-7B-v0.1", 32, 4096, 32, 8, 128,
                            14336, 32000);
  mistral.sliding_window = 4096;
  mistral.num_sliding_layers = 32;
  models.push_back(WithAliases(std::move(mistral), {"mistral-7b-v0.1"}));
  models.push_back(WithAliases(WithExperts(Dense("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1",
                                                 32, 4096, 32, 8, 128, 14336, 32000),
                                           0, 8, 2, 0, 14336),
                               {"mixtral-8x7b-v0.1"}));
  // DeepSeek-V3 and R1 share one architecture (the MTP layer is not used for prefill).
  models.push_back(WithAliases(
      WithMla(WithExperts(Dense("deepseek-v3", "deepseek-ai/DeepSeek-V3", 61, 7168, 128, 128, 0,
                                18432, 129280),
                          3, 256, 8, 1, 2048),
              1536, 512, 128, 64, 128),
      {"deepseek-r1", "deepseek-v3.1"}));
  models.push_back(WithAliases(
      WithMla(WithExperts(Dense("kimi-k2", "moonshotai/Kimi-K2-Instruct", 61, 7168, 64, 64, 0,
                                18432, 163840),
                          1, 384, 8, 1, 2048),
              1536, 512, 128, 64, 128),
      {"kimi-k2-instruct"}));
  // gpt-oss: layer_types alternate sliding_attention (128-token window) and full_attention.
  ModelSpec oss120 = WithExperts(Dense("gpt-oss-120b", "openai/gpt-oss-120b", 36, 2880, 64, 8, 64,
                                       2880, 201088),
                                 0, 128, 4, 0, 2880);
  oss120.sliding_window = 128;
  oss120.num_sliding_layers = 18;
  models.push_back(std::move(oss120));
  ModelSpec oss20 = WithExperts(Dense("gpt-oss-20b", "openai/gpt-oss-20b", 24, 2880, 64, 8, 64,
                                      2880, 201088),
                                0, 32, 4, 0, 2880);
  oss20.sliding_window = 128;
  oss20.num_sliding_layers = 12;
  models.push_back(std::move(oss20));
  // DeepSeek-V3.2: V3's architecture with sparse attention (index_n_heads 64, index_head_dim
  // 128, index_topk 2048).
  models.push_back(WithAliases(
      WithIndexer(WithMla(WithExperts(Dense("deepseek-v3.2", "deepseek-ai/DeepSeek-V3.2", 61,
                                            7168, 128, 128, 0, 18432, 129280),
                                      3, 256, 8, 1, 2048),
                          1536, 512, 128, 64, 128),
                  64, 128, 2048),
      {"deepseek-v3.2-exp"}));
  // Qwen3-Next: full_attention_interval 4 (12 of 48 layers attend, 36 are Gated DeltaNet of
  // 16 key heads and 32 value heads of 128, conv kernel 4), 512 experts of 512, 10 per token,
  // one shared expert of 512; untied embeddings.
  ModelSpec next = WithExperts(Dense("qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct", 48,
                                     2048, 16, 2, 256, 5120, 151936),
                               0, 512, 10, 1, 512);
  SetLinearLayers(&next, 36, GatedDeltaNetLayer(2048, 16, 128, 32, 128, 4));
  models.push_back(WithAliases(std::move(next), {"qwen3-next", "qwen3-next-80b-a3b-instruct"}));
  // Nemotron-H 8B: 52 blocks, "M-M-M-M*-..." with 24 Mamba2 blocks (128 heads of 64, state
  // 128, 8 groups, conv 4), 4 attention blocks and 24 squared-ReLU MLP blocks of 21504.
  ModelSpec nemotron = Dense("nemotron-h-8b", "nvidia/Nemotron-H-8B-Base-8K", 52, 4096, 32, 8,
                             128, 21504, 131072);
  SetLinearLayers(&nemotron, 24, Mamba2Layer(4096, 128, 64, 128, 8, 4));
  nemotron.num_mixerless_layers = 24;
  nemotron.num_ffnless_layers = 28;
  nemotron.num_dense_layers = 24;
  nemotron.mlp_matrices = 2;
  models.push_back(WithAliases(std::move(nemotron), {"nemotron-h-8b-base-8k"}));
  return models;
}

std::vector<GpuSpec> MakeGpus() {
  // Vendor datasheet peaks for dense tensor math (the sparsity figures are twice these).
  return {
      {"a100", "NVIDIA A100 SXM 80GB", 312, 0, 80},
      {"h100", "NVIDIA H100 SXM 80GB", 989, 1979, 80},
      {"h200", "NVIDIA H200 SXM 141GB", 989, 1979, 141},
      {"b200", "NVIDIA B200 (HGX) 180GB", 2250, 4500, 180},
      // Blackwell: NVIDIA quotes these with sparsity (GB200 NVL72 10 PF FP8 and 5 PF BF16 per
      // GPU; HGX B300 72 PF FP8 and 36 PF BF16 per 8 GPUs); the catalog keeps half.
      {"gb200", "NVIDIA GB200 (NVL72), per GPU, 186GB", 2500, 5000, 186},
      {"b300", "NVIDIA B300 (HGX, Blackwell Ultra) 288GB", 2250, 4500, 288},
      {"l40s", "NVIDIA L40S 48GB", 362, 733, 48},
      {"mi300x", "AMD Instinct MI300X 192GB", 1307, 2615, 192},
      {"mi325x", "AMD Instinct MI325X 256GB", 1307, 2615, 256},
  };
}

std::vector<LinkSpec> MakeLinks() {
  return {
      {"pcie-gen4", "PCIe 4.0 x16 host to GPU", 32, 10, true},
      {"pcie-gen5", "PCIe 5.0 x16 host to GPU", 64, 10, true},
      {"pcie-gen6", "PCIe 6.0 x16 host to GPU", 128, 10, true},
      {"100gbe", "100 Gb/s Ethernet/RDMA, one NIC per GPU", 12.5, 20, true},
      {"200gbe", "200 Gb/s Ethernet/RDMA, one NIC per GPU", 25, 20, true},
      {"400gbe", "400 Gb/s Ethernet/RDMA, one NIC per GPU", 50, 20, true},
      {"800gbe", "800 Gb/s Ethernet/RDMA, one NIC per GPU", 100, 20, true},
      {"nvme-gen4", "one local PCIe 4.0 NVMe SSD shared by the node", 7, 100, false},
      {"nvme-gen5", "one local PCIe 5.0 NVMe SSD shared by the node", 14, 100, false},
  };
}

template <typename T>
bool NameMatches(const T& entry, const std::string& wanted) {
  if (Lower(entry.name) == wanted) return true;
  if constexpr (requires { entry.aliases; }) {
    for (const std::string& alias : entry.aliases) {
      if (Lower(alias) == wanted) return true;
    }
  }
  return false;
}

template <typename T>
Result<T> FindIn(std::span<const T> entries, std::string_view name, std::string_view what) {
  const std::string wanted = Lower(name);
  for (const T& entry : entries) {
    if (NameMatches(entry, wanted)) return entry;
  }
  std::string known;
  for (const T& entry : entries) {
    if (!known.empty()) known += ", ";
    known += entry.name;
  }
  return Status::NotFound("unknown " + std::string(what) + " '" + std::string(name) +
                          "'; known: " + known);
}

}  // namespace

LinearLayerShape GatedDeltaNetLayer(uint32_t hidden, uint32_t key_heads, uint32_t key_dim,
                                    uint32_t value_heads, uint32_t value_dim,
                                    uint32_t conv_kernel) {
  const uint64_t h = hidden;
  const uint64_t keys = uint64_t{key_heads} * key_dim;
  const uint64_t values = uint64_t{value_heads} * value_dim;
  const uint64_t conv = 2 * keys + values;  // q, k and v go through the convolution.
  const uint64_t state = uint64_t{value_heads} * key_dim * value_dim;
  LinearLayerShape s;
  s.state_bytes = state * 4 + conv * (conv_kernel - 1) * 2;
  // q, k, v, z; beta and the decay; the convolution; the output; decay and dt biases, the
  // gated norm.
  s.params = h * (2 * keys + 2 * values) + h * 2 * value_heads + conv * conv_kernel + values * h +
             2 * uint64_t{value_heads} + value_dim;
  // Per token and value head: decay the state, read k's value (2 x k x v), write the delta
  // (2 x k x v), read q's output (2 x k x v); the convolution.
  s.flops_per_token = 7 * state + 2 * conv * conv_kernel;
  return s;
}

LinearLayerShape Mamba2Layer(uint32_t hidden, uint32_t heads, uint32_t head_dim,
                             uint32_t state_dim, uint32_t groups, uint32_t conv_kernel) {
  const uint64_t h = hidden;
  const uint64_t inner = uint64_t{heads} * head_dim;
  const uint64_t bc = 2 * uint64_t{groups} * state_dim;
  const uint64_t conv = inner + bc;  // x, B and C go through the convolution.
  const uint64_t state = inner * state_dim;
  LinearLayerShape s;
  s.state_bytes = state * 4 + conv * (conv_kernel - 1) * 2;
  // x, z, B, C, dt; the convolution with its bias; the output; A, D, dt bias; the gated norm.
  s.params = h * (2 * inner + bc + heads) + conv * (conv_kernel + 1) + inner * h +
             3 * uint64_t{heads} + inner;
  // Per token: decay and update the state with B x (2 x state), read it with C (2 x state).
  s.flops_per_token = 5 * state + 2 * conv * conv_kernel;
  return s;
}

void SetLinearLayers(ModelSpec* model, uint32_t count, const LinearLayerShape& shape) {
  model->num_linear_layers = count;
  model->linear_state_bytes = shape.state_bytes;
  model->linear_params = shape.params;
  model->linear_flops_per_token = shape.flops_per_token;
}

Status ModelSpec::Validate() const {
  auto bad = [this](const std::string& why) {
    return Status::InvalidArgument("model '" + name + "': " + why);
  };
  if (num_layers == 0) return bad("num_layers must be positive");
  if (hidden_size == 0) return bad("hidden_size must be positive");
  if (vocab_size == 0) return bad("vocab_size must be positive");
  if (num_heads == 0) return bad("num_heads must be positive");
  if (attention == AttentionKind::kStandard) {
    if (num_kv_heads == 0 || num_kv_heads > num_heads) {
      return bad("num_kv_heads must be from 1 to num_heads");
    }
    if (head_dim == 0) return bad("head_dim must be positive");
  } else {
    if (kv_lora_rank == 0) return bad("kv_lora_rank must be positive for MLA");
    if (qk_nope_head_dim + qk_rope_head_dim == 0 || v_head_dim == 0) {
      return bad("MLA head dimensions must be positive");
    }
  }
  if (uint64_t{num_mixerless_layers} + (linear_parallel ? 0 : num_linear_layers) > num_layers ||
      num_linear_layers > num_layers) {
    return bad("linear and mixerless layers exceed num_layers");
  }
  if (num_ffnless_layers > num_layers) return bad("num_ffnless_layers exceeds num_layers");
  if (num_linear_layers > 0 && linear_state_bytes == 0) {
    return bad("linear layers need linear_state_bytes");
  }
  if (num_attention_layers() == 0) return bad("a model needs an attention layer to cache KV");
  if (num_sliding_layers > num_attention_layers()) {
    return bad("num_sliding_layers exceeds the attention layers");
  }
  if ((indexer_key_bytes == 0) != (sparse_topk == 0)) {
    return bad("indexer_key_bytes and sparse_topk must both be set or both be zero");
  }
  if ((num_sliding_layers == 0) != (sliding_window == 0)) {
    return bad("sliding_window and num_sliding_layers must both be set or both be zero");
  }
  if (num_dense_layers > num_ffn_layers()) return bad("num_dense_layers exceeds the feed-forward layers");
  if (num_dense_layers > 0 && intermediate_size == 0) {
    return bad("intermediate_size must be positive when there are dense layers");
  }
  if (num_experts == 0) {
    if (num_dense_layers != num_ffn_layers()) {
      return bad("a dense model needs num_dense_layers == its feed-forward layers");
    }
  } else {
    if (experts_per_token == 0 || experts_per_token > num_experts) {
      return bad("experts_per_token must be from 1 to num_experts");
    }
    if (moe_intermediate_size == 0) return bad("moe_intermediate_size must be positive");
  }
  return Status::OK();
}

std::span<const ModelSpec> BuiltinModels() {
  static const std::vector<ModelSpec> models = MakeModels();
  return models;
}

std::span<const GpuSpec> BuiltinGpus() {
  static const std::vector<GpuSpec> gpus = MakeGpus();
  return gpus;
}

std::span<const LinkSpec> BuiltinLinks() {
  static const std::vector<LinkSpec> links = MakeLinks();
  return links;
}

Result<ModelSpec> FindModel(std::string_view name) {
  return FindIn(BuiltinModels(), name, "model");
}
Result<GpuSpec> FindGpu(std::string_view name) { return FindIn(BuiltinGpus(), name, "GPU"); }
Result<LinkSpec> FindLink(std::string_view name) { return FindIn(BuiltinLinks(), name, "link"); }

}  // namespace kvtier::planning
