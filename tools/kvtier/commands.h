// Subcommands of the kvtier CLI. Each Add*Command registers itself on `app`; when it runs,
// it stores the process exit code in *exit_code.

#ifndef KVTIER_TOOLS_KVTIER_COMMANDS_H_
#define KVTIER_TOOLS_KVTIER_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace kvtier::cli {

void AddBenchCommand(CLI::App& app, int* exit_code);
// model, crossover, cost, size, trace gen and replay (tools/planning/commands.cc).
void AddPlanningCommands(CLI::App& app, int* exit_code);
// kv dump and kv bench-compress: real KV of the reference model (tools/kvtier/kv_*.cc).
void AddKvCommand(CLI::App& app, int* exit_code);
// admin: a running kvtierd through its HTTP endpoint (tools/kvtier/admin.cc).
void AddAdminCommand(CLI::App& app, int* exit_code);
// kvtier admin fsck (fsck.cc), added under `admin`.
void AddFsckCommand(CLI::App* admin, int* exit_code);
// kvtier admin arenas (arenas.cc): G2 arena files on this host, under `admin`.
void AddArenasCommand(CLI::App* admin, int* exit_code);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_COMMANDS_H_
