// kvtier: the command-line tool. Benchmarks and operator commands over the kvtier library.

#include <cstdio>
#include <new>

#include <CLI/CLI.hpp>

#include "tools/kvtier/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvtier: tiered, shared, persistent KV-cache store for LLM inference.\n"
               "Run 'kvtier <command> --help' for the options of a command."};
  app.require_subcommand(1);
  int exit_code = 0;
  kvtier::cli::AddBenchCommand(app, &exit_code);
  kvtier::cli::AddPlanningCommands(app, &exit_code);
  kvtier::cli::AddKvCommand(app, &exit_code);
  kvtier::cli::AddAdminCommand(app, &exit_code);
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const std::bad_alloc&) {
    // A command sizes its memory by its input; one that still runs out says so, never aborts.
    std::fprintf(stderr, "kvtier: out of memory: this command needs more memory than the "
                         "machine gives it (try a smaller input)\n");
    return 1;
  }
  return exit_code;
}
