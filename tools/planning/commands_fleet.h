// `kvtier replay --nodes N`: the fleet replay's flags and report (fleet_replay.h).

#ifndef KVTIER_TOOLS_PLANNING_COMMANDS_FLEET_H_
#define KVTIER_TOOLS_PLANNING_COMMANDS_FLEET_H_

#include <CLI/CLI.hpp>
#include <string>

#include "tools/planning/replay.h"
#include "tools/planning/trace.h"

namespace kvtier::planning::cli {

struct FleetFlags {
  uint32_t nodes = 0;  // 0: a single-node replay.
  std::string router = "kv-aware";
  std::string g4_capacity;
  double load_cap = 0;  // 0 = FleetOptions' default.
  double load_half_life_seconds = 0;
  double window_seconds = 1;
};

// What the replay command prints or writes, whatever it replays.
struct ReplayOutput {
  bool compare = false;
  bool json = false;
  std::string svg;
  std::string html;
  std::string trace_path;
};

void RegisterFleetFlags(CLI::App* cmd, FleetFlags* flags);

// Replays `trace` on flags.nodes nodes of `node`'s options and prints the report; returns the
// exit code.
int RunFleetReplay(const FleetFlags& flags, const Trace& trace, const ReplayOptions& node,
                   const ReplayOutput& output);

}  // namespace kvtier::planning::cli

#endif  // KVTIER_TOOLS_PLANNING_COMMANDS_FLEET_H_
