#include "tools/planning/hf_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvtier::planning {
namespace {

using nlohmann::json;

// Reads a non-negative integer field; `fallback` when absent or null.
Result<uint32_t> GetCount(const json& obj, const char* key, uint32_t fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > UINT32_MAX) {
    return Status::InvalidArgument(std::string("config.json field '") + key +
                                   "' must be a non-negative integer");
  }
  return static_cast<uint32_t>(it->get<int64_t>());
}

Result<uint32_t> GetRequired(const json& obj, const char* key) {
  if (!obj.contains(key) || obj[key].is_null()) {
    return Status::InvalidArgument(std::string("config.json lacks '") + key + "'");
  }
  return GetCount(obj, key, 0);
}

// The first of `keys` present in `obj`, else `fallback`.
Result<uint32_t> GetFirst(const json& obj, std::initializer_list<const char*> keys,
                          uint32_t fallback) {
  for (const char* key : keys) {
    if (obj.contains(key) && !obj[key].is_null()) return GetCount(obj, key, fallback);
  }
  return fallback;
}

bool GetFlag(const json& obj, const char* key, bool fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

#define ASSIGN_OR_RETURN(lhs, expr)             \
  do {                                          \
    auto _r = (expr);                           \
    if (!_r.ok()) return _r.status();           \
    lhs = *_r;                                  \
  } while (0)

// How many layers of each kind a config declares.
struct LayerKinds {
  bool listed = false;     // By a per-layer list or pattern (else every layer is the same).
  uint32_t sliding = 0;    // Sliding-window attention.
  uint32_t linear = 0;     // Linear attention or a state-space mixer.
  uint32_t mixerless = 0;  // Blocks that are a feed-forward only (Nemotron-H "-" and "E").
  uint32_t ffnless = 0;    // Blocks without a feed-forward (Nemotron-H "M" and "*").
  uint32_t mlp_blocks = 0;  // Of the mixerless blocks: dense ones ("-").
  uint32_t moe_blocks = 0;  // ... and routed ones ("E").
};

bool IsLinearKind(const std::string& kind) {
  return kind == "linear_attention" || kind == "mamba" || kind == "mamba2" || kind == "ssm";
}

// transformers' layer_types; Nemotron-H's hybrid_override_pattern ("M-M*-E...") or its newer
// layers_block_type list; Qwen3-Next's full_attention_interval.
Result<LayerKinds> CountLayerKinds(const json& c, uint32_t num_layers) {
  LayerKinds k;
  auto block = [&k](char kind) {
    switch (kind) {
      case 'M': ++k.linear; ++k.ffnless; return true;
      case '*': ++k.ffnless; return true;
      case '-': ++k.mixerless; ++k.mlp_blocks; return true;
      case 'E': ++k.mixerless; ++k.moe_blocks; return true;
    }
    return false;
  };
  auto length_must_match = [num_layers](size_t n, const char* field) -> Status {
    if (n == num_layers) return Status::OK();
    return Status::InvalidArgument(std::string("config.json '") + field + "' has " +
                                   std::to_string(n) + " entries for " +
                                   std::to_string(num_layers) + " layers");
  };
  if (c.contains("hybrid_override_pattern") && c["hybrid_override_pattern"].is_string()) {
    const std::string pattern = c["hybrid_override_pattern"].get<std::string>();
    KVTIER_RETURN_IF_ERROR(length_must_match(pattern.size(), "hybrid_override_pattern"));
    for (char kind : pattern) {
      if (!block(kind)) {
        return Status::InvalidArgument(std::string("config.json 'hybrid_override_pattern' has an "
                                                   "unknown block '") + kind + "'");
      }
    }
    k.listed = true;
    return k;
  }
  if (c.contains("layers_block_type") && c["layers_block_type"].is_array() &&
      c["layers_block_type"].size() == num_layers) {
    for (const json& t : c["layers_block_type"]) {
      const std::string kind = t.is_string() ? t.get<std::string>() : "";
      const char code = IsLinearKind(kind) ? 'M'
                        : kind == "attention" || kind == "full_attention" ? '*'
                        : kind == "mlp" ? '-'
                        : kind == "moe" ? 'E'
                                        : '?';
      if (!block(code)) {
        return Status::InvalidArgument("config.json 'layers_block_type' has an unknown block '" +
                                       kind + "'");
      }
    }
    k.listed = true;
    return k;
  }
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    KVTIER_RETURN_IF_ERROR(length_must_match(c["layer_types"].size(), "layer_types"));
    for (const json& t : c["layer_types"]) {
      const std::string kind = t.is_string() ? t.get<std::string>() : "";
      if (kind == "sliding_attention" || kind == "chunked_attention") ++k.sliding;
      if (IsLinearKind(kind)) ++k.linear;
    }
    k.listed = true;
    return k;
  }
  uint32_t interval = 0;
  ASSIGN_OR_RETURN(interval, GetCount(c, "full_attention_interval", 0));
  if (interval > 0) k.linear = num_layers - num_layers / interval;
  return k;
}

