#include "src/model/llama2c.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "src/model/model_files.h"

namespace kvtier::model {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoints are little-endian and read in place");

constexpr size_t kHeaderInts = 7;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
constexpr float kRmsNormEpsilon = 1e-5f;
constexpr int32_t kBosToken = 1;

// Generous bounds that keep every size product below 2^63 and reject garbage headers.
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxHiddenDim = 1 << 18;
constexpr int64_t kMaxLayers = 1 << 10;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxSeqLen = 1 << 20;

Status ValidateConfig(const Llama2cConfig& c) {
  auto in_range = [](int64_t v, int64_t hi) { return v > 0 && v <= hi; };
  if (!in_range(c.dim, kMaxDim) || !in_range(c.hidden_dim, kMaxHiddenDim) ||
      !in_range(c.n_layers, kMaxLayers) || !in_range(c.n_heads, c.dim) ||
      !in_range(c.n_kv_heads, c.n_heads) || !in_range(c.vocab_size, kMaxVocab) ||
      !in_range(c.seq_len, kMaxSeqLen)) {
    return Status::InvalidArgument("llama2c checkpoint: header field out of range");
  }
  if (c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0 || c.head_dim() % 2 != 0) {
    return Status::InvalidArgument(
        "llama2c checkpoint: dim, n_heads and n_kv_heads do not divide into even heads");
  }
  return Status::OK();
}

// out[d] = w[d][n] . x[n], summed in index order.
void MatMul(float* out, const float* x, const float* w, int32_t n, int32_t d) {
  for (int32_t i = 0; i < d; ++i) {
    const float* row = w + static_cast<size_t>(i) * n;
    float sum = 0.0f;
    for (int32_t j = 0; j < n; ++j) sum += row[j] * x[j];
    out[i] = sum;
  }
}

void RmsNorm(float* out, const float* x, const float* weight, int32_t size) {
  float ss = 0.0f;
  for (int32_t j = 0; j < size; ++j) ss += x[j] * x[j];
  ss = 1.0f / std::sqrt(ss / static_cast<float>(size) + kRmsNormEpsilon);
  for (int32_t j = 0; j < size; ++j) out[j] = weight[j] * (ss * x[j]);
}

void Softmax(float* x, size_t size) {
  float max_val = x[0];
  for (size_t i = 1; i < size; ++i) max_val = std::max(max_val, x[i]);
  float sum = 0.0f;
  for (size_t i = 0; i < size; ++i) {
    x[i] = std::exp(x[i] - max_val);
    sum += x[i];
  }
  for (size_t i = 0; i < size; ++i) x[i] /= sum;
}

// Rotates consecutive pairs of each head of `vec` (n_heads heads of head_dim floats).
void ApplyRope(float* vec, int32_t n_heads, int32_t head_dim, const float* cos_row,
               const float* sin_row) {
  for (int32_t h = 0; h < n_heads; ++h) {
    float* head = vec + static_cast<size_t>(h) * head_dim;
    for (int32_t i = 0; i < head_dim; i += 2) {
      const float c = cos_row[i / 2];
      const float s = sin_row[i / 2];
      const float v0 = head[i];
      const float v1 = head[i + 1];
      head[i] = v0 * c - v1 * s;
      head[i + 1] = v0 * s + v1 * c;
    }
  }
}

}  // namespace

Result<std::unique_ptr<Llama2cModel>> Llama2cModel::FromBytes(std::span<const std::byte> bytes) {
  if (bytes.size() < kHeaderBytes) {
    return Status::InvalidArgument("llama2c checkpoint: " + std::to_string(bytes.size()) +
                                   " bytes is shorter than the 28-byte header");
  }
  int32_t header[kHeaderInts];
  std::memcpy(header, bytes.data(), kHeaderBytes);
  std::unique_ptr<Llama2cModel> model(new Llama2cModel());
  Llama2cConfig& c = model->config_;
  c.dim = header[0];
  c.hidden_dim = header[1];
  c.n_layers = header[2];
  c.n_heads = header[3];
  c.n_kv_heads = header[4];
  c.shared_classifier = header[5] > 0;
  // A negative vocab_size means a separate classifier; INT32_MIN has no positive twin.
  c.vocab_size = header[5] == INT32_MIN ? 0 : std::abs(header[5]);
  c.seq_len = header[6];
  KVTIER_RETURN_IF_ERROR(ValidateConfig(c));

  const uint64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers;
  const uint64_t kv_dim = c.kv_dim(), vocab = c.vocab_size;
  const uint64_t rope_half = static_cast<uint64_t>(c.seq_len) * (c.head_dim() / 2);
  const uint64_t floats = vocab * dim + layers * (dim + dim * dim + 2 * kv_dim * dim +
                                                  dim * dim + dim + 3 * hidden * dim) +
                          dim + 2 * rope_half + (c.shared_classifier ? 0 : vocab * dim);
  const uint64_t expected = kHeaderBytes + floats * sizeof(float);
  if (bytes.size() != expected) {
    return Status::InvalidArgument("llama2c checkpoint: size is " + std::to_string(bytes.size()) +
                                   " bytes, the header implies " + std::to_string(expected));
  }
  model->weights_.resize(floats);
  std::memcpy(model->weights_.data(), bytes.data() + kHeaderBytes, floats * sizeof(float));

  const float* p = model->weights_.data();
  auto take = [&p](uint64_t n) {
    const float* start = p;
    p += n;
    return start;
  };
  model->token_embedding_ = take(vocab * dim);
  model->rms_att_ = take(layers * dim);
  model->wq_ = take(layers * dim * dim);
  model->wk_ = take(layers * kv_dim * dim);
  model->wv_ = take(layers * kv_dim * dim);
  model->wo_ = take(layers * dim * dim);
  model->rms_ffn_ = take(layers * dim);
  model->w1_ = take(layers * hidden * dim);
  model->w2_ = take(layers * dim * hidden);
  model->w3_ = take(layers * hidden * dim);
  model->rms_final_ = take(dim);
  model->rope_cos_ = take(rope_half);
  model->rope_sin_ = take(rope_half);
  model->classifier_ = c.shared_classifier ? model->token_embedding_ : take(vocab * dim);
  return model;
}

