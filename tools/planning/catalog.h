// Model, GPU and link catalogs for the planning tools: the architecture numbers that KV
// sizes, FLOPs and reload times are computed from.
//
// Every built-in model is transcribed from its Hugging Face config.json; `source` names the
// repository. Lookups are case-insensitive and accept aliases; an unknown name fails with
// NotFound listing every known name.
//
// Thread safety: the catalogs are immutable after first use and safe to read concurrently.

#ifndef KVTIER_TOOLS_PLANNING_CATALOG_H_
#define KVTIER_TOOLS_PLANNING_CATALOG_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::planning {

enum class AttentionKind : uint8_t {
  kStandard,  // Multi-head or grouped-query attention: K and V per KV head are cached.
  kMla,       // Multi-head latent attention (DeepSeek-V2/V3): one compressed latent is cached.
};

// The architecture of a decoder-only transformer, as far as KV size and FLOPs depend on it.
struct ModelSpec {
  std::string name;                  // Catalog name, lower case.
  std::vector<std::string> aliases;  // Other accepted names.
  std::string source;                // Where the numbers come from (HF repo id or file path).

  uint32_t num_layers = 0;
  uint32_t hidden_size = 0;
  uint32_t vocab_size = 0;
  bool tied_embeddings = false;  // The output head shares the input embedding matrix.

  AttentionKind attention = AttentionKind::kStandard;
  uint32_t num_heads = 0;     // Query heads.
  uint32_t num_kv_heads = 0;  // Standard attention: K/V heads (== num_heads without GQA).
  uint32_t head_dim = 0;      // Standard attention: dimension of each Q, K and V head.

  // MLA only (DeepSeek naming). q_lora_rank == 0 means queries are not compressed.
  uint32_t q_lora_rank = 0;
  uint32_t kv_lora_rank = 0;
  uint32_t qk_nope_head_dim = 0;
  uint32_t qk_rope_head_dim = 0;
  uint32_t v_head_dim = 0;

  // Sliding-window attention: `num_sliding_layers` of the layers attend to at most
  // `sliding_window` previous tokens, so their KV is capped at the window. 0 = none.
  uint32_t sliding_window = 0;
  uint32_t num_sliding_layers = 0;

  // Linear-attention and state-space layers (Gated DeltaNet, Mamba, Mamba2): `num_linear_layers`
  // layers mix tokens through a fixed-size state per request instead of attention over cached
  // KV. They replace attention in their layer, or, with `linear_parallel`, run beside it
  // (Falcon-H1). Per layer: the state an engine keeps for a request (recurrent state in fp32
  // plus the convolution window in bf16), the mixer's weights, and its FLOPs per token beyond
  // the matmuls of those weights (state update and read, convolution). A resume needs the state
  // at exactly its boundary: one snapshot of every linear layer's state.
  uint32_t num_linear_layers = 0;
  bool linear_parallel = false;
  uint64_t linear_state_bytes = 0;
  uint64_t linear_params = 0;
  uint64_t linear_flops_per_token = 0;
  // Layers that are a feed-forward block only (no token mixer), and layers without a
  // feed-forward block (Nemotron-H alternates mixer-only and MLP-only blocks). 0 = none.
  uint32_t num_mixerless_layers = 0;
  uint32_t num_ffnless_layers = 0;

  // Sparse attention (DeepSeek V3.2's lightning indexer): every attention layer also caches an
  // index key of `indexer_key_bytes` per token (fp8 plus its scale), which every later token
  // reads; `indexer_heads` x `indexer_head_dim` scores pick the `sparse_topk` keys each query
  // attends to. 0 = dense attention.
  uint32_t indexer_key_bytes = 0;
  uint32_t indexer_heads = 0;
  uint32_t indexer_head_dim = 0;
  uint32_t sparse_topk = 0;

