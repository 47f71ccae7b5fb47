#include "tools/planning/cost.h"

#include <algorithm>
#include <optional>
#include <string>
#include <toml++/toml.h>

#include "tools/planning/kv_math.h"

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

Result<CostComparison> CompareCost(const PrefillModel& prefill, const CostScenario& scenario) {
  if (!(scenario.data_reduction_ratio >= 1)) {
    return Status::InvalidArgument("data-reduction ratio must be at least 1, got " +
                                   std::to_string(scenario.data_reduction_ratio));
  }
  Result<CostPoint> cold =
      CostAtHitRate(prefill, scenario.usd_per_gpu_hour, scenario.prompt_tokens, 0);
  if (!cold.ok()) return cold.status();
  Result<CostPoint> warm = CostAtHitRate(prefill, scenario.usd_per_gpu_hour,
                                         scenario.prompt_tokens, scenario.hit_rate);
  if (!warm.ok()) return warm.status();
  CostComparison c;
  c.without_cache = *cold;
  c.with_cache = *warm;
  c.gpu_seconds_saved = cold->gpu_seconds_per_prompt - warm->gpu_seconds_per_prompt;
  c.gpu_time_saved_fraction = c.gpu_seconds_saved / cold->gpu_seconds_per_prompt;
  c.ttft_speedup = cold->ttft_seconds / warm->ttft_seconds;
  // A hybrid model's session also keeps the state snapshot it resumes from.
  c.kv_bytes_per_session = static_cast<double>(
      ResumeBytes(prefill.model(), prefill.options().kv_precision, scenario.prompt_tokens));
  c.kv_bytes_per_session_reduced = c.kv_bytes_per_session / scenario.data_reduction_ratio;
  return c;
}

Result<std::vector<ApiPrice>> ParseApiPrices(std::string_view toml_text) {
  toml::table root;
  try {
    root = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument("price table is not valid TOML: " +
                                   std::string(e.description()) + " (line " +
                                   std::to_string(e.source().begin.line) + ")");
  }
  const toml::array* entries = root["price"].as_array();
  if (entries == nullptr || entries->empty()) {
    return Status::InvalidArgument("price table has no [[price]] entries");
  }
  std::vector<ApiPrice> prices;
  for (size_t i = 0; i < entries->size(); ++i) {
    const toml::table* t = entries->get(i)->as_table();
    const std::string where = "price table entry " + std::to_string(i + 1);
    if (t == nullptr) return Status::InvalidArgument(where + " is not a table");
    for (const auto& [key, value] : *t) {
      static constexpr std::string_view kKnown[] = {"provider", "model", "input_usd_per_m",
                                                    "cached_input_usd_per_m", "as_of", "url"};
      if (std::find(std::begin(kKnown), std::end(kKnown), key.str()) == std::end(kKnown)) {
        return Status::InvalidArgument(where + ": unknown field '" + std::string(key.str()) + "'");
      }
    }
    ApiPrice p;
    std::optional<std::string> provider = (*t)["provider"].value<std::string>();
    std::optional<std::string> model = (*t)["model"].value<std::string>();
    std::optional<double> input = (*t)["input_usd_per_m"].value<double>();
    std::optional<double> cached = (*t)["cached_input_usd_per_m"].value<double>();
    if (!provider || !model || !input || !cached) {
      return Status::InvalidArgument(where + " needs provider, model, input_usd_per_m and "
                                     "cached_input_usd_per_m");
    }
    if (!(*input >= 0) || !(*cached >= 0) || *cached > *input) {
      return Status::InvalidArgument(where + " (" + *model + "): prices must not be negative, "
                                     "and the cached price not above the input price");
    }
    p.provider = *provider;
    p.model = *model;
    p.input_usd_per_million = *input;
    p.cached_input_usd_per_million = *cached;
    p.as_of = (*t)["as_of"].value_or(std::string());
    p.url = (*t)["url"].value_or(std::string());
    prices.push_back(std::move(p));
  }
  return prices;
}

}  // namespace kvtier::planning
