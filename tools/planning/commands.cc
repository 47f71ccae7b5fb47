// The planning subcommands of the kvtier CLI: model, crossover, cost, size (trace and replay
// live in commands_replay.cc).

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "tools/kvtier/commands.h"
#include "tools/planning/chart.h"
#include "tools/planning/cli_util.h"
#include "tools/planning/cost.h"
#include "tools/planning/plan_page.h"
#include "tools/planning/sizing.h"
#include "tools/planning/units.h"

namespace kvtier::cli {
namespace {

using namespace kvtier::planning;  // NOLINT: this file is the planning library's CLI face.
using planning::cli::Fail;
using planning::cli::PrefillFlags;
using planning::cli::ReadFile;
using planning::cli::WriteFile;

std::string Billions(uint64_t n) { return Format("%.2fB", static_cast<double>(n) / 1e9); }

std::string AttentionSummary(const ModelSpec& m) {
  std::string s = m.attention == AttentionKind::kMla
                      ? Format("MLA latent %u + rope %u", m.kv_lora_rank, m.qk_rope_head_dim)
                      : Format("%u heads, %u KV heads x %u", m.num_heads, m.num_kv_heads, m.head_dim);
  if (m.sliding_window > 0) {
    s += Format(", %u/%u layers window %u", m.num_sliding_layers, m.num_layers, m.sliding_window);
  }
  if (m.num_linear_layers > 0) {
    s += Format(", %u/%u attention, %u linear", m.num_attention_layers(), m.num_layers,
                m.num_linear_layers);
  }
  if (m.sparse_topk > 0) s += Format(", sparse top-%u", m.sparse_topk);
  return s;
}

void AddModelCommand(CLI::App& app, int* exit_code) {
  CLI::App* model = app.add_subcommand("model", "Model catalog: KV bytes per token, parameters");
  model->require_subcommand(1);
  CLI::App* list = model->add_subcommand("list", "List the built-in models");
  list->callback([exit_code] {
    std::printf("%-18s %-6s %-64s %14s %10s %10s\n", "model", "layers", "attention",
                "KV/token bf16", "params", "active");
    for (const ModelSpec& m : BuiltinModels()) {
      const ParameterCounts p = CountParameters(m);
      std::printf("%-18s %-6u %-64s %14s %10s %10s\n", m.name.c_str(), m.num_layers,
                  AttentionSummary(m).c_str(),
                  FormatBytes(static_cast<double>(KvBytesPerToken(m, KvPrecision::kBf16))).c_str(),
                  Billions(p.total).c_str(), Billions(p.active).c_str());
    }
    *exit_code = 0;
  });
  auto name = std::make_shared<std::string>();
  CLI::App* show = model->add_subcommand("show", "Architecture and KV sizes of one model");
  show->add_option("name", *name, "Catalog name or path to a Hugging Face config.json")->required();
  show->callback([name, exit_code] {
    Result<ModelSpec> m = ResolveModel(*name);
    if (!m.ok()) {
      *exit_code = Fail("model show", m.status());
      return;
    }
    const ParameterCounts p = CountParameters(*m);
    std::printf("model        %s\nsource       %s\n", m->name.c_str(), m->source.c_str());
    std::printf("layers       %u (hidden %u, vocab %u)\n", m->num_layers, m->hidden_size, m->vocab_size);
    std::printf("attention    %s\n", AttentionSummary(*m).c_str());
    if (m->is_moe()) {
      std::printf("experts      %u routed (%u per token) + %u shared, %u wide; %u dense layers\n",
                  m->num_experts, m->experts_per_token, m->num_shared_experts,
                  m->moe_intermediate_size, m->num_dense_layers);
    }
    std::printf("parameters   %s total, %s active per token, %s in prefill matmuls\n",
                Billions(p.total).c_str(), Billions(p.active).c_str(), Billions(p.active_matmul).c_str());
    std::printf("\n%-6s %14s %14s %14s %14s %14s\n", "dtype", "KV/token", "1k tokens", "8k tokens",
                "32k tokens", "128k tokens");
    for (KvPrecision k : {KvPrecision::kBf16, KvPrecision::kFp8, KvPrecision::kFp4}) {
      std::printf("%-6s %14s", std::string(KvPrecisionName(k)).c_str(),
                  Format("%llu B", static_cast<unsigned long long>(KvBytesPerToken(*m, k))).c_str());
      for (uint64_t t : {1024, 8192, 32768, 131072}) {
        std::printf(" %14s", FormatBytes(static_cast<double>(KvBytesForTokens(*m, k, t))).c_str());
      }
      std::printf("\n");
    }
    if (m->sliding_window > 0) {
      std::printf("\nPast the %u-token window each token adds %llu B (bf16): only the %u "
                  "full-attention layers grow.\n",
                  m->sliding_window,
                  static_cast<unsigned long long>(KvBytesPerTokenBeyondWindow(*m, KvPrecision::kBf16)),
                  m->num_full_attention_layers());
    }
    if (m->num_linear_layers > 0) {
      std::printf("\n%u linear layers hold no KV; a resume needs their state at its boundary: "
                  "%s per snapshot (%s per layer), whatever the prompt's length.\n",
                  m->num_linear_layers,
                  FormatBytes(static_cast<double>(StateBytesPerSnapshot(*m))).c_str(),
                  FormatBytes(static_cast<double>(m->linear_state_bytes)).c_str());
    }
    if (m->sparse_topk > 0) {
      std::printf("\nSparse attention: each token also caches a %u-byte index key per layer; "
                  "queries attend to the top %u keys.\n",
                  m->indexer_key_bytes, m->sparse_topk);
    }
    *exit_code = 0;
  });
}

struct CrossoverFlags {
  PrefillFlags prefill;
  uint64_t tokens = 32768;
  bool json = false;
  std::string svg;
};

std::string CrossoverSvg(const PrefillModel& m, std::optional<uint64_t> crossover) {
  ChartSeries recompute{"recompute (prefill)", {}, false};
  ChartSeries reload{"reload over " + m.link().name, {}, true};
  for (double t = 16; t <= 1048576 * 1.01; t *= std::sqrt(2.0)) {
    recompute.points.push_back({t, m.RecomputeSeconds(t)});
    reload.points.push_back({t, m.ReloadSeconds(t)});
  }
  ChartOptions o;
  o.title = Format("%s on %u x %s, KV %s: recompute vs reload", m.model().name.c_str(),
                   m.options().tensor_parallel, m.gpu().name.c_str(),
                   std::string(KvPrecisionName(m.options().kv_precision)).c_str());
  o.x_label = "prompt tokens";
  o.y_label = "seconds";
  o.log_x = true;
  o.log_y = true;
  if (crossover) {
    o.marker_x = static_cast<double>(*crossover);
    o.marker_label = Format("reload wins from %llu tokens", static_cast<unsigned long long>(*crossover));
  }
  return RenderLineChart(o, {recompute, reload});
}

void AddCrossoverCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<CrossoverFlags>();
  CLI::App* cmd = app.add_subcommand("crossover", "Prompt length from which reloading KV beats recomputing it");
  f->prefill.Register(cmd, true);
  cmd->add_option("--tokens", f->tokens, "Prompt length for the speed-up figure")->capture_default_str();
  cmd->add_flag("--json", f->json, "Print JSON instead of text");
  cmd->add_option("--svg", f->svg, "Also write a chart of both times against prompt length");
  cmd->callback([f, exit_code] {
    Result<PrefillModel> m = f->prefill.Build();
    if (!m.ok()) {
      *exit_code = Fail("crossover", m.status());
      return;
    }
    if (f->tokens == 0) {
      *exit_code = Fail("crossover", Status::InvalidArgument("--tokens must be positive"));
      return;
    }
    const std::optional<uint64_t> crossover = m->CrossoverTokens();
    const double t = static_cast<double>(f->tokens);
    if (f->json) {
      nlohmann::ordered_json j;
      j["model"] = m->model().name;
      j["gpu"] = m->gpu().name;
      j["link"] = m->link().name;
      j["tp"] = m->options().tensor_parallel;
      j["mfu"] = m->options().mfu;
      j["attention_mfu"] = m->GroupAttentionFlopsPerSecond() / m->GroupFlopsPerSecond() * m->options().mfu;
      j["kv_dtype"] = KvPrecisionName(m->options().kv_precision);
      j["crossover_tokens"] = crossover ? nlohmann::ordered_json(*crossover) : nlohmann::ordered_json();
      j["tokens"] = f->tokens;
      j["dense_flops"] = m->DenseFlops(0, t);
      j["attention_flops"] = m->AttentionFlops(0, t);
      j["recompute_seconds"] = m->RecomputeSeconds(t);
      j["reload_seconds"] = m->ReloadSeconds(t);
      j["speedup"] = m->Speedup(t);
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      const std::string attention =
          m->options().attention_mfu > 0 ? Format(", attention %.2f", m->options().attention_mfu) : "";
      std::printf("%s on %u x %s (%s dense %.3g TFLOP/s each, MFU %.2f%s), KV %s over %s (%.1f GB/s, %.0f us%s)\n",
                  m->model().name.c_str(), m->options().tensor_parallel, m->gpu().name.c_str(),
                  m->options().fp8_compute ? "FP8" : "BF16",
                  m->options().fp8_compute ? m->gpu().fp8_dense_tflops : m->gpu().bf16_dense_tflops,
                  m->options().mfu, attention.c_str(), std::string(KvPrecisionName(m->options().kv_precision)).c_str(),
                  m->link().name.c_str(), m->link().gigabytes_per_second, m->link().latency_us,
                  m->link().per_gpu ? ", per GPU" : ", shared by the group");
      std::printf("\n%10s %14s %14s %14s %10s\n", "tokens", "reload B/GPU", "recompute", "reload", "speed-up");
      for (double len : {256.0, 1024.0, 4096.0, 16384.0, 65536.0, 131072.0}) {
        std::printf("%10.0f %14s %14s %14s %9.1fx\n", len, FormatBytes(m->ReloadBytesPerGpu(len)).c_str(),
                    FormatSeconds(m->RecomputeSeconds(len)).c_str(),
                    FormatSeconds(m->ReloadSeconds(len)).c_str(), m->Speedup(len));
      }
      if (crossover) {
        std::printf("\nreload wins from %llu tokens\n", static_cast<unsigned long long>(*crossover));
      } else {
        std::printf("\nrecompute stays faster up to 100M tokens\n");
      }
      std::printf("at %llu tokens: recompute %s, reload %s, speed-up %.1fx\n",
                  static_cast<unsigned long long>(f->tokens), FormatSeconds(m->RecomputeSeconds(t)).c_str(),
                  FormatSeconds(m->ReloadSeconds(t)).c_str(), m->Speedup(t));
    }
    if (!f->svg.empty()) {
      Status s = WriteFile(f->svg, CrossoverSvg(*m, crossover));
      if (!s.ok()) {
        *exit_code = Fail("crossover", s);
        return;
      }
    }
    *exit_code = 0;
  });
}

struct CostFlags {
  PrefillFlags prefill;
  CostScenario scenario;
  int steps = 10;
  std::string prices;
  bool json = false;
  std::string svg;
};

Result<std::vector<ApiPrice>> LoadPrices(const std::string& path) {
  if (path.empty()) return ParseApiPrices(BuiltinApiPricesToml());
  Result<std::string> text = ReadFile(path, "price table");
  if (!text.ok()) return text.status();
  return ParseApiPrices(*text);
}

nlohmann::ordered_json CostPointJson(const CostPoint& p) {
  return {{"hit_rate", p.hit_rate},
          {"usd_per_million_prompt_tokens", p.usd_per_million_prompt_tokens},
          {"ttft_seconds", p.ttft_seconds},
          {"gpu_seconds_per_prompt", p.gpu_seconds_per_prompt}};
}

std::string CostJson(const PrefillModel& m, const CostScenario& sc, const CostComparison& c,
                     const std::vector<CostPoint>& curve, const std::vector<ApiPrice>& prices) {
  nlohmann::ordered_json j;
  j["model"] = m.model().name;
  j["gpu"] = m.gpu().name;
  j["link"] = m.link().name;
  j["tp"] = m.options().tensor_parallel;
  j["kv_dtype"] = KvPrecisionName(m.options().kv_precision);
  j["tokens"] = sc.prompt_tokens;
  j["hit_rate"] = sc.hit_rate;
  j["gpu_hour_usd"] = sc.usd_per_gpu_hour;
  j["data_reduction_ratio"] = sc.data_reduction_ratio;
  j["without_cache"] = CostPointJson(c.without_cache);
  j["with_cache"] = CostPointJson(c.with_cache);
  j["gpu_seconds_saved"] = c.gpu_seconds_saved;
  j["gpu_time_saved_fraction"] = c.gpu_time_saved_fraction;
  j["ttft_speedup"] = c.ttft_speedup;
  j["kv_bytes_per_session"] = c.kv_bytes_per_session;
  j["kv_bytes_per_session_reduced"] = c.kv_bytes_per_session_reduced;
  j["curve"] = nlohmann::ordered_json::array();
  for (const CostPoint& p : curve) j["curve"].push_back(CostPointJson(p));
  j["api_prices"] = nlohmann::ordered_json::array();
  for (const ApiPrice& p : prices) {
    j["api_prices"].push_back({{"provider", p.provider},
                               {"model", p.model},
                               {"input_usd_per_m", p.input_usd_per_million},
                               {"cached_input_usd_per_m", p.cached_input_usd_per_million},
                               {"as_of", p.as_of},
                               {"url", p.url}});
  }
  return j.dump(2) + "\n";
}

std::string CostText(const PrefillModel& m, const CostScenario& sc, const CostComparison& c,
                     const std::vector<CostPoint>& curve, const std::vector<ApiPrice>& prices) {
  std::string out = Format(
      "%s on %u x %s at $%.2f/GPU-hour, %llu-token prompts, KV %s reloaded over %s\n\n",
      m.model().name.c_str(), m.options().tensor_parallel, m.gpu().name.c_str(),
      sc.usd_per_gpu_hour, static_cast<unsigned long long>(sc.prompt_tokens),
      std::string(KvPrecisionName(m.options().kv_precision)).c_str(), m.link().name.c_str());
  const CostPoint& cold = c.without_cache;
  const CostPoint& warm = c.with_cache;
  out += Format("%-22s %16s %16s\n", "", "without cache",
                Format("with (%.0f%% hit)", 100 * sc.hit_rate).c_str());
  out += Format("%-22s %16.4f %16.4f   %+.1f%%\n", "$/M prompt tokens",
                cold.usd_per_million_prompt_tokens, warm.usd_per_million_prompt_tokens,
                100 * (warm.usd_per_million_prompt_tokens / cold.usd_per_million_prompt_tokens - 1));
  out += Format("%-22s %16s %16s   %.1fx faster\n", "TTFT (prefill)",
                FormatSeconds(cold.ttft_seconds).c_str(), FormatSeconds(warm.ttft_seconds).c_str(),
                c.ttft_speedup);
  out += Format("%-22s %16s %16s   saves %s (%.1f%%)\n", "GPU time per request",
                (FormatSeconds(cold.gpu_seconds_per_prompt) + " GPU").c_str(),
                (FormatSeconds(warm.gpu_seconds_per_prompt) + " GPU").c_str(),
                (FormatSeconds(c.gpu_seconds_saved) + " GPU").c_str(),
                100 * c.gpu_time_saved_fraction);
  out += Format("%-22s %16s %16s   after %.2fx data reduction\n", "KV per session",
                FormatBytes(c.kv_bytes_per_session).c_str(),
                FormatBytes(c.kv_bytes_per_session_reduced).c_str(), sc.data_reduction_ratio);
  out += Format("\n%8s %16s %14s %16s\n", "hit rate", "$/M prompt tok", "TTFT prefill",
                "GPU time/request");
  for (const CostPoint& p : curve) {
    out += Format("%7.0f%% %16.4f %14s %16s\n", 100 * p.hit_rate, p.usd_per_million_prompt_tokens,
                  FormatSeconds(p.ttft_seconds).c_str(),
                  (FormatSeconds(p.gpu_seconds_per_prompt) + " GPU").c_str());
  }
  out += "\nCached input at public APIs (list prices as read on the date shown; --prices FILE "
         "for your own table):\n";
  out += Format("%-12s %-22s %10s %11s %13s  %s\n", "provider", "model", "input $/M",
                "cached $/M", "cached/input", "as of");
  for (const ApiPrice& p : prices) {
    const double ratio = p.input_usd_per_million > 0
                             ? p.cached_input_usd_per_million / p.input_usd_per_million
                             : 0;
    out += Format("%-12s %-22s %10.3f %11.3f %12.1f%%  %s\n", p.provider.c_str(), p.model.c_str(),
                  p.input_usd_per_million, p.cached_input_usd_per_million, 100 * ratio,
                  p.as_of.c_str());
  }
  out += Format("%-35s %10.4f %11.4f %12.1f%%  prefill cost computed here\n", "this scenario",
                cold.usd_per_million_prompt_tokens, warm.usd_per_million_prompt_tokens,
                100 * warm.usd_per_million_prompt_tokens / cold.usd_per_million_prompt_tokens);
  return out;
}

void AddCostCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<CostFlags>();
  CLI::App* cmd = app.add_subcommand(
      "cost", "$ per million prompt tokens, TTFT and GPU time with and without the cache");
  f->prefill.Register(cmd, true);
  cmd->add_option("--gpu-hour-usd", f->scenario.usd_per_gpu_hour, "Price of one GPU-hour")
      ->capture_default_str();
  cmd->add_option("--tokens", f->scenario.prompt_tokens, "Prompt length")->capture_default_str();
  cmd->add_option("--hit-rate", f->scenario.hit_rate,
                  "Share of each prompt reloaded from the cache, [0, 1]")
      ->capture_default_str();
  cmd->add_option("--reduction", f->scenario.data_reduction_ratio,
                  "Data-reduction ratio of the stored KV (kvtier's lossless compression), >= 1")
      ->capture_default_str();
  cmd->add_option("--steps", f->steps, "Hit-rate steps between 0 and 1 in the table")
      ->capture_default_str();
  cmd->add_option("--prices", f->prices,
                  "API price table (TOML, as tools/planning/api_prices.toml); default: built in");
  cmd->add_flag("--json", f->json, "Print JSON instead of text");
  cmd->add_option("--svg", f->svg, "Also write a chart of $/M tokens against hit rate");
  cmd->callback([f, exit_code] {
    Result<PrefillModel> m = f->prefill.Build();
    if (!m.ok()) {
      *exit_code = Fail("cost", m.status());
      return;
    }
    Result<CostComparison> c = CompareCost(*m, f->scenario);
    if (!c.ok()) {
      *exit_code = Fail("cost", c.status());
      return;
    }
    Result<std::vector<CostPoint>> curve =
        CostCurve(*m, f->scenario.usd_per_gpu_hour, f->scenario.prompt_tokens, f->steps);
    if (!curve.ok()) {
      *exit_code = Fail("cost", curve.status());
      return;
    }
    Result<std::vector<ApiPrice>> prices = LoadPrices(f->prices);
    if (!prices.ok()) {
      *exit_code = Fail("cost", prices.status());
      return;
    }
    const std::string text = f->json ? CostJson(*m, f->scenario, *c, *curve, *prices)
                                     : CostText(*m, f->scenario, *c, *curve, *prices);
    std::fputs(text.c_str(), stdout);
    if (!f->svg.empty()) {
      ChartSeries s{"$/M prompt tokens", {}, false};
      for (const CostPoint& p : *curve) s.points.push_back({p.hit_rate, p.usd_per_million_prompt_tokens});
      ChartOptions o;
      o.title = Format("%s on %u x %s: prefill cost vs prefix-cache hit rate (%llu tokens)",
                       m->model().name.c_str(), m->options().tensor_parallel, m->gpu().name.c_str(),
                       static_cast<unsigned long long>(f->scenario.prompt_tokens));
      o.x_label = "hit rate";
      o.y_label = Format("$ per million prompt tokens at $%.2f/GPU-h", f->scenario.usd_per_gpu_hour);
      Status st = WriteFile(f->svg, RenderLineChart(o, {s}));
      if (!st.ok()) {
        *exit_code = Fail("cost", st);
        return;
      }
    }
    *exit_code = 0;
  });
}

