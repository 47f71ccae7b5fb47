#include "tools/planning/cost.h"

#include <string>

namespace kvtier::planning {

Result<CostPoint> CostAtHitRate(const PrefillModel& prefill, double usd_per_gpu_hour,
                                uint64_t prompt_tokens, double hit_rate) {
  if (!(hit_rate >= 0 && hit_rate <= 1)) {
    return Status::InvalidArgument("hit rate must be from 0 to 1, got " + std::to_string(hit_rate));
  }
  if (!(usd_per_gpu_hour >= 0)) {
    return Status::InvalidArgument("price per GPU-hour must not be negative");
  }
  if (prompt_tokens == 0) return Status::InvalidArgument("prompt length must be positive");
  const double tokens = static_cast<double>(prompt_tokens);
  CostPoint p;
  p.hit_rate = hit_rate;
  p.ttft_seconds = prefill.PrefillWithCacheSeconds(hit_rate * tokens, tokens);
  p.gpu_seconds_per_prompt = p.ttft_seconds * prefill.options().tensor_parallel;
  p.usd_per_million_prompt_tokens =
      p.gpu_seconds_per_prompt * usd_per_gpu_hour / 3600 * 1e6 / tokens;
  return p;
}

Result<std::vector<CostPoint>> CostCurve(const PrefillModel& prefill, double usd_per_gpu_hour,
                                         uint64_t prompt_tokens, int steps) {
  if (steps < 1 || steps > 1000) return Status::InvalidArgument("steps must be from 1 to 1000");
  std::vector<CostPoint> curve;
  for (int i = 0; i <= steps; ++i) {
    Result<CostPoint> p =
        CostAtHitRate(prefill, usd_per_gpu_hour, prompt_tokens, static_cast<double>(i) / steps);
    if (!p.ok()) return p.status();
    curve.push_back(*p);
  }
  return curve;
}

}  // namespace kvtier::planning
