// The interactive planner page (`kvtier plan --html`, kvtierd's /plan): selects for model, GPU
// and link, sliders for prompt length and hit rate, and recompute-vs-reload and
// $/M-vs-hit-rate charts that follow them.
//
// Every number the page shows comes from this file's grid, computed with PrefillModel and
// CostAtHitRate (the arithmetic of `kvtier crossover` and `kvtier cost`) for every catalog
// model x GPU x link, at the prompt lengths in kPlanTokens and the hit rates 0, 0.1, ..., 1;
// the page's script only looks values up and draws them. The grid is embedded in the page,
// so it works offline and from a file.

#ifndef KVTIER_TOOLS_PLANNING_PLAN_PAGE_H_
#define KVTIER_TOOLS_PLANNING_PLAN_PAGE_H_

#include <array>
#include <cstdint>
#include <string>

#include "kvtier/status.h"
#include "tools/planning/crossover.h"

namespace kvtier::planning {

inline constexpr std::array<uint64_t, 11> kPlanTokens = {
    1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576};
inline constexpr int kPlanHitSteps = 10;

struct PlanPageOptions {
  // Applied to every model x GPU x link; a GPU that cannot run them (FP8 compute on an A100)
  // has no entries.
  PrefillOptions prefill;
  double usd_per_gpu_hour = 2.5;
  std::string command;  // Shown on the page: how it was made.
};

// The grid alone, as JSON (what the page embeds).
Result<std::string> PlanGridJson(const PlanPageOptions& options);
// The self-contained page.
Result<std::string> PlanPageHtml(const PlanPageOptions& options);
// The page's template (tools/planning/plan_page.html, compiled in).
std::string_view PlanPageTemplate();

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_PLAN_PAGE_H_
