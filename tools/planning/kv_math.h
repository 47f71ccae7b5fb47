// KV-cache sizes and parameter counts derived from a ModelSpec.
//
// KV bytes per token (elements x bits / 8), over the attention layers only:
//   standard / GQA attention: 2 x layers x kv_heads x head_dim x bytes   (K and V)
//   MLA:                      layers x (kv_lora_rank + qk_rope_head_dim) x bytes
//   sparse attention adds its index key per layer (DeepSeek V3.2: 128 fp8 + a 4-byte scale)
// A layer with a sliding window holds at most `sliding_window` tokens, so a prompt of T
// tokens needs  full_layers x T + sliding_layers x min(T, window)  layer-tokens of KV.
// Linear-attention and state-space layers hold no KV: a fixed state per request, of which a
// resume needs one snapshot at its boundary (StateBytesPerSnapshot).
// FP4 counts 4 bits per element; the block scale factors of NVFP4/MXFP4 are not included.
//
// Parameter counts cover the matrices (attention, MLP/experts, router, embeddings) and the
// RMSNorm weights; biases, MLA/QK norms and attention sinks are left out (under 0.01%).
//
// All functions are pure and thread-safe. REQUIRES: model.Validate().ok().

#ifndef KVTIER_TOOLS_PLANNING_KV_MATH_H_
#define KVTIER_TOOLS_PLANNING_KV_MATH_H_

#include <cstdint>
#include <string_view>

#include "kvtier/status.h"
#include "tools/planning/catalog.h"

namespace kvtier::planning {

// Element type of the cached K/V (or MLA latent).
enum class KvPrecision : uint8_t { kBf16, kFp8, kFp4 };

uint32_t KvPrecisionBits(KvPrecision precision);
std::string_view KvPrecisionName(KvPrecision precision);
// "bf16", "fp16" (same size as bf16), "fp8" or "fp4"; InvalidArgument otherwise.
Result<KvPrecision> ParseKvPrecision(std::string_view name);

// KV bytes one token adds to one layer.
uint64_t KvBytesPerTokenPerLayer(const ModelSpec& model, KvPrecision precision);
// KV bytes per token summed over all layers: the figure for prompts no longer than the
// sliding window (and for models without one).
uint64_t KvBytesPerToken(const ModelSpec& model, KvPrecision precision);
// KV bytes per token of the full-attention layers only: the marginal cost of one more token
// once the prompt is longer than the sliding window.
uint64_t KvBytesPerTokenBeyondWindow(const ModelSpec& model, KvPrecision precision);
// KV bytes of a whole prompt of `tokens` tokens, sliding-window layers capped at the window
// (a sparse-attention model's index keys included).
uint64_t KvBytesForTokens(const ModelSpec& model, KvPrecision precision, uint64_t tokens);
// Bytes of one state snapshot: every linear layer's state at one boundary (0 without them).
uint64_t StateBytesPerSnapshot(const ModelSpec& model);
// What a resume after `tokens` tokens reloads: their KV and the state snapshot at the
// boundary (0 for no tokens).
uint64_t ResumeBytes(const ModelSpec& model, KvPrecision precision, uint64_t tokens);

struct ParameterCounts {
  uint64_t total = 0;   // Every weight.
  uint64_t active = 0;  // Weights one token uses (routed experts: only experts_per_token).
  // Active weights multiplied per prompt token in prefill: `active` without the input
  // embedding (a lookup) and the output head (engines compute logits for the last position
  // only). Prefill matmul FLOPs = 2 x this x tokens.
  uint64_t active_matmul = 0;
  uint64_t embedding = 0;  // Input embedding plus output head (once when tied).
};

ParameterCounts CountParameters(const ModelSpec& model);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_KV_MATH_H_
