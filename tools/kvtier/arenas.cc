// kvtier admin arenas: the G2 warm-restart arenas on this host (src/tier/memory/arena_files.h),
// whose they are, what memory they hold, and --remove for those nothing will adopt. Runs
// locally, without a kvtierd: the files are on this host's tmpfs. Exit codes: 0 done, 1 a
// removal failed, 2 the directory could not be listed.

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "src/tier/memory/arena_files.h"
#include "tools/kvtier/commands.h"
#include "tools/planning/units.h"

namespace kvtier::cli {
namespace {

using json = nlohmann::ordered_json;

struct ArenasOptions {
  std::string dir = "/dev/shm";
  bool remove = false;
  bool all_stopped = false;  // --remove also stopped arenas and those of unknown owner.
  bool json_output = false;
};

bool ToRemove(const ArenasOptions& o, const ArenaFiles& a) {
  if (!o.remove || a.state == ArenaState::kInUse) return false;
  return a.state == ArenaState::kOrphaned || o.all_stopped;
}

int Arenas(const ArenasOptions& o) {
  Result<std::vector<ArenaFiles>> arenas = ListArenas(o.dir);
  if (!arenas.ok()) {
    std::fprintf(stderr, "kvtier admin arenas: %s\n", std::string(arenas.status().message()).c_str());
    return 2;
  }
  int exit_code = 0;
  json out = json::array();
  if (!o.json_output) {
    std::printf("%-44s %-14s %8s %10s  %s\n", "ARENA", "STATE", "PID", "MEMORY", "DATA_DIR");
  }
  uint64_t freed = 0;
  for (const ArenaFiles& a : *arenas) {
    std::string removed = "no";
    if (ToRemove(o, a)) {
      Status s = RemoveArena(a);
      if (s.ok()) {
        removed = "yes";
        freed += a.bytes;
      } else {
        removed = std::string(s.message());
        std::fprintf(stderr, "kvtier admin arenas: %s\n", removed.c_str());
        exit_code = 1;
      }
    }
    if (o.json_output) {
      json entry = {{"path", a.path},
                    {"state", ArenaStateName(a.state)},
                    {"pid", a.holder_pid},
                    {"bytes", a.bytes},
                    {"data_dir", a.data_dir},
                    {"files", a.files}};
      if (o.remove) entry["removed"] = removed == "yes";
      out.push_back(entry);
    } else {
      std::printf("%-44s %-14s %8s %10s  %s%s\n", a.path.c_str(),
                  std::string(ArenaStateName(a.state)).c_str(),
                  a.holder_pid != 0 ? std::to_string(a.holder_pid).c_str() : "-",
                  planning::FormatBytes(static_cast<double>(a.bytes)).c_str(),
                  a.data_dir.empty() ? "?" : a.data_dir.c_str(),
                  removed == "yes" ? "  (removed)" : "");
    }
  }
  if (o.json_output) {
    std::printf("%s\n", out.dump(2).c_str());
  } else if (o.remove) {
    std::printf("freed %s\n", planning::FormatBytes(static_cast<double>(freed)).c_str());
  }
  return exit_code;
}

}  // namespace

void AddArenasCommand(CLI::App* admin, int* exit_code) {
  auto o = std::make_shared<ArenasOptions>();
  CLI::App* arenas = admin->add_subcommand(
      "arenas", "G2 warm-restart arenas on this host: whose, how much memory; --remove "
                "those whose data directory is gone");
  arenas->add_option("--dir", o->dir, "Where the arenas are ([memory] arena_file's directory)")
      ->capture_default_str();
  CLI::Option* remove = arenas->add_flag("--remove", o->remove,
                   "Remove orphaned arenas: no kvtierd holds them and their data_dir is gone");
  arenas->add_flag("--all-stopped", o->all_stopped,
                   "With --remove: every arena no kvtierd holds (a stopped kvtierd loses its "
                   "warm restart; G3 keeps what it had)")
      ->needs(remove);
  arenas->add_flag("--json", o->json_output, "Print them as JSON");
  arenas->callback([o, exit_code] { *exit_code = Arenas(*o); });
}

}  // namespace kvtier::cli