  // Feed-forward. Dense models: every feed-forward layer has a SwiGLU MLP of
  // `intermediate_size`. Mixture-of-experts: `num_dense_layers` of them are dense, the rest
  // route each token to `experts_per_token` of `num_experts` experts of
  // `moe_intermediate_size`, plus `num_shared_experts` that every token uses.
  uint32_t intermediate_size = 0;
  // Weight matrices of one MLP: 3 for SwiGLU (gate, up, down), 2 for a plain one (Nemotron-H's
  // squared ReLU).
  uint32_t mlp_matrices = 3;
  uint32_t num_dense_layers = 0;
  uint32_t num_experts = 0;
  uint32_t experts_per_token = 0;
  uint32_t num_shared_experts = 0;
  uint32_t moe_intermediate_size = 0;

  bool is_moe() const { return num_experts > 0; }
  // Layers with attention (sliding ones included), and those of them without a window.
  uint32_t num_attention_layers() const {
    return num_layers - num_mixerless_layers - (linear_parallel ? 0 : num_linear_layers);
  }
  uint32_t num_full_attention_layers() const { return num_attention_layers() - num_sliding_layers; }
  // Layers with a feed-forward block.
  uint32_t num_ffn_layers() const { return num_layers - num_ffnless_layers; }
  // Query-key and value head dimensions as used by the attention FLOPs.
  uint32_t qk_head_dim() const {
    return attention == AttentionKind::kMla ? qk_nope_head_dim + qk_rope_head_dim : head_dim;
  }
  uint32_t value_head_dim() const { return attention == AttentionKind::kMla ? v_head_dim : head_dim; }

  // InvalidArgument naming the first inconsistent field (zero sizes, more KV heads than
  // heads, sliding layers over the layer count, experts_per_token over num_experts...).
  Status Validate() const;
};

// What one linear-attention or state-space layer adds to a ModelSpec (its linear_* fields),
// computed from the mixer's published shape. State: the recurrent state in fp32 and the
// convolution's last kernel - 1 inputs in bf16, as engines keep them (vLLM, SGLang).
struct LinearLayerShape {
  uint64_t state_bytes = 0;
  uint64_t params = 0;
  uint64_t flops_per_token = 0;
};
// Gated DeltaNet (Qwen3-Next, Qwen3.5): per value head a key_dim x value_dim state; q, k, v, a
// gate z, the decay and beta projections, a short convolution over q, k and v.
LinearLayerShape GatedDeltaNetLayer(uint32_t hidden, uint32_t key_heads, uint32_t key_dim,
                                    uint32_t value_heads, uint32_t value_dim,
                                    uint32_t conv_kernel);
// Mamba2 (Nemotron-H, Granite 4, Falcon-H1): per head a head_dim x state_dim state; the input
// projection to x, z, B, C and dt, a short convolution over x, B and C.
LinearLayerShape Mamba2Layer(uint32_t hidden, uint32_t heads, uint32_t head_dim,
                             uint32_t state_dim, uint32_t groups, uint32_t conv_kernel);
// Sets `count` linear layers of `shape` on `model`.
void SetLinearLayers(ModelSpec* model, uint32_t count, const LinearLayerShape& shape);

struct GpuSpec {
  std::string name;
  std::string description;
  double bf16_dense_tflops = 0;  // Peak dense (no sparsity) tensor throughput.
  double fp8_dense_tflops = 0;   // 0 = no FP8 tensor cores.
  double hbm_gib = 0;            // Memory per GPU.
};

struct LinkSpec {
  std::string name;
  std::string description;
  double gigabytes_per_second = 0;  // Raw line rate per direction, 10^9 bytes/s.
  double latency_us = 0;            // Fixed cost of one reload (setup, first byte).
  // True when every GPU has its own link of this speed (PCIe slot, one NIC per GPU as in
  // DGX/HGX nodes); false when one link serves the whole tensor-parallel group (a local SSD).
  bool per_gpu = true;
};

std::span<const ModelSpec> BuiltinModels();
std::span<const GpuSpec> BuiltinGpus();
std::span<const LinkSpec> BuiltinLinks();

// NotFound with the list of known names when `name` matches no entry or alias.
Result<ModelSpec> FindModel(std::string_view name);
Result<GpuSpec> FindGpu(std::string_view name);
Result<LinkSpec> FindLink(std::string_view name);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_CATALOG_H_
