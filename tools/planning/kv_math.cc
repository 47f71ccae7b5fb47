#include "tools/planning/kv_math.h"

#include <algorithm>
#include <string>

namespace kvtier::planning {

uint32_t KvPrecisionBits(KvPrecision precision) {
  switch (precision) {
    case KvPrecision::kBf16: return 16;
    case KvPrecision::kFp8: return 8;
    case KvPrecision::kFp4: return 4;
  }
  return 16;
}

std::string_view KvPrecisionName(KvPrecision precision) {
  switch (precision) {
    case KvPrecision::kBf16: return "bf16";
    case KvPrecision::kFp8: return "fp8";
    case KvPrecision::kFp4: return "fp4";
  }
  return "bf16";
}

Result<KvPrecision> ParseKvPrecision(std::string_view name) {
  if (name == "bf16" || name == "fp16") return KvPrecision::kBf16;
  if (name == "fp8") return KvPrecision::kFp8;
  if (name == "fp4") return KvPrecision::kFp4;
  return Status::InvalidArgument("unknown KV dtype '" + std::string(name) +
                                 "'; known: bf16, fp16, fp8, fp4");
}

uint64_t KvBytesPerTokenPerLayer(const ModelSpec& model, KvPrecision precision) {
  uint64_t elements = 0;
  if (model.attention == AttentionKind::kMla) {
    elements = uint64_t{model.kv_lora_rank} + model.qk_rope_head_dim;
  } else {
    elements = uint64_t{2} * model.num_kv_heads * model.head_dim;
  }
  // The indexer's keys have their own format (fp8 and a scale), whatever the KV's precision.
  return (elements * KvPrecisionBits(precision) + 7) / 8 + model.indexer_key_bytes;
}

uint64_t KvBytesPerToken(const ModelSpec& model, KvPrecision precision) {
  return KvBytesPerTokenPerLayer(model, precision) * model.num_attention_layers();
}

uint64_t KvBytesPerTokenBeyondWindow(const ModelSpec& model, KvPrecision precision) {
  return KvBytesPerTokenPerLayer(model, precision) * model.num_full_attention_layers();
}

uint64_t KvBytesForTokens(const ModelSpec& model, KvPrecision precision, uint64_t tokens) {
  const uint64_t per_layer = KvBytesPerTokenPerLayer(model, precision);
  const uint64_t full_layers = model.num_full_attention_layers();
  const uint64_t windowed = std::min<uint64_t>(tokens, model.sliding_window);
  return per_layer * (full_layers * tokens + uint64_t{model.num_sliding_layers} * windowed);
}

uint64_t StateBytesPerSnapshot(const ModelSpec& model) {
  return model.linear_state_bytes * model.num_linear_layers;
}

uint64_t ResumeBytes(const ModelSpec& model, KvPrecision precision, uint64_t tokens) {
  return tokens == 0 ? 0 : KvBytesForTokens(model, precision, tokens) + StateBytesPerSnapshot(model);
}

ParameterCounts CountParameters(const ModelSpec& m) {
  const uint64_t h = m.hidden_size;
  uint64_t attention = 0;
  if (m.attention == AttentionKind::kMla) {
    const uint64_t qk = m.qk_head_dim();
    const uint64_t q = m.q_lora_rank > 0
                           ? h * m.q_lora_rank + m.q_lora_rank + uint64_t{m.q_lora_rank} * m.num_heads * qk
                           : h * m.num_heads * qk;
    const uint64_t kv_down = h * (uint64_t{m.kv_lora_rank} + m.qk_rope_head_dim) + m.kv_lora_rank;
    const uint64_t kv_up = uint64_t{m.kv_lora_rank} * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim);
    const uint64_t out = uint64_t{m.num_heads} * m.v_head_dim * h;
    attention = q + kv_down + kv_up + out;
  } else {
    const uint64_t q_width = uint64_t{m.num_heads} * m.head_dim;
    const uint64_t kv_width = uint64_t{m.num_kv_heads} * m.head_dim;
    attention = 2 * h * q_width + 2 * h * kv_width;
  }
  if (m.sparse_topk > 0) {
    // The indexer: its queries from the compressed query (or the hidden state), one key
    // head, and a weight per head.
    const uint64_t q_in = m.q_lora_rank > 0 ? m.q_lora_rank : h;
    attention += q_in * m.indexer_heads * m.indexer_head_dim + h * m.indexer_head_dim +
                 h * m.indexer_heads;
  }
  const uint64_t norms = 2 * h;  // Before the mixer and before the MLP.
  const uint64_t dense_mlp = m.mlp_matrices * h * m.intermediate_size;
  const uint64_t expert = m.mlp_matrices * h * m.moe_intermediate_size;
  const uint64_t router = h * m.num_experts;
  const uint64_t moe_layers = m.num_ffn_layers() - m.num_dense_layers;

  const uint64_t mixers = uint64_t{m.num_attention_layers()} * attention +
                          uint64_t{m.num_linear_layers} * m.linear_params;
  const uint64_t moe_total = router + expert * (uint64_t{m.num_experts} + m.num_shared_experts);
  const uint64_t moe_active =
      router + expert * (uint64_t{m.experts_per_token} + m.num_shared_experts);
  const uint64_t shared = mixers + uint64_t{m.num_layers} * norms + m.num_dense_layers * dense_mlp + h;

  ParameterCounts c;
  const uint64_t table = uint64_t{m.vocab_size} * h;
  c.embedding = m.tied_embeddings ? table : 2 * table;
  const uint64_t body_total = shared + moe_layers * moe_total;
  const uint64_t body_active = shared + moe_layers * moe_active;
  c.total = body_total + c.embedding;
  c.active = body_active + c.embedding;
  c.active_matmul = body_active;
  return c;
}

}  // namespace kvtier::planning
