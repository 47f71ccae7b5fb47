// `kvtier trace gen` and `kvtier replay`.

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/planning/chart.h"
#include "tools/planning/cli_util.h"
#include "tools/planning/commands_fleet.h"
#include "tools/planning/replay.h"
#include "tools/planning/trace_gen.h"
#include "tools/planning/units.h"

namespace kvtier::planning::cli {
namespace {

struct GenFlags {
  std::string workload = "agentic";
  uint64_t sessions = 400;
  uint64_t seed = 1;
  uint64_t max_requests = 0;
  uint32_t block_tokens = 512;
  uint32_t tenants = 1;
  double sessions_per_second = 0.5;
  std::string format = "kvtier";
  std::string out;
};

void AddTraceCommand(CLI::App& app, int* exit_code) {
  CLI::App* trace = app.add_subcommand("trace", "Prefix-hash traces");
  trace->require_subcommand(1);
  auto f = std::make_shared<GenFlags>();
  CLI::App* gen = trace->add_subcommand("gen", "Generate a synthetic chat, agentic or coding-agent trace");
  gen->add_option("--workload", f->workload, "chat, agentic or coding-agent")->capture_default_str();
  gen->add_option("--sessions", f->sessions, "Top-level sessions")->capture_default_str();
  gen->add_option("--seed", f->seed, "Random seed; the same seed gives the same trace")->capture_default_str();
  gen->add_option("--max-requests", f->max_requests, "Keep the first N requests (0 = all)");
  gen->add_option("--block-tokens", f->block_tokens, "Tokens per block")->capture_default_str();
  gen->add_option("--tenants", f->tenants, "Tenants to spread sessions over")->capture_default_str();
  gen->add_option("--rate", f->sessions_per_second, "New sessions per second")->capture_default_str();
  gen->add_option("--format", f->format, "kvtier or mooncake")->capture_default_str();
  gen->add_option("--out", f->out, "Output file (default stdout)");
  gen->callback([f, exit_code] {
    Result<Workload> workload = ParseWorkload(f->workload);
    if (!workload.ok()) {
      *exit_code = Fail("trace gen", workload.status());
      return;
    }
    if (f->format != "kvtier" && f->format != "mooncake") {
      *exit_code = Fail("trace gen", Status::InvalidArgument("--format must be kvtier or mooncake"));
      return;
    }
    TraceGenOptions o = DefaultsFor(*workload);
    o.sessions = f->sessions;
    o.seed = f->seed;
    o.max_requests = f->max_requests;
    o.block_tokens = f->block_tokens;
    o.tenants = f->tenants;
    o.sessions_per_second = f->sessions_per_second;
    Result<Trace> trace = GenerateTrace(o);
    if (!trace.ok()) {
      *exit_code = Fail("trace gen", trace.status());
      return;
    }
    const TraceFormat format = f->format == "kvtier" ? TraceFormat::kKvtier : TraceFormat::kMooncake;
    if (f->out.empty()) {
      WriteTrace(*trace, format, std::cout);
    } else {
      std::ofstream out(f->out, std::ios::trunc);
      WriteTrace(*trace, format, out);
      out.close();
      if (!out) {
        *exit_code = Fail("trace gen", Status::Unavailable("cannot write '" + f->out + "'"));
        return;
      }
      std::fprintf(stderr, "wrote %zu requests, %llu block references to %s\n", trace->requests.size(),
                   static_cast<unsigned long long>(trace->TotalBlockReferences()), f->out.c_str());
    }
    *exit_code = 0;
  });
}

struct ReplayFlags {
  std::string trace_path;
  PrefillFlags prefill;
  std::string capacity = "64GiB";
  std::string g3_capacity;
  std::string g4;
  uint32_t g3_min_accesses = AdmissionOptions{}.min_accesses;
  double initial_reused_share = MemoryTierOptions{}.initial_reused_share;
  double max_reused_share = MemoryTierOptions{}.max_reused_share;
  bool compare = false;
  bool hints = false;
  std::string g3_link = "nvme-gen5";
  std::string g4_link = "400gbe";
  uint64_t ttl_seconds = 0;
  uint32_t snapshot_every = 0;
  uint32_t block_tokens = 512;
  bool strict = false;
  bool curve = false;
  std::vector<std::string> capacities;
  bool json = false;
  std::string svg;
  std::string html;
  FleetFlags fleet;
};

constexpr const char* kTierLabels[kNumTiers] = {"G2", "G3", "G4"};

std::string ReplayText(const Trace& trace, const ReplayReport& r, const PrefillModel& model,
                       double wall_seconds) {
  std::string out = Format(
      "trace: %llu requests, %llu block references (%llu distinct, %s), %llu prompt tokens, "
      "%u-token blocks, %zu tenant(s)\n",
      static_cast<unsigned long long>(r.requests), static_cast<unsigned long long>(r.block_references),
      static_cast<unsigned long long>(r.unique_blocks), FormatBytes(static_cast<double>(r.unique_block_bytes)).c_str(),
      static_cast<unsigned long long>(r.prompt_tokens), trace.block_tokens, trace.tenants.size());
  if (trace.skipped_lines > 0) {
    out += Format("skipped %llu malformed line(s), first: %s\n",
                  static_cast<unsigned long long>(trace.skipped_lines), trace.problems[0].c_str());
  }
  out += Format("store: G2 %s, G3 %s, G4 %s; payload-free simulation of the kvtier Store, KV %s of %s\n\n",
                FormatBytes(static_cast<double>(r.capacity_bytes)).c_str(),
                r.g3_capacity_bytes > 0 ? FormatBytes(static_cast<double>(r.g3_capacity_bytes)).c_str() : "off",
                r.g4 ? "unbounded" : "off",
                std::string(KvPrecisionName(model.options().kv_precision)).c_str(), model.model().name.c_str());
  out += Format("%-5s %12s %9s %14s %9s %12s %12s %12s\n", "tier", "hit blocks", "blocks", "hit tokens",
                "tokens", "read", "written", "never read");
  for (int i = 0; i < kNumTiers; ++i) {
    const TierReplayStats& t = r.tiers[i];
    const bool simulated = i == 0 || (i == 1 && r.g3_capacity_bytes > 0) || (i == 2 && r.g4);
    if (!simulated) {
      out += Format("%-5s %12s\n", kTierLabels[i], "off");
      continue;
    }
    out += Format("%-5s %12llu %8.1f%% %14llu %8.1f%% %12s %12s %11.1f%%\n", kTierLabels[i],
                  static_cast<unsigned long long>(t.hit_blocks),
                  100.0 * static_cast<double>(t.hit_blocks) / std::max<uint64_t>(r.block_references, 1),
                  static_cast<unsigned long long>(t.hit_tokens),
                  100.0 * static_cast<double>(t.hit_tokens) / std::max<uint64_t>(r.prompt_tokens, 1),
                  FormatBytes(static_cast<double>(t.bytes_read)).c_str(),
                  FormatBytes(static_cast<double>(t.bytes_written)).c_str(),
                  100.0 * static_cast<double>(t.blocks_never_read) / std::max<uint64_t>(t.blocks_written, 1));
  }
  out += Format("%-5s %12llu %8.1f%% %14llu %8.1f%%\n\n", "all",
                static_cast<unsigned long long>(r.hit_blocks()), 100 * r.block_hit_rate(),
                static_cast<unsigned long long>(r.hit_tokens()), 100 * r.token_hit_rate());
  const uint64_t evicted = r.evictions_admitted + r.evictions_declined;
  out += Format("G3 admission: %llu of %llu G2 evictions admitted; %s not written to SSD (%.1f%%)\n",
                static_cast<unsigned long long>(r.evictions_admitted), static_cast<unsigned long long>(evicted),
                FormatBytes(static_cast<double>(r.admission_saved_bytes())).c_str(),
                100.0 * static_cast<double>(r.evictions_declined) / std::max<uint64_t>(evicted, 1));
  if (r.g3_capacity_bytes > 0 && r.duration_seconds > 0) {
    const double per_day = static_cast<double>(r.tiers[1].bytes_written) / r.duration_seconds * 86400;
    out += Format("G3 writes: %s/day, %.2f drive writes per day of its %s\n", FormatBytes(per_day).c_str(),
                  per_day / static_cast<double>(r.g3_capacity_bytes),
                  FormatBytes(static_cast<double>(r.g3_capacity_bytes)).c_str());
  }
  out += Format("writes saved by admission: %llu of %llu puts declined%s\n",
                static_cast<unsigned long long>(r.writes_declined()),
                static_cast<unsigned long long>(r.puts_accepted),
                r.writes_declined() == 0 ? " (n/a: this Store admits every block)" : "");
  if (r.state_bytes > 0) {
    out += Format("hybrid model: a resume needs a %s state snapshot; %llu stored (%s); %llu KV "
                  "blocks found past a request's last snapshot (of no use to it)\n",
                  FormatBytes(static_cast<double>(r.state_bytes)).c_str(),
                  static_cast<unsigned long long>(r.snapshots_written),
                  FormatBytes(static_cast<double>(r.snapshots_written * r.state_bytes)).c_str(),
                  static_cast<unsigned long long>(r.unresumable_kv_blocks));
  }
  out += Format("evictions: %llu, expirations: %llu, failed puts: %llu; LRU trials: %llu\n",
                static_cast<unsigned long long>(r.evictions), static_cast<unsigned long long>(r.expirations),
                static_cast<unsigned long long>(r.puts_failed),
                static_cast<unsigned long long>(r.lru_trials));
  if (!r.first_put_error.empty()) out += "first failed put: " + r.first_put_error + "\n";
  if (r.hints_sent + r.hints_refused > 0) {
    out += Format("session hints: %llu taken, %llu refused (no block of the session left in G2)\n",
                  static_cast<unsigned long long>(r.hints_sent),
                  static_cast<unsigned long long>(r.hints_refused));
  }
  if (r.has_prefill_model) {
    out += Format("prefill on %u x %s (MFU %.2f): %s without cache, %s with; saved %s = %.2f GPU-hours\n",
                  model.options().tensor_parallel, model.gpu().name.c_str(), model.options().mfu,
                  FormatSeconds(r.prefill_seconds_without_cache).c_str(),
                  FormatSeconds(r.prefill_seconds_with_cache).c_str(),
                  FormatSeconds(r.prefill_seconds_saved()).c_str(), r.gpu_hours_saved());
  }
  out += Format("replay wall time: %.2f s\n", wall_seconds);
  return out;
}

// One table per measure, a row per capacity, a column per policy.
std::string CompareText(const std::vector<ComparePoint>& points) {
  if (points.empty()) return "";
  struct Measure {
    const char* title;
    double PolicyResult::*value;
    bool percent;
  };
  const Measure measures[] = {{"block hit ratio", &PolicyResult::block_hit_rate, true},
                              {"token hit ratio", &PolicyResult::token_hit_rate, true},
                              {"FLOP-weighted hit ratio", &PolicyResult::flop_hit_rate, true},
                              {"GPU-hours saved", &PolicyResult::gpu_hours_saved, false}};
  std::string out;
  for (const Measure& m : measures) {
    out += Format("\n%s, by G2 capacity:\n%-22s", m.title, "capacity");
    for (const PolicyResult& p : points[0].policies) out += Format(" %10s", p.policy.c_str());
    out += "\n";
    for (const ComparePoint& point : points) {
      out += Format("%-22s", Format("%s (%llu blocks)", FormatBytes(static_cast<double>(point.capacity_bytes)).c_str(),
                                    static_cast<unsigned long long>(point.capacity_blocks))
                                 .c_str());
      for (const PolicyResult& p : point.policies) {
        const double v = p.*m.value;
        out += m.percent ? Format(" %9.2f%%", 100 * v) : Format(" %10.1f", v);
      }
      out += "\n";
    }
  }
  return out;
}

std::string CurveSvg(const std::vector<CapacityPoint>& curve, const std::string& title) {
  ChartSeries blocks{"block hit rate", {}, false};
  ChartSeries tokens{"token hit rate", {}, true};
  for (const CapacityPoint& p : curve) {
    const double gib = static_cast<double>(p.capacity_bytes) / static_cast<double>(kGiB);
    blocks.points.push_back({gib, p.block_hit_rate});
    tokens.points.push_back({gib, p.token_hit_rate});
  }
  ChartOptions o;
  o.title = title;
  o.x_label = "G2 capacity (GiB)";
  o.y_label = "hit rate";
  o.log_x = true;
  return RenderLineChart(o, {blocks, tokens});
}

void RunReplay(const ReplayFlags& f, int* exit_code) {
  TraceReadOptions ro;
  ro.strict = f.strict;
  ro.default_block_tokens = f.block_tokens;
  Result<Trace> trace = ReadTraceFile(f.trace_path, ro);
  if (!trace.ok()) {
    *exit_code = Fail("replay", trace.status());
    return;
  }
  for (const std::string& problem : trace->problems) std::fprintf(stderr, "kvtier replay: skipped %s\n", problem.c_str());
  Result<uint64_t> capacity = ParseBytes(f.capacity);
  if (!capacity.ok()) {
    *exit_code = Fail("replay", capacity.status());
    return;
  }
  ReplayOptions o;
  const std::string links[kNumTiers] = {f.prefill.link, f.g3_link, f.g4_link};
  for (int i = 0; i < kNumTiers; ++i) {
    Result<PrefillModel> m = f.prefill.Build(links[i]);
    if (!m.ok()) {
      *exit_code = Fail("replay", m.status());
      return;
    }
    o.reload_by_tier[i] = *m;
  }
  const PrefillModel& g2 = *o.reload_by_tier[0];
  o.model = g2.model();
  o.kv_precision = g2.options().kv_precision;
  o.g2_capacity_bytes = *capacity;
  o.ttl_seconds = f.ttl_seconds;
  o.state_bytes = StateBytesPerSnapshot(o.model);
  o.snapshot_every = f.snapshot_every;
  o.apply_hints = f.hints;
  if (!f.g3_capacity.empty()) {
    Result<uint64_t> g3 = ParseBytes(f.g3_capacity);
    if (!g3.ok()) {
      *exit_code = Fail("replay", g3.status());
      return;
    }
    o.g3_capacity_bytes = *g3;
  }
  o.initial_reused_share = f.initial_reused_share;
  o.max_reused_share = f.max_reused_share;
  o.g3_admission.min_accesses = f.g3_min_accesses;
  o.g3_admission.frequency_gate = f.g3_min_accesses > 1;
  if (!f.g4.empty()) {
    if (f.g4 != "on_put" && f.g4 != "on_demotion") {
      *exit_code = Fail("replay", Status::InvalidArgument("--g4 must be on_put or on_demotion"));
      return;
    }
    o.g4 = true;
    o.g4_write_policy = f.g4 == "on_put" ? SharedTierOptions::WritePolicy::kOnPut
                                         : SharedTierOptions::WritePolicy::kOnDemotion;
  }
  if (f.fleet.nodes > 0) {
    if (f.curve || !f.capacities.empty()) {
      *exit_code = Fail("replay", Status::InvalidArgument(
                                      "--curve and --capacities replay one node: not with --nodes"));
      return;
    }
    *exit_code = RunFleetReplay(f.fleet, *trace, o, {f.compare, f.json, f.svg, f.html, f.trace_path});
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  Result<ReplayReport> report = Replay(*trace, o);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!report.ok()) {
    *exit_code = Fail("replay", report.status());
    return;
  }
  std::vector<uint64_t> caps;
  for (const std::string& c : f.capacities) {
    Result<uint64_t> bytes = ParseBytes(c);
    if (!bytes.ok()) {
      *exit_code = Fail("replay", bytes.status());
      return;
    }
    caps.push_back(*bytes);
  }
  std::vector<ComparePoint> compared;
  if (f.compare) {
    Result<std::vector<ComparePoint>> points = ComparePolicies(*trace, o, caps);
    if (!points.ok()) {
      *exit_code = Fail("replay", points.status());
      return;
    }
    compared = std::move(*points);
  }
  std::vector<CapacityPoint> curve;
  const bool want_curve =
      !f.compare && (f.curve || !f.capacities.empty() || !f.svg.empty() || !f.html.empty());
  if (want_curve) {
    Result<std::vector<CapacityPoint>> points = CapacityCurve(*trace, o, caps);
    if (!points.ok()) {
      *exit_code = Fail("replay", points.status());
      return;
    }
    curve = *points;
  }
  const std::string title = "Hit rate vs G2 capacity: " + f.trace_path + " (" + o.model.name + ")";
  if (f.json) {
    nlohmann::ordered_json j;
    j["requests"] = report->requests;
    j["block_references"] = report->block_references;
    j["prompt_tokens"] = report->prompt_tokens;
    j["capacity_bytes"] = report->capacity_bytes;
    j["block_hit_rate"] = report->block_hit_rate();
    j["token_hit_rate"] = report->token_hit_rate();
    for (int i = 0; i < kNumTiers; ++i) {
      const TierReplayStats& t = report->tiers[i];
      j["tiers"][kTierLabels[i]] = {{"hit_blocks", t.hit_blocks}, {"hit_tokens", t.hit_tokens},
                                    {"bytes_read", t.bytes_read}, {"bytes_written", t.bytes_written},
                                    {"blocks_written", t.blocks_written},
                                    {"blocks_never_read", t.blocks_never_read}};
    }
    j["never_read_share"] = report->never_read_share();
    j["writes_declined"] = report->writes_declined();
    j["g3_admission"] = {{"admitted", report->evictions_admitted},
                         {"declined", report->evictions_declined},
                         {"bytes_not_written", report->admission_saved_bytes()}};
    j["evictions"] = report->evictions;
    j["lru_trials"] = report->lru_trials;
    j["hints_sent"] = report->hints_sent;
    j["hints_refused"] = report->hints_refused;
    if (report->state_bytes > 0) {
      j["state"] = {{"snapshot_bytes", report->state_bytes},
                    {"snapshots_written", report->snapshots_written},
                    {"unresumable_kv_blocks", report->unresumable_kv_blocks}};
    }
    j["prefill_seconds_saved"] = report->prefill_seconds_saved();
    j["gpu_hours_saved"] = report->gpu_hours_saved();
    j["skipped_lines"] = trace->skipped_lines;
    for (const CapacityPoint& p : curve) {
      j["curve"].push_back({{"capacity_bytes", p.capacity_bytes},
                            {"block_hit_rate", p.block_hit_rate},
                            {"token_hit_rate", p.token_hit_rate}});
    }
    for (const ComparePoint& p : compared) {
      nlohmann::ordered_json point = {{"capacity_bytes", p.capacity_bytes}, {"capacity_blocks", p.capacity_blocks}};
      for (const PolicyResult& pr : p.policies) {
        point["policies"][pr.policy] = {{"hit_blocks", pr.hit_blocks},
                                        {"block_hit_rate", pr.block_hit_rate},
                                        {"token_hit_rate", pr.token_hit_rate},
                                        {"flop_hit_rate", pr.flop_hit_rate},
                                        {"gpu_hours_saved", pr.gpu_hours_saved}};
      }
      j["compare"].push_back(point);
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::string text = ReplayText(*trace, *report, g2, wall) + CompareText(compared);
    if (!curve.empty()) {
      text += "\nhit rate vs G2 capacity:\n";
      for (const CapacityPoint& p : curve) {
        text += Format("  %12s  blocks %5.1f%%  tokens %5.1f%%\n",
                       FormatBytes(static_cast<double>(p.capacity_bytes)).c_str(),
                       100 * p.block_hit_rate, 100 * p.token_hit_rate);
      }
    }
    std::fputs(text.c_str(), stdout);
  }
  if (!f.svg.empty()) {
    if (Status s = WriteFile(f.svg, CurveSvg(curve, title)); !s.ok()) {
      *exit_code = Fail("replay", s);
      return;
    }
  }
  if (!f.html.empty()) {
    const std::string body = "<pre>" + HtmlEscape(ReplayText(*trace, *report, g2, wall)) + "</pre>\n" +
                             CurveSvg(curve, title);
    if (Status s = WriteFile(f.html, HtmlPage("kvtier replay", body)); !s.ok()) {
      *exit_code = Fail("replay", s);
      return;
    }
  }
  *exit_code = 0;
}

void AddReplayCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ReplayFlags>();
  CLI::App* cmd = app.add_subcommand("replay", "Replay a prefix-hash trace against the kvtier Store");
  cmd->add_option("trace", f->trace_path, "Mooncake or kvtier JSONL trace")->required();
  f->prefill.Register(cmd, false);
  cmd->add_option("--g2-link", f->prefill.link, "Link that serves G2 hits")->capture_default_str();
  cmd->add_option("--g3-link", f->g3_link, "Link that serves G3 hits")->capture_default_str();
  cmd->add_option("--g4-link", f->g4_link, "Link that serves G4 hits")->capture_default_str();
  cmd->add_option("--capacity", f->capacity, "G2 capacity, e.g. 64GiB")->capture_default_str();
  cmd->add_option("--g3-capacity", f->g3_capacity, "Simulate G3 (local SSD) of this size, e.g. 4TiB");
  cmd->add_option("--g3-min-accesses", f->g3_min_accesses,
                  "G3 admission: accesses a block needs before G2 evicts it (1 = admit all)")
      ->capture_default_str();
  cmd->add_option("--initial-reused-share", f->initial_reused_share,
                  "G2 eviction: starting share of the reused queue (MemoryTierOptions)")
      ->capture_default_str();
  cmd->add_option("--max-reused-share", f->max_reused_share,
                  "G2 eviction: largest share of the reused queue")
      ->capture_default_str();
  cmd->add_option("--g4", f->g4, "Simulate G4, written on_put or on_demotion");
  cmd->add_flag("--compare", f->compare,
                "At each --capacities (default 1/64 .. 1x of the footprint): kvtier beside LRU, ARC, "
                "OPT, OPT+bypass and an infinite cache (and kvtier with the trace's hints, if any)");
  RegisterFleetFlags(cmd, &f->fleet);
  cmd->add_flag("--hints", f->hints,
                "Send the trace's session hints (retain_s, finished) to the Store");
  cmd->add_option("--ttl", f->ttl_seconds, "Per-tenant TTL since last access, seconds (0 = none)");
  cmd->add_option("--snapshot-every", f->snapshot_every,
                  "Hybrid models: also keep a state snapshot every N blocks a request computes "
                  "(0 = at its last block only)");
  cmd->add_option("--block-tokens", f->block_tokens, "Block size of a trace without a kvtier header")
      ->capture_default_str();
  cmd->add_flag("--strict", f->strict, "Fail on the first malformed line instead of skipping it");
  cmd->add_flag("--curve", f->curve, "Also replay at 1/64 .. 1x of the trace's footprint");
  cmd->add_option("--capacities", f->capacities, "Capacities for the curve, e.g. 8GiB 32GiB")->delimiter(',');
  cmd->add_flag("--json", f->json, "Print JSON instead of text");
  cmd->add_option("--svg", f->svg, "Write the hit-rate-versus-capacity chart");
  cmd->add_option("--html", f->html, "Write a report page with the chart");
  cmd->callback([f, exit_code] { RunReplay(*f, exit_code); });
}

}  // namespace

void AddTraceAndReplayCommands(CLI::App& app, int* exit_code) {
  AddTraceCommand(app, exit_code);
  AddReplayCommand(app, exit_code);
}

}  // namespace kvtier::planning::cli
