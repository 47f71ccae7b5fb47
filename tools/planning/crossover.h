// Recompute-versus-reload arithmetic: how long prefill takes to rebuild a prompt's KV on the
// GPUs, how long reloading the same KV over a link takes, and the prompt length from which
// reloading wins.
//
// Recompute (tokens T, of which the first P are already cached; P = 0 for a full prefill):
//   dense FLOPs     = 2 x active_matmul_params x (T - P)
//   attention FLOPs = 2 x heads x (qk_head_dim + v_head_dim) x
//                     [ full_layers x (S_k(T) - S_k(P)) + sliding_layers x (S_w(T) - S_w(P)) ]
//                   + 2 x indexer_heads x indexer_head_dim x attention_layers x (T^2 - P^2) / 2
//                   + linear_flops_per_token x linear_layers x (T - P)
//       where S_w(x) = x^2 / 2 for x <= w, w x x - w^2 / 2 beyond (w = 0: unbounded): the
//       (query, key) pairs of a causal mask with a window w, counted continuously; k is the
//       sparse-attention top-k (0 for dense attention), whose index scores cover every pair.
//       Linear-attention and state-space layers cost the same for every token: no T^2 term.
//   seconds = dense FLOPs / (tp x peak x mfu) + attention FLOPs / (tp x peak x attention_mfu)
// Reload of P tokens:
//   bytes per GPU = ResumeBytes(P) x share (the KV of P tokens and, for a hybrid model, one
//       state snapshot), share = 1 / min(tp, kv_heads) for standard
//       attention (KV heads are split over tensor-parallel ranks, replicated past kv_heads) and
//       1 for MLA (every rank needs the whole latent)
//   seconds = link latency + bytes per GPU / link bandwidth           (link per GPU)
//           = link latency + bytes per GPU x tp / link bandwidth      (link shared by the group)
//
// Thread safety: immutable after Create; const methods may be called concurrently.

#ifndef KVTIER_TOOLS_PLANNING_CROSSOVER_H_
#define KVTIER_TOOLS_PLANNING_CROSSOVER_H_

#include <cstdint>
#include <optional>

#include "kvtier/status.h"
#include "tools/planning/catalog.h"
#include "tools/planning/kv_math.h"

namespace kvtier::planning {

struct PrefillOptions {
  // GPUs the model is split over with tensor parallelism; they share the FLOPs and the KV.
  uint32_t tensor_parallel = 1;
  // Model FLOPs utilisation of prefill: the fraction of the dense peak actually achieved.
  // Long-prompt prefill on H100 class GPUs typically reaches 0.4 to 0.6. (0, 1].
  double mfu = 0.5;
  // The same for the attention kernels, when they reach another fraction of the peak than the
  // matmuls (long prompts, where attention dominates; CPUs). 0 = mfu. [0, 1].
  double attention_mfu = 0;
  // Element type of the cached KV; sets the bytes to reload.
  KvPrecision kv_precision = KvPrecision::kBf16;
  // Run prefill matmuls at the FP8 peak instead of the BF16 one. Fails for GPUs without FP8.
  bool fp8_compute = false;
};

class PrefillModel {
 public:
  // InvalidArgument for tp == 0, mfu outside (0, 1], attention_mfu outside [0, 1], FP8 compute on a GPU without it, an
  // invalid model or a link without bandwidth.
  static Result<PrefillModel> Create(const ModelSpec& model, const GpuSpec& gpu,
                                     const LinkSpec& link, const PrefillOptions& options);

  const ModelSpec& model() const { return model_; }
  const GpuSpec& gpu() const { return gpu_; }
  const LinkSpec& link() const { return link_; }
  const PrefillOptions& options() const { return options_; }

  // FLOPs to prefill positions [cached, tokens). REQUIRES: cached <= tokens.
  double DenseFlops(double cached, double tokens) const;
  double AttentionFlops(double cached, double tokens) const;
  // Delivered FLOP/s of the whole tensor-parallel group in matmuls and in attention.
  double GroupFlopsPerSecond() const;
  double GroupAttentionFlopsPerSecond() const;

  double RecomputeSeconds(double tokens) const { return SuffixSeconds(0, tokens); }
  // Prefill of the uncached suffix when the first `cached` tokens' KV is already on the GPU.
  double SuffixSeconds(double cached, double tokens) const;
  // Bytes each GPU receives to reload `tokens` tokens.
  double ReloadBytesPerGpu(double tokens) const;
  // 0 for zero tokens (nothing to reload, no latency).
  double ReloadSeconds(double tokens) const;
  // Time to first token (prefill part) when `cached` of `tokens` tokens are reloaded.
  double PrefillWithCacheSeconds(double cached, double tokens) const {
    return ReloadSeconds(cached) + SuffixSeconds(cached, tokens);
  }

  // The smallest whole prompt length from which reloading is at least as fast as
  // recomputing; nullopt when recompute stays faster up to `max_tokens`.
  std::optional<uint64_t> CrossoverTokens(uint64_t max_tokens = 100'000'000) const;
  // Recompute time / reload time at `tokens` (> 1 means reloading is faster).
  double Speedup(double tokens) const { return RecomputeSeconds(tokens) / ReloadSeconds(tokens); }

 private:
  PrefillModel(ModelSpec model, GpuSpec gpu, LinkSpec link, PrefillOptions options);

  ModelSpec model_;
  GpuSpec gpu_;
  LinkSpec link_;
  PrefillOptions options_;
  double active_matmul_params_ = 0;
  double kv_share_per_gpu_ = 1;
};

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_CROSSOVER_H_
