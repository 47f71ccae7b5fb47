// A reference Llama forward pass for llama2.c "legacy" checkpoints, used as a source of real
// KV-cache tensors for tests, benchmarks and the `kvtier kv dump` command.
//
// Llama2cModel holds the weights (immutable once loaded; share it freely across threads).
// Llama2cSession runs one sequence token by token against a model and owns its KV cache;
// a session is not thread-safe, use one per thread.
//
// Determinism: the logits at position p depend only on the token at p, on p and on the K/V
// rows of positions [0, p], computed by one fixed sequence of float operations. So a session
// that imports the KV cache of positions [0, n) produced by another session and then runs
// position n gets bit-identical logits to the session that computed [0, n) itself.
//
// The KV cache is exposed as float32 in the layout [layer][pos][kv_head][head_dim], one
// array for K (after RoPE, as attention reads it) and one for V.

#ifndef KVTIER_SRC_MODEL_LLAMA2C_H_
#define KVTIER_SRC_MODEL_LLAMA2C_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::model {

// The seven int32 of a legacy checkpoint's header.
struct Llama2cConfig {
  int32_t dim = 0;         // Width of the residual stream.
  int32_t hidden_dim = 0;  // Width of the feed-forward layer.
  int32_t n_layers = 0;
  int32_t n_heads = 0;     // Query heads.
  int32_t n_kv_heads = 0;  // Key/value heads; divides n_heads.
  int32_t vocab_size = 0;  // Always positive here; see shared_classifier.
  int32_t seq_len = 0;     // Longest sequence the model (and a session) supports.
  // True when the header's vocab_size was positive: the classifier reuses the embedding.
  bool shared_classifier = true;

  int32_t head_dim() const { return dim / n_heads; }
  int32_t kv_dim() const { return n_kv_heads * head_dim(); }
  // Floats of K (or V) per position, all layers together: n_layers * kv_dim.
  size_t kv_floats_per_pos() const { return static_cast<size_t>(n_layers) * kv_dim(); }
};

class Llama2cModel {
 public:
  // Parses a checkpoint held in memory. InvalidArgument when the header is out of range or
  // the size is not exactly header + weights (a truncated or padded file), never a crash.
  static Result<std::unique_ptr<Llama2cModel>> FromBytes(std::span<const std::byte> bytes);
  // Reads and parses the checkpoint at `path`. NotFound when it cannot be opened.
  static Result<std::unique_ptr<Llama2cModel>> Load(const std::string& path);

  const Llama2cConfig& config() const { return config_; }

 private:
  friend class Llama2cSession;
  Llama2cModel() = default;

  Llama2cConfig config_;
  std::vector<float> weights_;  // Every float of the file after the header, in file order.
  // Views into weights_, in the checkpoint's order.
  const float* token_embedding_ = nullptr;  // [vocab][dim]
  const float* rms_att_ = nullptr;          // [layer][dim]
  const float* wq_ = nullptr;               // [layer][dim][dim]
  const float* wk_ = nullptr;               // [layer][kv_dim][dim]
  const float* wv_ = nullptr;               // [layer][kv_dim][dim]
  const float* wo_ = nullptr;               // [layer][dim][dim]
  const float* rms_ffn_ = nullptr;          // [layer][dim]
  const float* w1_ = nullptr;               // [layer][hidden][dim]
  const float* w2_ = nullptr;               // [layer][dim][hidden]
  const float* w3_ = nullptr;               // [layer][hidden][dim]
  const float* rms_final_ = nullptr;        // [dim]
  const float* rope_cos_ = nullptr;         // [seq_len][head_dim / 2]
  const float* rope_sin_ = nullptr;         // [seq_len][head_dim / 2]
  const float* classifier_ = nullptr;       // [vocab][dim]
};

class Llama2cSession {
 public:
  // REQUIRES: `model` outlives the session.
  explicit Llama2cSession(const Llama2cModel& model);

  // Number of positions whose K/V the cache holds; the next Forward() runs at this position.
  size_t pos() const { return pos_; }

  // Runs `token` at position pos(), appends its K/V to the cache and returns the logits
  // (vocab_size floats). The view stays valid until the next call on this session.
  // InvalidArgument for a token outside the vocabulary, OutOfRange when the cache is full.
  Result<std::span<const float>> Forward(int32_t token);

  // Copies K and V of positions [0, n) into *k and *v (resized), layout
  // [layer][pos][kv_head][head_dim]. OutOfRange when n > pos().
  Status ExportKv(size_t n, std::vector<float>* k, std::vector<float>* v) const;

  // Replaces the cache with K and V of positions [0, n) in the layout of ExportKv and sets
  // pos() to n; whatever the session held before is forgotten. InvalidArgument when the
  // sizes are not n * config().kv_floats_per_pos(), OutOfRange when n > seq_len.
  Status ImportKv(size_t n, std::span<const float> k, std::span<const float> v);

  // Forgets the cache: pos() becomes 0.
  void Reset() { pos_ = 0; }

 private:
  const Llama2cModel& model_;
  const Llama2cConfig& cfg_;
  size_t pos_ = 0;
  // Cache rows are [layer][seq_len][kv_dim].
  std::vector<float> key_cache_;
  std::vector<float> value_cache_;
  // Scratch activations, sized once.
  std::vector<float> x_, xb_, xb2_, hb_, hb2_, q_, att_, logits_;
};

// Index of the largest logit; the lowest index wins a tie.
int32_t ArgMax(std::span<const float> logits);

// Feeds `prompt` (REQUIRES: non-empty) to the session from its current position, then picks
// tokens greedily until `max_new_tokens` are generated, the model emits BOS (1) when
// `stop_at_bos`, or the cache is full. Returns the generated tokens (the prompt excluded).
Result<std::vector<int32_t>> GenerateGreedy(Llama2cSession& session,
                                            std::span<const int32_t> prompt,
                                            size_t max_new_tokens, bool stop_at_bos);

}  // namespace kvtier::model

#endif  // KVTIER_SRC_MODEL_LLAMA2C_H_