// The shape of a config's linear layers: Gated DeltaNet (linear_* fields) or Mamba2
// (Nemotron-H's mamba_num_heads..., Granite 4's mamba_n_heads...).
Result<LinearLayerShape> LinearShape(const json& c, uint32_t hidden) {
  uint32_t a = 0, b = 0, d = 0, e = 0, f = 0;
  if (c.contains("linear_num_value_heads")) {
    ASSIGN_OR_RETURN(a, GetRequired(c, "linear_num_key_heads"));
    ASSIGN_OR_RETURN(b, GetRequired(c, "linear_key_head_dim"));
    ASSIGN_OR_RETURN(d, GetRequired(c, "linear_num_value_heads"));
    ASSIGN_OR_RETURN(e, GetRequired(c, "linear_value_head_dim"));
    ASSIGN_OR_RETURN(f, GetCount(c, "linear_conv_kernel_dim", 4));
    return GatedDeltaNetLayer(hidden, a, b, d, e, f);
  }
  if (c.contains("mamba_num_heads") || c.contains("mamba_n_heads")) {
    ASSIGN_OR_RETURN(a, GetFirst(c, {"mamba_num_heads", "mamba_n_heads"}, 0));
    ASSIGN_OR_RETURN(b, GetFirst(c, {"mamba_head_dim", "mamba_d_head"}, 0));
    ASSIGN_OR_RETURN(d, GetFirst(c, {"ssm_state_size", "mamba_d_state"}, 0));
    ASSIGN_OR_RETURN(e, GetFirst(c, {"n_groups", "mamba_n_groups"}, 1));
    ASSIGN_OR_RETURN(f, GetFirst(c, {"conv_kernel", "mamba_d_conv"}, 4));
    if (a == 0 || b == 0 || d == 0 || f == 0) {
      return Status::InvalidArgument("config.json's Mamba2 layers lack heads, head or state size");
    }
    return Mamba2Layer(hidden, a, b, d, e, f);
  }
  return Status::InvalidArgument(
      "config.json has linear or state-space layers of a kind kvtier does not know (known: "
      "Gated DeltaNet's linear_* fields, Mamba2's mamba_* fields)");
}

}  // namespace