Result<std::unique_ptr<Llama2cModel>> Llama2cModel::Load(const std::string& path) {
  Result<std::vector<std::byte>> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  Result<std::unique_ptr<Llama2cModel>> model = FromBytes(*bytes);
  if (!model.ok()) {
    return Status(model.status().code(), path + ": " + std::string(model.status().message()));
  }
  return model;
}

Llama2cSession::Llama2cSession(const Llama2cModel& model)
    : model_(model),
      cfg_(model.config()),
      key_cache_(static_cast<size_t>(cfg_.n_layers) * cfg_.seq_len * cfg_.kv_dim()),
      value_cache_(key_cache_.size()),
      x_(cfg_.dim),
      xb_(cfg_.dim),
      xb2_(cfg_.dim),
      hb_(cfg_.hidden_dim),
      hb2_(cfg_.hidden_dim),
      q_(cfg_.dim),
      att_(cfg_.seq_len),
      logits_(cfg_.vocab_size) {}

Result<std::span<const float>> Llama2cSession::Forward(int32_t token) {
  if (token < 0 || token >= cfg_.vocab_size) {
    return Status::InvalidArgument("token " + std::to_string(token) + " is outside the vocabulary");
  }
  if (pos_ >= static_cast<size_t>(cfg_.seq_len)) {
    return Status::OutOfRange("the KV cache is full (" + std::to_string(cfg_.seq_len) +
                              " positions)");
  }
  const Llama2cModel& m = model_;
  const int32_t dim = cfg_.dim, hidden = cfg_.hidden_dim, kv_dim = cfg_.kv_dim();
  const int32_t head_dim = cfg_.head_dim();
  const int32_t kv_group = cfg_.n_heads / cfg_.n_kv_heads;
  const size_t d2 = static_cast<size_t>(dim) * dim, kvd = static_cast<size_t>(kv_dim) * dim;
  const size_t hd = static_cast<size_t>(hidden) * dim;
  const size_t layer_cache = static_cast<size_t>(cfg_.seq_len) * kv_dim;
  const float* cos_row = m.rope_cos_ + pos_ * (head_dim / 2);
  const float* sin_row = m.rope_sin_ + pos_ * (head_dim / 2);
  const float inv_sqrt_head = 1.0f / std::sqrt(static_cast<float>(head_dim));

  float* x = x_.data();
  std::memcpy(x, m.token_embedding_ + static_cast<size_t>(token) * dim, dim * sizeof(float));

  for (int32_t l = 0; l < cfg_.n_layers; ++l) {
    RmsNorm(xb_.data(), x, m.rms_att_ + static_cast<size_t>(l) * dim, dim);
    float* key_row = key_cache_.data() + l * layer_cache + pos_ * kv_dim;
    float* value_row = value_cache_.data() + l * layer_cache + pos_ * kv_dim;
    MatMul(q_.data(), xb_.data(), m.wq_ + l * d2, dim, dim);
    MatMul(key_row, xb_.data(), m.wk_ + l * kvd, dim, kv_dim);
    MatMul(value_row, xb_.data(), m.wv_ + l * kvd, dim, kv_dim);
    ApplyRope(q_.data(), cfg_.n_heads, head_dim, cos_row, sin_row);
    ApplyRope(key_row, cfg_.n_kv_heads, head_dim, cos_row, sin_row);

    const float* layer_keys = key_cache_.data() + l * layer_cache;
    const float* layer_values = value_cache_.data() + l * layer_cache;
    for (int32_t h = 0; h < cfg_.n_heads; ++h) {
      const float* q = q_.data() + static_cast<size_t>(h) * head_dim;
      const size_t kv_offset = static_cast<size_t>(h / kv_group) * head_dim;
      for (size_t t = 0; t <= pos_; ++t) {
        const float* k = layer_keys + t * kv_dim + kv_offset;
        float score = 0.0f;
        for (int32_t i = 0; i < head_dim; ++i) score += q[i] * k[i];
        att_[t] = score * inv_sqrt_head;
      }
      Softmax(att_.data(), pos_ + 1);
      float* out = xb_.data() + static_cast<size_t>(h) * head_dim;
      std::fill(out, out + head_dim, 0.0f);
      for (size_t t = 0; t <= pos_; ++t) {
        const float* v = layer_values + t * kv_dim + kv_offset;
        for (int32_t i = 0; i < head_dim; ++i) out[i] += att_[t] * v[i];
      }
    }
    MatMul(xb2_.data(), xb_.data(), m.wo_ + l * d2, dim, dim);
    for (int32_t i = 0; i < dim; ++i) x[i] += xb2_[i];

    RmsNorm(xb_.data(), x, m.rms_ffn_ + static_cast<size_t>(l) * dim, dim);
    MatMul(hb_.data(), xb_.data(), m.w1_ + l * hd, dim, hidden);
    MatMul(hb2_.data(), xb_.data(), m.w3_ + l * hd, dim, hidden);
    for (int32_t i = 0; i < hidden; ++i) {
      const float h1 = hb_[i];
      hb_[i] = h1 * (1.0f / (1.0f + std::exp(-h1))) * hb2_[i];
    }
    MatMul(xb_.data(), hb_.data(), m.w2_ + l * hd, hidden, dim);
    for (int32_t i = 0; i < dim; ++i) x[i] += xb_[i];
  }
  RmsNorm(x, x, m.rms_final_, dim);
  MatMul(logits_.data(), x, m.classifier_, dim, cfg_.vocab_size);
  ++pos_;
  return std::span<const float>(logits_);
}

