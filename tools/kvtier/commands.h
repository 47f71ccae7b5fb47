// Subcommands of the kvtier CLI. Each Add*Command registers itself on `app`; when it runs,
// it stores the process exit code in *exit_code.

#ifndef KVTIER_TOOLS_KVTIER_COMMANDS_H_
#define KVTIER_TOOLS_KVTIER_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace kvtier::cli {

void AddBenchCommand(CLI::App& app, int* exit_code);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_COMMANDS_H_
