// Reads a Hugging Face transformers config.json into a ModelSpec, for models that are not in
// the built-in catalog (or to check a catalog entry against the published file).
//
// Understood: Llama/Mistral/Qwen style (num_key_value_heads, head_dim, sliding_window,
// use_sliding_window, layer_types), mixture-of-experts fields of Mixtral (num_local_experts),
// Qwen3-MoE (num_experts), gpt-oss (experts_per_token) and DeepSeek/Kimi (n_routed_experts,
// n_shared_experts, first_k_dense_replace), MLA (kv_lora_rank, q_lora_rank, qk_*_head_dim,
// v_head_dim), and multimodal wrappers that nest the language model under "text_config".
// Hybrid models: linear-attention and state-space layers from layer_types (linear_attention,
// mamba), Nemotron-H's hybrid_override_pattern / layers_block_type, or Qwen3-Next's
// full_attention_interval, shaped by Gated DeltaNet's linear_* fields (Qwen3-Next, Qwen3.5)
// or Mamba2's mamba_* fields (Nemotron-H, Granite 4); shared experts given by their width;
// DeepSeek V3.2's sparse-attention indexer (index_n_heads, index_head_dim, index_topk).

#ifndef KVTIER_TOOLS_PLANNING_HF_CONFIG_H_
#define KVTIER_TOOLS_PLANNING_HF_CONFIG_H_

#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "tools/planning/catalog.h"

namespace kvtier::planning {

// Parses config.json text. InvalidArgument naming the missing or malformed field; the result
// passes ModelSpec::Validate. `name` becomes ModelSpec::name and ::source.
Result<ModelSpec> ModelFromHfConfig(std::string_view json_text, std::string_view name);

// Reads and parses a config.json file; NotFound when it cannot be read.
Result<ModelSpec> ModelFromHfConfigFile(const std::string& path);

// A catalog name, or a path to a config.json (anything ending in ".json").
Result<ModelSpec> ResolveModel(std::string_view name_or_path);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_HF_CONFIG_H_
