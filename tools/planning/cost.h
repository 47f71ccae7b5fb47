// Prefill cost against the prefix-cache hit rate.
//
// For a prompt of T tokens with hit rate h, the first P = h x T tokens are reloaded from the
// cache and the rest is prefilled (PrefillModel::PrefillWithCacheSeconds). The GPUs are held
// for the reload as well, so
//   GPU-seconds per prompt = tp x (reload(P) + prefill of [P, T))
//   $ per million prompt tokens = GPU-seconds x $/GPU-hour / 3600 x 10^6 / T
// Time to first token counts the prefill part only (no queueing, no first decode step).
//
// CompareCost puts one scenario the way the public "cache hit to $/token" calculators do:
// without the cache (hit rate 0) against with it (the scenario's hit rate), the GPU time a
// request saves, and the KV a session keeps, before and after kvtier's data reduction.
//
// API price tables (ParseApiPrices) are TOML, one [[price]] table per model:
//   provider = "DeepSeek"  model = "deepseek-chat"  input_usd_per_m = 0.28
//   cached_input_usd_per_m = 0.028  as_of = "2025-09"  url = "https://..."

#ifndef KVTIER_TOOLS_PLANNING_COST_H_
#define KVTIER_TOOLS_PLANNING_COST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "tools/planning/crossover.h"

namespace kvtier::planning {

struct CostPoint {
  double hit_rate = 0;
  double usd_per_million_prompt_tokens = 0;
  double ttft_seconds = 0;
  double gpu_seconds_per_prompt = 0;
};

// InvalidArgument for hit_rate outside [0, 1], a negative price or zero tokens.
Result<CostPoint> CostAtHitRate(const PrefillModel& prefill, double usd_per_gpu_hour,
                                uint64_t prompt_tokens, double hit_rate);

// Cost at hit rates 0, 1/steps, ..., 1. REQUIRES: steps >= 1.
Result<std::vector<CostPoint>> CostCurve(const PrefillModel& prefill, double usd_per_gpu_hour,
                                         uint64_t prompt_tokens, int steps);

struct CostScenario {
  uint64_t prompt_tokens = 8192;
  double hit_rate = 0.8;             // Share of each prompt's tokens reloaded from the cache.
  double usd_per_gpu_hour = 2.5;
  double data_reduction_ratio = 1;   // Lossless compression of the stored KV; >= 1.
};

struct CostComparison {
  CostPoint without_cache;            // Hit rate 0: the whole prompt is prefilled.
  CostPoint with_cache;               // At the scenario's hit rate.
  double gpu_seconds_saved = 0;       // Per request, over the tensor-parallel group.
  double gpu_time_saved_fraction = 0; // gpu_seconds_saved / without_cache.gpu_seconds.
  double ttft_speedup = 0;            // without_cache.ttft / with_cache.ttft.
  double kv_bytes_per_session = 0;    // The prompt's KV at the scenario's dtype, and the state a
                                      // hybrid model resumes from.
  double kv_bytes_per_session_reduced = 0;  // Divided by the data-reduction ratio.
};

// InvalidArgument as CostAtHitRate, or for a reduction ratio under 1.
Result<CostComparison> CompareCost(const PrefillModel& prefill, const CostScenario& scenario);

struct ApiPrice {
  std::string provider;
  std::string model;
  double input_usd_per_million = 0;
  double cached_input_usd_per_million = 0;
  std::string as_of;  // When the price was read from the provider's page.
  std::string url;    // The page.
};

// InvalidArgument naming the entry and field for a parse error, a missing field, a negative
// price or a cached price above the input price.
Result<std::vector<ApiPrice>> ParseApiPrices(std::string_view toml_text);
// The table shipped with kvtier (tools/planning/api_prices.toml, compiled in).
std::string_view BuiltinApiPricesToml();

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_COST_H_
