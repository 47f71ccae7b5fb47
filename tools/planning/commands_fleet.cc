#include "tools/planning/commands_fleet.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tools/planning/chart.h"
#include "tools/planning/cli_util.h"
#include "tools/planning/fleet_replay.h"
#include "tools/planning/units.h"

namespace kvtier::planning::cli {
namespace {

constexpr HitSource kSources[kNumHitSources] = {HitSource::kOwnG2, HitSource::kOwnG3,
                                                 HitSource::kG4Own, HitSource::kG4Other};
// Most points a G4 traffic chart draws per series; windows are merged (their maximum) above.
constexpr size_t kMaxChartPoints = 600;

std::string Rate(double bytes_per_second) { return FormatBytes(bytes_per_second) + "/s"; }

std::string FleetText(const FleetReport& r, const FleetOptions& o, double wall_seconds) {
  const PrefillModel& g2 = *o.node.reload_by_tier[0];
  const LinkSpec& g4_link =
      (o.node.reload_by_tier[2] ? *o.node.reload_by_tier[2] : g2).link();
  const auto bytes = [](uint64_t n) { return FormatBytes(static_cast<double>(n)); };
  std::string g4 = "off";
  if (r.g4) {
    g4 = o.g4_capacity_bytes > 0 ? bytes(o.g4_capacity_bytes) : "unbounded";
    g4 += o.node.g4_write_policy == SharedTierOptions::WritePolicy::kOnPut
              ? ", written on put"
              : ", written on demotion";
  }
  std::string out = Format(
      "fleet: %u nodes, router %s; per node G2 %s, G3 %s; G4 %s\n", r.nodes,
      r.one_cache ? "least-loaded over one cache" : std::string(RouterName(r.router)).c_str(),
      bytes(o.node.g2_capacity_bytes).c_str(),
      o.node.g3_capacity_bytes > 0 ? bytes(o.node.g3_capacity_bytes).c_str() : "off", g4.c_str());
  out += Format("prefill on %u x %s per node (MFU %.2f), %s KV of %s, %u-token blocks\n\n",
                g2.options().tensor_parallel, g2.gpu().name.c_str(), g2.options().mfu,
                std::string(KvPrecisionName(g2.options().kv_precision)).c_str(),
                g2.model().name.c_str(), r.block_tokens);
  out += Format("%-12s %12s %9s\n", "hits from", "blocks", "of refs");
  for (HitSource s : kSources) {
    out += Format("%-12s %12llu %8.2f%%\n", std::string(HitSourceName(s)).c_str(),
                  static_cast<unsigned long long>(r.hit_blocks[static_cast<int>(s)]),
                  100 * r.source_hit_rate(s));
  }
  out += Format("%-12s %12llu %8.2f%%   tokens %.2f%%, FLOPs %.2f%%\n\n", "all",
                static_cast<unsigned long long>(r.total_hit_blocks()), 100 * r.block_hit_rate(),
                100 * r.token_hit_rate(), 100 * r.flop_hit_rate);
  uint64_t fewest = UINT64_MAX;
  uint64_t most = 0;
  for (const FleetNodeStats& n : r.per_node) {
    fewest = std::min(fewest, n.requests);
    most = std::max(most, n.requests);
  }
  out += Format("nodes: %llu to %llu requests each; busy time max/mean %.3f; busiest node %.1f%% "
                "busy%s\n",
                static_cast<unsigned long long>(fewest), static_cast<unsigned long long>(most),
                r.imbalance(), 100 * r.peak_utilization(),
                r.peak_utilization() > 1 ? " (overloaded: its queue grows through the trace)" : "");
  if (r.idle_nodes > 0) {
    out += Format("degraded: %u of %u nodes got no request (the trace cannot fill them)\n",
                  r.idle_nodes, r.nodes);
  }
  out += Format("TTFT (prefill part): mean %s, p50 %s, p90 %s, p99 %s, max %s\n",
                FormatSeconds(r.ttft_seconds.mean).c_str(),
                FormatSeconds(r.ttft_seconds.p50).c_str(),
                FormatSeconds(r.ttft_seconds.p90).c_str(),
                FormatSeconds(r.ttft_seconds.p99).c_str(),
                FormatSeconds(r.ttft_seconds.max).c_str());
  if (r.g4) {
    const double link = g4_link.gigabytes_per_second * 1e9;
    const auto line = [&](const char* what, const Percentiles& p, uint64_t total) {
      return Format("G4 %s (fleet, per %g s): p50 %s, p99 %s, max %s; p99 = %.2fx a %s link "
                    "(%g GB/s); %s in all\n",
                    what, r.g4_window_seconds, Rate(p.p50).c_str(), Rate(p.p99).c_str(),
                    Rate(p.max).c_str(), p.p99 / link, g4_link.name.c_str(),
                    g4_link.gigabytes_per_second, FormatBytes(static_cast<double>(total)).c_str());
    };
    out += line("reads", r.g4_read_bytes_per_second, r.g4_bytes_read);
    out += line("writes", r.g4_write_bytes_per_second, r.g4_bytes_written);
    if (r.g4_evictions > 0) {
      out += Format("G4 capacity dropped %llu objects\n",
                    static_cast<unsigned long long>(r.g4_evictions));
    }
  }
  out += Format("prefill: %s without cache, %s with; saved %.2f GPU-hours\n",
                FormatSeconds(r.prefill_seconds_without_cache).c_str(),
                FormatSeconds(r.prefill_seconds_with_cache).c_str(), r.gpu_hours_saved());
  if (!r.first_put_error.empty()) {
    out += Format("failed puts: %llu, first: %s\n", static_cast<unsigned long long>(r.puts_failed),
                  r.first_put_error.c_str());
  }
  out += Format("fleet replay wall time: %.2f s\n", wall_seconds);
  return out;
}

std::string CompareText(const FleetComparison& c) {
  std::string out = Format("\n%-22s %9s %9s %9s %9s %9s %9s %10s %10s %12s %9s\n", "fleet",
                           "blocks", "own G2+G3", "G4", "tokens", "FLOPs", "max/mean",
                           "TTFT p50", "TTFT p99", "G4 read p99", "GPU-h");
  for (const FleetReport& r : c.runs) {
    out += Format("%-22s %8.2f%% %8.2f%% %8.2f%% %8.2f%% %8.2f%% %9.3f %10s %10s %12s %9.1f\n",
                  r.label.c_str(), 100 * r.block_hit_rate(), 100 * r.local_hit_rate(),
                  100 * (r.source_hit_rate(HitSource::kG4Own) +
                         r.source_hit_rate(HitSource::kG4Other)),
                  100 * r.token_hit_rate(), 100 * r.flop_hit_rate, r.imbalance(),
                  FormatSeconds(r.ttft_seconds.p50).c_str(),
                  FormatSeconds(r.ttft_seconds.p99).c_str(),
                  r.g4 ? Rate(r.g4_read_bytes_per_second.p99).c_str() : "-", r.gpu_hours_saved());
  }
  out += Format("%-22s %8.2f%% %9s %9s %8.2f%%\n", "infinite cache",
                100 * c.infinite_block_hit_rate, "", "", 100 * c.infinite_token_hit_rate);
  return out;
}

nlohmann::ordered_json PercentilesJson(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}};
}

