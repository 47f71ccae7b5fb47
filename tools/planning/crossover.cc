#include "tools/planning/crossover.h"

#include <algorithm>
#include <string>

namespace kvtier::planning {
namespace {

// Causal (query, key) pairs of the first x positions of a layer with a sliding window
// (window == 0: unlimited), counted continuously.
double CausalPairs(double x, double window) {
  if (window <= 0 || x <= window) return x * x / 2;
  return window * x - window * window / 2;
}

}  // namespace

PrefillModel::PrefillModel(ModelSpec model, GpuSpec gpu, LinkSpec link, PrefillOptions options)
    : model_(std::move(model)), gpu_(std::move(gpu)), link_(std::move(link)), options_(options) {
  active_matmul_params_ = static_cast<double>(CountParameters(model_).active_matmul);
  if (model_.attention == AttentionKind::kMla) {
    kv_share_per_gpu_ = 1;
  } else {
    kv_share_per_gpu_ = 1.0 / std::min(options_.tensor_parallel, model_.num_kv_heads);
  }
}

Result<PrefillModel> PrefillModel::Create(const ModelSpec& model, const GpuSpec& gpu,
                                          const LinkSpec& link, const PrefillOptions& options) {
  KVTIER_RETURN_IF_ERROR(model.Validate());
  if (options.tensor_parallel == 0 || options.tensor_parallel > 1024) {
    return Status::InvalidArgument("tensor-parallel degree must be from 1 to 1024");
  }
  if (!(options.mfu > 0 && options.mfu <= 1)) {
    return Status::InvalidArgument("mfu must be in (0, 1], got " + std::to_string(options.mfu));
  }
  if (!(options.attention_mfu >= 0 && options.attention_mfu <= 1)) {
    return Status::InvalidArgument("attention mfu must be in [0, 1] (0 = mfu), got " +
                                   std::to_string(options.attention_mfu));
  }
  if (gpu.bf16_dense_tflops <= 0) {
    return Status::InvalidArgument("GPU '" + gpu.name + "' has no BF16 peak");
  }
  if (options.fp8_compute && gpu.fp8_dense_tflops <= 0) {
    return Status::InvalidArgument("GPU '" + gpu.name + "' has no FP8 tensor cores");
  }
  if (!(link.gigabytes_per_second > 0) || link.latency_us < 0) {
    return Status::InvalidArgument("link '" + link.name + "' needs a positive bandwidth");
  }
  return PrefillModel(model, gpu, link, options);
}

double PrefillModel::DenseFlops(double cached, double tokens) const {
  return 2 * active_matmul_params_ * (tokens - cached);
}

double PrefillModel::AttentionFlops(double cached, double tokens) const {
  const double full_layers = model_.num_full_attention_layers();
  const double pair_flops =
      2.0 * model_.num_heads * (model_.qk_head_dim() + model_.value_head_dim());
  const double window = model_.sliding_window;
  // Sparse attention: each query attends to at most sparse_topk keys (as a window does, for
  // FLOPs), chosen by index scores over every pair.
  const double topk = model_.sparse_topk;
  const double pairs = full_layers * (CausalPairs(tokens, topk) - CausalPairs(cached, topk)) +
                       model_.num_sliding_layers *
                           (CausalPairs(tokens, window) - CausalPairs(cached, window));
  const double index_pairs =
      model_.sparse_topk > 0 ? model_.num_attention_layers() * (tokens * tokens - cached * cached) / 2 : 0;
  const double index_pair_flops = 2.0 * model_.indexer_heads * model_.indexer_head_dim;
  // Linear layers: a constant cost per token (state update and read, convolution).
  const double linear = static_cast<double>(model_.linear_flops_per_token) *
                        model_.num_linear_layers * (tokens - cached);
  return pair_flops * pairs + index_pair_flops * index_pairs + linear;
}

double PrefillModel::GroupFlopsPerSecond() const {
  const double peak_tflops =
      options_.fp8_compute ? gpu_.fp8_dense_tflops : gpu_.bf16_dense_tflops;
  return options_.tensor_parallel * peak_tflops * 1e12 * options_.mfu;
}

double PrefillModel::GroupAttentionFlopsPerSecond() const {
  return options_.attention_mfu > 0
             ? GroupFlopsPerSecond() / options_.mfu * options_.attention_mfu
             : GroupFlopsPerSecond();
}

double PrefillModel::SuffixSeconds(double cached, double tokens) const {
  return DenseFlops(cached, tokens) / GroupFlopsPerSecond() +
         AttentionFlops(cached, tokens) / GroupAttentionFlopsPerSecond();
}

double PrefillModel::ReloadBytesPerGpu(double tokens) const {
  // ResumeBytes works in whole tokens; fractions matter only for hit-rate sweeps, where
  // linear interpolation between neighbours is exact below the window and above it (and the
  // state snapshot is there from the first token on).
  const auto whole = static_cast<uint64_t>(tokens);
  const double frac = tokens - static_cast<double>(whole);
  const double bytes =
      static_cast<double>(ResumeBytes(model_, options_.kv_precision, whole)) * (1 - frac) +
      static_cast<double>(ResumeBytes(model_, options_.kv_precision, whole + 1)) * frac;
  return bytes * kv_share_per_gpu_;
}

double PrefillModel::ReloadSeconds(double tokens) const {
  if (tokens <= 0) return 0;
  double bytes_over_link = ReloadBytesPerGpu(tokens);
  if (!link_.per_gpu) bytes_over_link *= options_.tensor_parallel;
  return link_.latency_us * 1e-6 + bytes_over_link / (link_.gigabytes_per_second * 1e9);
}

std::optional<uint64_t> PrefillModel::CrossoverTokens(uint64_t max_tokens) const {
  // recompute - reload is convex in T (recompute convex, reload concave) and not positive at
  // T = 0, so it changes sign at most once: bisect for the first T where reload wins.
  auto reload_wins = [this](uint64_t t) {
    const double tokens = static_cast<double>(t);
    return ReloadSeconds(tokens) <= RecomputeSeconds(tokens);
  };
  if (!reload_wins(max_tokens)) return std::nullopt;
  uint64_t lo = 1;
  uint64_t hi = max_tokens;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (reload_wins(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

}  // namespace kvtier::planning
