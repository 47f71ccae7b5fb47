// Prefill cost against the prefix-cache hit rate.
//
// For a prompt of T tokens with hit rate h, the first P = h x T tokens are reloaded from the
// cache and the rest is prefilled (PrefillModel::PrefillWithCacheSeconds). The GPUs are held
// for the reload as well, so
//   GPU-seconds per prompt = tp x (reload(P) + prefill of [P, T))
//   $ per million prompt tokens = GPU-seconds x $/GPU-hour / 3600 x 10^6 / T
// Time to first token counts the prefill part only (no queueing, no first decode step).

#ifndef KVTIER_TOOLS_PLANNING_COST_H_
#define KVTIER_TOOLS_PLANNING_COST_H_

#include <cstdint>
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

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_COST_H_