nlohmann::ordered_json ReportJson(const FleetReport& r) {
  nlohmann::ordered_json j;
  j["label"] = r.label;
  j["router"] = r.one_cache ? "one-cache" : RouterName(r.router);
  j["nodes"] = r.nodes;
  j["g4"] = r.g4;
  j["requests"] = r.requests;
  j["block_references"] = r.block_references;
  j["block_bytes"] = r.block_bytes;
  j["prompt_tokens"] = r.prompt_tokens;
  j["block_hit_rate"] = r.block_hit_rate();
  j["token_hit_rate"] = r.token_hit_rate();
  j["flop_hit_rate"] = r.flop_hit_rate;
  j["local_hit_rate"] = r.local_hit_rate();
  for (HitSource s : kSources) {
    j["hit_blocks"][std::string(HitSourceName(s))] = r.hit_blocks[static_cast<int>(s)];
  }
  j["imbalance"] = r.imbalance();
  j["peak_utilization"] = r.peak_utilization();
  j["idle_nodes"] = r.idle_nodes;
  for (const FleetNodeStats& n : r.per_node) {
    j["per_node"].push_back({{"requests", n.requests},
                             {"block_references", n.block_references},
                             {"hit_blocks", n.hit_blocks},
                             {"busy_seconds", n.busy_seconds}});
  }
  j["ttft_seconds"] = PercentilesJson(r.ttft_seconds);
  if (r.g4) {
    j["g4"] = {{"window_seconds", r.g4_window_seconds},
               {"read_bytes_per_second", PercentilesJson(r.g4_read_bytes_per_second)},
               {"write_bytes_per_second", PercentilesJson(r.g4_write_bytes_per_second)},
               {"bytes_read", r.g4_bytes_read},
               {"bytes_written", r.g4_bytes_written},
               {"evictions", r.g4_evictions}};
  }
  j["prefill_seconds_without_cache"] = r.prefill_seconds_without_cache;
  j["prefill_seconds_with_cache"] = r.prefill_seconds_with_cache;
  j["gpu_hours_saved"] = r.gpu_hours_saved();
  j["puts_failed"] = r.puts_failed;
  return j;
}

