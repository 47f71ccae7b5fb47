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
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    uint32_t sliding = 0;
    for (const json& t : c["layer_types"]) {
      if (t.is_string() && t.get<std::string>() == "sliding_attention") ++sliding;
    }
    if (sliding > 0 && window > 0) {
      m.sliding_window = window;
      m.num_sliding_layers = sliding;
    }
  } else if (window > 0 && GetFlag(c, "use_sliding_window", true)) {
    m.sliding_window = window;
    m.num_sliding_layers = m.num_layers;
  }

  ASSIGN_OR_RETURN(m.intermediate_size, GetCount(c, "intermediate_size", 0));
  ASSIGN_OR_RETURN(m.num_experts, GetFirst(c, {"n_routed_experts", "num_local_experts",
                                               "num_experts"}, 0));
  if (m.num_experts > 0) {
    ASSIGN_OR_RETURN(m.experts_per_token,
                     GetFirst(c, {"num_experts_per_tok", "experts_per_token"}, 0));
    ASSIGN_OR_RETURN(m.num_shared_experts, GetCount(c, "n_shared_experts", 0));
    ASSIGN_OR_RETURN(m.moe_intermediate_size,
                     GetCount(c, "moe_intermediate_size", m.intermediate_size));
    ASSIGN_OR_RETURN(m.num_dense_layers, GetCount(c, "first_k_dense_replace", 0));
  } else {
    m.num_dense_layers = m.num_layers;
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