struct PlanFlags {
  PrefillFlags prefill;  // The run options only: the page spans every model, GPU and link.
  double usd_per_gpu_hour = 2.5;
  std::string html;
};

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<PlanFlags>();
  f->prefill.tp = 8;
  CLI::App* cmd = app.add_subcommand(
      "plan", "Interactive planner page: model, GPU, link, prompt length and hit rate sliders");
  cmd->add_option("--html", f->html, "Write the self-contained page here")->required();
  f->prefill.RegisterRun(cmd);
  cmd->add_option("--gpu-hour-usd", f->usd_per_gpu_hour, "Price of one GPU-hour")
      ->capture_default_str();
  cmd->callback([f, exit_code] {
    Result<PrefillOptions> prefill = f->prefill.Options();
    if (!prefill.ok()) {
      *exit_code = Fail("plan", prefill.status());
      return;
    }
    PlanPageOptions o;
    o.prefill = *prefill;
    o.usd_per_gpu_hour = f->usd_per_gpu_hour;
    const PrefillFlags& p = f->prefill;
    o.command = Format("kvtier plan --tp %u --mfu %g%s --dtype %s%s --gpu-hour-usd %g", p.tp, p.mfu,
                       p.attention_mfu > 0 ? Format(" --attention-mfu %g", p.attention_mfu).c_str()
                                           : "",
                       p.dtype.c_str(), p.fp8_compute ? " --fp8-compute" : "", f->usd_per_gpu_hour);
    Result<std::string> page = PlanPageHtml(o);
    if (!page.ok()) {
      *exit_code = Fail("plan", page.status());
      return;
    }
    if (Status s = WriteFile(f->html, *page); !s.ok()) {
      *exit_code = Fail("plan", s);
      return;
    }
    *exit_code = 0;
  });
}

