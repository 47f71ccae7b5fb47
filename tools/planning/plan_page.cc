#include "tools/planning/plan_page.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "tools/planning/cost.h"

namespace kvtier::planning {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kDataMarker = "/*KVTIER_PLAN_DATA*/";

// Six significant digits: the page shows four, and the grid stays a couple of MB.
double Round(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", x);
  return std::strtod(buf, nullptr);
}

Result<Json> Entry(const PrefillModel& m, double usd_per_gpu_hour) {
  Json e;
  const std::optional<uint64_t> crossover = m.CrossoverTokens();
  e["crossover"] = crossover ? Json(*crossover) : Json();
  Json recompute = Json::array(), reload = Json::array(), speedup = Json::array();
  Json usd = Json::array(), ttft = Json::array();
  for (uint64_t tokens : kPlanTokens) {
    const double t = static_cast<double>(tokens);
    recompute.push_back(Round(m.RecomputeSeconds(t)));
    reload.push_back(Round(m.ReloadSeconds(t)));
    speedup.push_back(Round(m.Speedup(t)));
    Result<std::vector<CostPoint>> curve = CostCurve(m, usd_per_gpu_hour, tokens, kPlanHitSteps);
    if (!curve.ok()) return curve.status();
    Json u = Json::array(), f = Json::array();
    for (const CostPoint& p : *curve) {
      u.push_back(Round(p.usd_per_million_prompt_tokens));
      f.push_back(Round(p.ttft_seconds));
    }
    usd.push_back(std::move(u));
    ttft.push_back(std::move(f));
  }
  e["recompute"] = std::move(recompute);
  e["reload"] = std::move(reload);
  e["speedup"] = std::move(speedup);
  e["usd"] = std::move(usd);
  e["ttft"] = std::move(ttft);
  return e;
}

}  // namespace

Result<std::string> PlanGridJson(const PlanPageOptions& o) {
  if (!(o.usd_per_gpu_hour >= 0)) {
    return Status::InvalidArgument("price per GPU-hour must not be negative");
  }
  Json j;
  j["settings"] = {{"tp", o.prefill.tensor_parallel},
                   {"kv_dtype", KvPrecisionName(o.prefill.kv_precision)},
                   {"mfu", o.prefill.mfu},
                   {"attention_mfu", o.prefill.attention_mfu},
                   {"fp8_compute", o.prefill.fp8_compute},
                   {"gpu_hour_usd", o.usd_per_gpu_hour},
                   {"command", o.command}};
  j["tokens"] = kPlanTokens;
  Json hits = Json::array();
  for (int i = 0; i <= kPlanHitSteps; ++i) hits.push_back(static_cast<double>(i) / kPlanHitSteps);
  j["hit_rates"] = std::move(hits);
  Json models = Json::array(), gpus = Json::array(), links = Json::array();
  for (const ModelSpec& m : BuiltinModels()) models.push_back(m.name);
  for (const GpuSpec& g : BuiltinGpus()) gpus.push_back(g.name);
  for (const LinkSpec& l : BuiltinLinks()) links.push_back(l.name);
  j["models"] = std::move(models);
  j["gpus"] = std::move(gpus);
  j["links"] = std::move(links);
  // grid[model][gpu][link]: null where the GPU cannot run the options.
  Json grid = Json::array();
  int usable = 0;
  Status last_refusal;  // Why the last combination that cannot run was refused.
  for (const ModelSpec& model : BuiltinModels()) {
    Json by_gpu = Json::array();
    for (const GpuSpec& gpu : BuiltinGpus()) {
      Json by_link = Json::array();
      for (const LinkSpec& link : BuiltinLinks()) {
        Result<PrefillModel> m = PrefillModel::Create(model, gpu, link, o.prefill);
        if (!m.ok()) {
          last_refusal = m.status();
          by_link.push_back(nullptr);
          continue;
        }
        Result<Json> e = Entry(*m, o.usd_per_gpu_hour);
        if (!e.ok()) return e.status();
        by_link.push_back(std::move(*e));
        ++usable;
      }
      by_gpu.push_back(std::move(by_link));
    }
    grid.push_back(std::move(by_gpu));
  }
  if (usable == 0) return last_refusal;
  j["grid"] = std::move(grid);
  return j.dump();
}

Result<std::string> PlanPageHtml(const PlanPageOptions& o) {
  Result<std::string> data = PlanGridJson(o);
  if (!data.ok()) return data.status();
  std::string page(PlanPageTemplate());
  const size_t at = page.find(kDataMarker);
  if (at == std::string::npos) return Status::Internal("plan page template has no data marker");
  // '<' as a JSON escape, so that no string in the grid ("</script>") ends the script early.
  std::string safe;
  safe.reserve(data->size());
  for (size_t i = 0; i < data->size(); ++i) {
    if ((*data)[i] == '<') {
      safe += "\\u003c";
    } else {
      safe += (*data)[i];
    }
  }
  page.replace(at, kDataMarker.size(), safe);
  return page;
}

}  // namespace kvtier::planning