Result<ModelSpec> ModelFromHfConfig(std::string_view json_text, std::string_view name) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return Status::InvalidArgument("config.json is not a JSON object");
  }
  const json& c = root.contains("text_config") && root["text_config"].is_object()
                      ? root["text_config"]
                      : root;
  ModelSpec m;
  m.name = std::string(name);
  m.source = std::string(name);
  ASSIGN_OR_RETURN(m.num_layers, GetRequired(c, "num_hidden_layers"));
  ASSIGN_OR_RETURN(m.hidden_size, GetRequired(c, "hidden_size"));
  ASSIGN_OR_RETURN(m.vocab_size, GetRequired(c, "vocab_size"));
  ASSIGN_OR_RETURN(m.num_heads, GetRequired(c, "num_attention_heads"));
  m.tied_embeddings = GetFlag(c, "tie_word_embeddings", true);  // transformers' default.

  uint32_t kv_lora = 0;
  ASSIGN_OR_RETURN(kv_lora, GetCount(c, "kv_lora_rank", 0));
  if (kv_lora > 0) {
    m.attention = AttentionKind::kMla;
    m.kv_lora_rank = kv_lora;
    m.num_kv_heads = m.num_heads;
    ASSIGN_OR_RETURN(m.q_lora_rank, GetCount(c, "q_lora_rank", 0));
    ASSIGN_OR_RETURN(m.qk_nope_head_dim, GetRequired(c, "qk_nope_head_dim"));
    ASSIGN_OR_RETURN(m.qk_rope_head_dim, GetRequired(c, "qk_rope_head_dim"));
    ASSIGN_OR_RETURN(m.v_head_dim, GetRequired(c, "v_head_dim"));
  } else {
    ASSIGN_OR_RETURN(m.num_kv_heads, GetCount(c, "num_key_value_heads", m.num_heads));
    if (m.num_heads == 0) return Status::InvalidArgument("num_attention_heads must be positive");
    ASSIGN_OR_RETURN(m.head_dim, GetCount(c, "head_dim", m.hidden_size / m.num_heads));
  }

  // Sliding windows: an explicit per-layer list wins; otherwise a window applies to every
  // layer unless use_sliding_window is false (Qwen2 ships a window it does not use).
  uint32_t window = 0;
  ASSIGN_OR_RETURN(window, GetCount(c, "sliding_window", 0));
  LayerKinds kinds;
  ASSIGN_OR_RETURN(kinds, CountLayerKinds(c, m.num_layers));
  if (kinds.listed) {
    if (kinds.sliding > 0 && window > 0) {
      m.sliding_window = window;
      m.num_sliding_layers = kinds.sliding;
    }
  } else if (window > 0 && GetFlag(c, "use_sliding_window", true)) {
    m.sliding_window = window;
    m.num_sliding_layers = m.num_layers;
  }
  if (kinds.linear > 0) {
    LinearLayerShape shape;
    ASSIGN_OR_RETURN(shape, LinearShape(c, m.hidden_size));
    SetLinearLayers(&m, kinds.linear, shape);
  }
  m.num_mixerless_layers = kinds.mixerless;
  m.num_ffnless_layers = kinds.ffnless;
  if (c.contains("mlp_hidden_act") && c["mlp_hidden_act"] == "relu2") m.mlp_matrices = 2;
  uint32_t index_heads = 0;
  ASSIGN_OR_RETURN(index_heads, GetCount(c, "index_n_heads", 0));
  if (index_heads > 0) {
    m.indexer_heads = index_heads;
    ASSIGN_OR_RETURN(m.indexer_head_dim, GetRequired(c, "index_head_dim"));
    ASSIGN_OR_RETURN(m.sparse_topk, GetRequired(c, "index_topk"));
    m.indexer_key_bytes = m.indexer_head_dim + 4;  // fp8 keys and a 4-byte scale per token.
  }

  ASSIGN_OR_RETURN(m.intermediate_size, GetCount(c, "intermediate_size", 0));
  ASSIGN_OR_RETURN(m.num_experts, GetFirst(c, {"n_routed_experts", "num_local_experts",
                                               "num_experts"}, 0));
  if (kinds.moe_blocks > 0 || kinds.mlp_blocks > 0) {
    // Blocks of a pattern (Nemotron-H): the MLP blocks are dense, the others routed.
    m.num_dense_layers = kinds.mlp_blocks;
    if (kinds.moe_blocks == 0) m.num_experts = 0;
  }
  if (m.num_experts > 0) {
    ASSIGN_OR_RETURN(m.experts_per_token,
                     GetFirst(c, {"num_experts_per_tok", "experts_per_token"}, 0));
    ASSIGN_OR_RETURN(m.moe_intermediate_size,
                     GetCount(c, "moe_intermediate_size", m.intermediate_size));
    uint32_t shared_width = 0;
    ASSIGN_OR_RETURN(shared_width, GetFirst(c, {"shared_expert_intermediate_size",
                                                "shared_intermediate_size"}, 0));
    // A shared expert given by its width (Qwen3-Next, Granite 4) counts as that many experts.
    const uint32_t shared_default =
        m.moe_intermediate_size > 0 ? (shared_width + m.moe_intermediate_size / 2) / m.moe_intermediate_size : 0;
    ASSIGN_OR_RETURN(m.num_shared_experts, GetCount(c, "n_shared_experts", shared_default));
    if (kinds.moe_blocks == 0 && kinds.mlp_blocks == 0) {
      ASSIGN_OR_RETURN(m.num_dense_layers, GetCount(c, "first_k_dense_replace", 0));
    }
  } else {
    m.num_dense_layers = m.num_layers - m.num_ffnless_layers;
  }
  KVTIER_RETURN_IF_ERROR(m.Validate());
  return m;
}

Result<ModelSpec> ModelFromHfConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read model config '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return ModelFromHfConfig(text.str(), path);
}

Result<ModelSpec> ResolveModel(std::string_view name_or_path) {
  if (name_or_path.ends_with(".json")) return ModelFromHfConfigFile(std::string(name_or_path));
  return FindModel(name_or_path);
}

}  // namespace kvtier::planning