// G4 reads and writes of the whole fleet over trace time.
std::string TrafficSvg(const FleetReport& r, const std::string& title) {
  const size_t windows = r.g4_read_series.size();
  const size_t merge = std::max<size_t>(1, (windows + kMaxChartPoints - 1) / kMaxChartPoints);
  ChartSeries read{"G4 reads", {}, false};
  ChartSeries write{"G4 writes", {}, true};
  for (size_t i = 0; i < windows; i += merge) {
    double most_read = 0;
    double most_written = 0;
    for (size_t k = i; k < std::min(windows, i + merge); ++k) {
      most_read = std::max(most_read, r.g4_read_series[k]);
      most_written = std::max(most_written, r.g4_write_series[k]);
    }
    const double minutes = static_cast<double>(i) * r.g4_window_seconds / 60;
    read.points.push_back({minutes, most_read / 1e9});
    write.points.push_back({minutes, most_written / 1e9});
  }
  ChartOptions o;
  o.title = title;
  o.x_label = "trace time (minutes)";
  o.y_label = Format("GB/s (largest %gs window)", r.g4_window_seconds * static_cast<double>(merge));
  return RenderLineChart(o, {read, write});
}

}  // namespace

void RegisterFleetFlags(CLI::App* cmd, FleetFlags* flags) {
  cmd->add_option("--nodes", flags->nodes,
                  "Replay on N nodes (their own G2 and G3 of --capacity and --g3-capacity, one "
                  "shared G4) with a router")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--router", flags->router,
                  "With --nodes: round-robin, least-loaded, session or kv-aware")
      ->capture_default_str();
  cmd->add_option("--g4-capacity", flags->g4_capacity,
                  "With --nodes: G4's capacity for the whole fleet (default unbounded)");
  cmd->add_option("--load-cap", flags->load_cap,
                  "kv-aware router: skip nodes busier than this times the fleet's mean (>= 1)");
  cmd->add_option("--load-half-life", flags->load_half_life_seconds,
                  "kv-aware router: half-life of the busy time the load cap reads, seconds");
  cmd->add_option("--window", flags->window_seconds,
                  "With --nodes: G4 bandwidth is measured per window of this many seconds")
      ->capture_default_str();
}

int RunFleetReplay(const FleetFlags& flags, const Trace& trace, const ReplayOptions& node,
                   const ReplayOutput& output) {
  if (!output.svg.empty() && !node.g4) {
    return Fail("replay", Status::InvalidArgument(
                              "with --nodes, --svg draws G4's traffic over time: add --g4"));
  }
  FleetOptions o;
  o.node = node;
  o.nodes = flags.nodes;
  Result<Router> router = ParseRouter(flags.router);
  if (!router.ok()) return Fail("replay", router.status());
  o.router = *router;
  if (!flags.g4_capacity.empty()) {
    Result<uint64_t> bytes = ParseBytes(flags.g4_capacity);
    if (!bytes.ok()) return Fail("replay", bytes.status());
    o.g4_capacity_bytes = *bytes;
  }
  if (flags.load_cap != 0) o.load_cap = flags.load_cap;
  if (flags.load_half_life_seconds != 0) o.load_half_life_seconds = flags.load_half_life_seconds;
  o.bandwidth_window_seconds = flags.window_seconds;
  const auto start = std::chrono::steady_clock::now();
  Result<FleetReport> report = FleetReplay(trace, o);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!report.ok()) return Fail("replay", report.status());
  std::optional<FleetComparison> compared;
  if (output.compare) {
    Result<FleetComparison> c = CompareFleet(trace, o);
    if (!c.ok()) return Fail("replay", c.status());
    compared = std::move(*c);
  }
  const std::string text = FleetText(*report, o, wall) + (compared ? CompareText(*compared) : "");
  if (output.json) {
    nlohmann::ordered_json j = ReportJson(*report);
    j["skipped_lines"] = trace.skipped_lines;
    if (compared) {
      for (const FleetReport& r : compared->runs) j["compare"].push_back(ReportJson(r));
      j["infinite_block_hit_rate"] = compared->infinite_block_hit_rate;
      j["infinite_token_hit_rate"] = compared->infinite_token_hit_rate;
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::fputs(text.c_str(), stdout);
  }
  const std::string title = Format("G4 traffic, %u nodes, %s: %s", report->nodes,
                                   report->label.c_str(), output.trace_path.c_str());
  if (!output.svg.empty() && report->g4) {
    if (Status s = WriteFile(output.svg, TrafficSvg(*report, title)); !s.ok()) {
      return Fail("replay", s);
    }
  }
  if (!output.html.empty()) {
    const std::string body = "<pre>" + HtmlEscape(text) + "</pre>\n" +
                             (report->g4 ? TrafficSvg(*report, title) : std::string());
    if (Status s = WriteFile(output.html, HtmlPage("kvtier fleet replay", body)); !s.ok()) {
      return Fail("replay", s);
    }
  }
  return 0;
}

}  // namespace kvtier::planning::cli
