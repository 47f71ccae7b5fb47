// Helpers shared by the planning subcommands (commands.cc, commands_replay.cc).

#ifndef KVTIER_TOOLS_PLANNING_CLI_UTIL_H_
#define KVTIER_TOOLS_PLANNING_CLI_UTIL_H_

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "kvtier/status.h"
#include "tools/planning/catalog.h"
#include "tools/planning/crossover.h"
#include "tools/planning/hf_config.h"
#include "tools/planning/kv_math.h"
#include "tools/planning/units.h"

namespace kvtier::planning::cli {

// Exit code of a command that failed on bad input or a failed operation.
inline constexpr int kExitFailure = 1;

// Prints "kvtier <command>: <message>" to stderr and returns kExitFailure.
inline int Fail(const std::string& command, const Status& status) {
  std::fprintf(stderr, "kvtier %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  return kExitFailure;
}

// The whole file; NotFound naming `what` and the path when it cannot be read.
inline Result<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + what + " '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out) return Status::Unavailable("cannot write '" + path + "'");
  return Status::OK();
}

// The options every command that models prefill takes.
struct PrefillFlags {
  std::string model = "llama-3.1-70b";
  std::string gpu = "h100";
  std::string link = "pcie-gen5";
  uint32_t tp = 1;
  double mfu = 0.5;
  double attention_mfu = 0;
  std::string dtype = "bf16";
  bool fp8_compute = false;
  double gpu_tflops = 0;       // > 0: a custom accelerator of this dense rate instead of --gpu.
  double link_gbps = 0;        // > 0: a custom link of this rate (GB/s) instead of --link.
  double link_latency_us = 0;  // The custom link's fixed cost per reload.

  void Register(CLI::App* cmd, bool with_link) {
    cmd->add_option("--model", model, "Catalog model name or path to a config.json")
        ->capture_default_str();
    cmd->add_option("--gpu", gpu, "GPU name (a100, h100, h200, b200, gb200, b300, l40s, mi300x, mi325x)")
        ->capture_default_str();
    if (with_link) {
      cmd->add_option("--link", link, "Reload link (pcie-gen4/5/6, 100/200/400/800gbe, nvme-gen4/5)")
          ->capture_default_str();
    }
    RegisterRun(cmd);
    cmd->add_option("--gpu-tflops", gpu_tflops,
                    "Instead of --gpu: an accelerator of this dense TFLOP/s (measured, say; then "
                    "--mfu 1)")
        ->check(CLI::PositiveNumber);
    if (with_link) {
      cmd->add_option("--link-gbps", link_gbps, "Instead of --link: a link of this many GB/s")
          ->check(CLI::PositiveNumber);
      cmd->add_option("--link-latency-us", link_latency_us,
                      "The --link-gbps link's fixed cost per reload, microseconds")
          ->check(CLI::NonNegativeNumber);
    }
  }

  // How the model runs, whatever the model, GPU and link: --tp, --mfu, --attention-mfu,
  // --dtype, --fp8-compute (for commands that span the catalog, like plan).
  void RegisterRun(CLI::App* cmd) {
    cmd->add_option("--tp", tp, "Tensor-parallel degree")->capture_default_str();
    cmd->add_option("--mfu", mfu, "Fraction of the dense peak prefill achieves, (0, 1]")
        ->capture_default_str();
    cmd->add_option("--attention-mfu", attention_mfu,
                    "Fraction of the peak the attention kernels achieve, [0, 1]; 0 = --mfu")
        ->capture_default_str();
    cmd->add_option("--dtype", dtype, "KV cache dtype: bf16, fp8, fp4")->capture_default_str();
    cmd->add_flag("--fp8-compute", fp8_compute, "Prefill at the GPU's FP8 peak");
  }

  // The options RegisterRun reads. InvalidArgument for an unknown dtype.
  Result<PrefillOptions> Options() const {
    Result<KvPrecision> precision = ParseKvPrecision(dtype);
    if (!precision.ok()) return precision.status();
    PrefillOptions o;
    o.tensor_parallel = tp;
    o.mfu = mfu;
    o.attention_mfu = attention_mfu;
    o.kv_precision = *precision;
    o.fp8_compute = fp8_compute;
    return o;
  }

  Result<PrefillModel> Build(const std::string& link_name) const {
    Result<ModelSpec> spec = ResolveModel(model);
    if (!spec.ok()) return spec.status();
    Result<GpuSpec> g = gpu_tflops > 0
        ? Result<GpuSpec>(GpuSpec{Format("%.4g TFLOP/s", gpu_tflops), "measured", gpu_tflops,
                                  gpu_tflops, 0})
        : FindGpu(gpu);
    if (!g.ok()) return g.status();
    Result<LinkSpec> l = link_gbps > 0
        ? Result<LinkSpec>(LinkSpec{Format("%.4g GB/s", link_gbps), "measured", link_gbps,
                                    link_latency_us, true})
        : FindLink(link_name);
    if (!l.ok()) return l.status();
    Result<PrefillOptions> o = Options();
    if (!o.ok()) return o.status();
    return PrefillModel::Create(*spec, *g, *l, *o);
  }
  Result<PrefillModel> Build() const { return Build(link); }
};

void AddTraceAndReplayCommands(CLI::App& app, int* exit_code);

}  // namespace kvtier::planning::cli

#endif  // KVTIER_TOOLS_PLANNING_CLI_UTIL_H_