struct SizeFlags {
  std::string scenario_path;
  std::string format = "text";
  std::string out;
  std::string gpu;
  double sessions_per_day = 0;
  double retention_seconds = -1;
  double reduction = 0;
  uint32_t nodes = 0;
  std::string router;
  double target_hit_rate = -1;
};

void AddSizeCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<SizeFlags>();
  CLI::App* cmd = app.add_subcommand("size", "Sizing report: capacity per tier, hit rate, GPU-hours saved");
  cmd->add_option("--scenario", f->scenario_path, "Scenario file, JSON or (*.toml) TOML (fields: docs/planning.md)");
  cmd->add_option("--format", f->format, "text, json or html")->capture_default_str();
  cmd->add_option("--out", f->out, "Write the report here instead of stdout");
  cmd->add_option("--gpu", f->gpu, "Override the scenario's GPU");
  cmd->add_option("--sessions-per-day", f->sessions_per_day, "Override sessions per day");
  cmd->add_option("--retention", f->retention_seconds, "Override retention, seconds");
  cmd->add_option("--reduction", f->reduction, "Override the data-reduction ratio");
  cmd->add_option("--nodes", f->nodes, "Override the fleet's nodes (own G2 and G3, shared G4)");
  cmd->add_option("--router", f->router,
                  "Override the fleet's router: round-robin, least-loaded, session, kv-aware");
  cmd->add_option("--target-hit-rate", f->target_hit_rate,
                  "Find the retention that reaches this token hit rate, e.g. 0.8 (0 = none)");
  cmd->callback([f, exit_code] {
    Scenario scenario;
    if (!f->scenario_path.empty()) {
      Result<std::string> text = ReadFile(f->scenario_path, "scenario");
      if (!text.ok()) {
        *exit_code = Fail("size", text.status());
        return;
      }
      const bool toml = f->scenario_path.ends_with(".toml");
      Result<Scenario> parsed = toml ? ParseScenarioToml(*text) : ParseScenarioJson(*text);
      if (!parsed.ok()) {
        *exit_code = Fail("size", parsed.status());
        return;
      }
      scenario = *parsed;
    }
    if (!f->gpu.empty()) scenario.gpu = f->gpu;
    if (f->sessions_per_day != 0) scenario.sessions_per_day = f->sessions_per_day;
    if (f->retention_seconds != -1) scenario.retention_seconds = f->retention_seconds;
    if (f->reduction != 0) scenario.data_reduction_ratio = f->reduction;
    if (f->nodes != 0) scenario.nodes = f->nodes;
    if (!f->router.empty()) scenario.router = f->router;
    if (f->target_hit_rate != -1) scenario.target_hit_rate = f->target_hit_rate;
    Result<SizingReport> report = ComputeSizing(scenario);
    if (!report.ok()) {
      *exit_code = Fail("size", report.status());
      return;
    }
    std::string text;
    if (f->format == "text") {
      text = SizingText(*report);
    } else if (f->format == "json") {
      text = SizingJson(*report);
    } else if (f->format == "html") {
      text = SizingHtml(*report);
    } else {
      *exit_code = Fail("size", Status::InvalidArgument("--format must be text, json or html"));
      return;
    }
    if (f->out.empty()) {
      std::fputs(text.c_str(), stdout);
    } else if (Status s = WriteFile(f->out, text); !s.ok()) {
      *exit_code = Fail("size", s);
      return;
    }
    *exit_code = 0;
  });
}

}  // namespace

void AddPlanningCommands(CLI::App& app, int* exit_code) {
  AddModelCommand(app, exit_code);
  AddCrossoverCommand(app, exit_code);
  AddCostCommand(app, exit_code);
  AddPlanCommand(app, exit_code);
  AddSizeCommand(app, exit_code);
  planning::cli::AddTraceAndReplayCommands(app, exit_code);
}

}  // namespace kvtier::cli
