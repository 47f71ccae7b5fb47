// Real KV-cache tensors from the reference model: run a prompt and keep K and V.
//
// Thread-safe: each call loads its own model and session.

#ifndef KVTIER_SRC_MODEL_KV_CAPTURE_H_
#define KVTIER_SRC_MODEL_KV_CAPTURE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "src/model/llama2c.h"

namespace kvtier::model {

struct CapturedKv {
  Llama2cConfig config;
  size_t positions = 0;          // Positions held in k and v.
  std::vector<int32_t> tokens;   // The tokens of those positions, BOS first.
  std::string text;              // Their decoded text.
  // Layout [layer][pos][kv_head][head_dim], as Llama2cSession::ExportKv.
  std::vector<float> k;
  std::vector<float> v;
};

// Loads the model and tokenizer from `model_dir`, feeds BOS + `prompt` and continues greedily
// (through end-of-story tokens) until the cache holds `positions` positions.
// InvalidArgument when `positions` is 0, exceeds seq_len or is shorter than the prompt.
Result<CapturedKv> CaptureKv(const std::string& model_dir, std::string_view prompt,
                             size_t positions);

}  // namespace kvtier::model

#endif  // KVTIER_SRC_MODEL_KV_CAPTURE_H_