Status Llama2cSession::ExportKv(size_t n, std::vector<float>* k, std::vector<float>* v) const {
  if (n > pos_) {
    return Status::OutOfRange("cannot export " + std::to_string(n) + " positions, the cache holds " +
                              std::to_string(pos_));
  }
  const size_t row = static_cast<size_t>(cfg_.kv_dim());
  const size_t layer_cache = static_cast<size_t>(cfg_.seq_len) * row;
  k->resize(n * cfg_.kv_floats_per_pos());
  v->resize(k->size());
  for (int32_t l = 0; l < cfg_.n_layers; ++l) {
    std::memcpy(k->data() + l * n * row, key_cache_.data() + l * layer_cache, n * row * sizeof(float));
    std::memcpy(v->data() + l * n * row, value_cache_.data() + l * layer_cache,
                n * row * sizeof(float));
  }
  return Status::OK();
}

Status Llama2cSession::ImportKv(size_t n, std::span<const float> k, std::span<const float> v) {
  if (n > static_cast<size_t>(cfg_.seq_len)) {
    return Status::OutOfRange("cannot import " + std::to_string(n) + " positions, seq_len is " +
                              std::to_string(cfg_.seq_len));
  }
  const size_t want = n * cfg_.kv_floats_per_pos();
  if (k.size() != want || v.size() != want) {
    return Status::InvalidArgument("KV import of " + std::to_string(n) + " positions needs " +
                                   std::to_string(want) + " floats each for K and V");
  }
  const size_t row = static_cast<size_t>(cfg_.kv_dim());
  const size_t layer_cache = static_cast<size_t>(cfg_.seq_len) * row;
  for (int32_t l = 0; l < cfg_.n_layers; ++l) {
    std::memcpy(key_cache_.data() + l * layer_cache, k.data() + l * n * row, n * row * sizeof(float));
    std::memcpy(value_cache_.data() + l * layer_cache, v.data() + l * n * row,
                n * row * sizeof(float));
  }
  pos_ = n;
  return Status::OK();
}

int32_t ArgMax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

Result<std::vector<int32_t>> GenerateGreedy(Llama2cSession& session,
                                            std::span<const int32_t> prompt,
                                            size_t max_new_tokens, bool stop_at_bos) {
  if (prompt.empty()) return Status::InvalidArgument("greedy generation needs a prompt");
  std::vector<int32_t> generated;
  Result<std::span<const float>> logits = Status::Internal("no forward pass yet");
  for (int32_t token : prompt) {
    logits = session.Forward(token);
    if (!logits.ok()) return logits.status();
  }
  while (generated.size() < max_new_tokens) {
    const int32_t next = ArgMax(*logits);
    if (stop_at_bos && next == kBosToken) break;
    generated.push_back(next);
    if (generated.size() == max_new_tokens) break;
    logits = session.Forward(next);
    if (logits.status().code() == StatusCode::kOutOfRange) break;
    if (!logits.ok()) return logits.status();
  }
  return generated;
}

}  // namespace kvtier::model
