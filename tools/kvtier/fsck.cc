// kvtier admin fsck: offline checks of a G3 directory (src/tier/disk/disk_fsck.h) and of a G4
// directory (src/tier/sharedfs/shared_fs_fsck.h), with --repair. Exit codes follow fsck(8):
// 0 clean, 1 problems found and repaired, 4 problems found and left (run with --repair),
// 8 the check could not run (the directory is in use, missing, unreadable).

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "kvtier/env.h"
#include "src/tier/disk/disk_fsck.h"
#include "src/tier/sharedfs/shared_fs_fsck.h"
#include "tools/kvtier/commands.h"
#include "tools/planning/units.h"

namespace kvtier::cli {
namespace {

using json = nlohmann::ordered_json;
using planning::FormatBytes;

constexpr int kClean = 0;
constexpr int kRepaired = 1;
constexpr int kLeft = 4;
constexpr int kFailed = 8;

struct FsckOptions {
  std::string g3;
  std::string g4;
  bool repair = false;
  bool json_output = false;
  double stale_after_s = 3600;
};

int Failed(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kvtier admin fsck: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  return kFailed;
}

void PrintProblems(const std::vector<std::string>& problems) {
  if (problems.empty()) return;
  std::printf("problems:\n");
  for (const std::string& p : problems) std::printf("  %s\n", p.c_str());
}

int CheckG3(const FsckOptions& o) {
  Result<disk::DiskCheckReport> r = disk::CheckDiskDirectory(Env::Default(), o.g3, o.repair);
  if (!r.ok()) return Failed(o.g3, r.status());
  const bool problems = !r->clean() || r->orphan_segments > 0 || r->unsealed_segments > 0;
  if (o.json_output) {
    json j;
    j["g3"] = o.g3;
    j["clean"] = r->clean();
    for (const auto& [name, value] :
         {std::pair<const char*, uint64_t>{"segments", r->segments}, {"sealed_segments", r->sealed_segments},
          {"unsealed_segments", r->unsealed_segments}, {"bad_segments", r->bad_segments},
          {"segment_bytes", r->segment_bytes}, {"records", r->records}, {"blocks", r->blocks},
          {"tombstones", r->tombstones}, {"live_blocks", r->live_blocks},
          {"dead_records", r->dead_records}, {"corrupt_records", r->corrupt_records},
          {"torn_records", r->torn_records}, {"footer_mismatches", r->footer_mismatches},
          {"orphan_segments", r->orphan_segments}, {"other_files", r->other_files},
          {"removed_segments", r->removed_segments}, {"rewritten_segments", r->rewritten_segments},
          {"dropped_records", r->dropped_records}}) {
      j[name] = value;
    }
    j["tenants"] = json::object();
    for (const auto& [name, t] : r->tenants) {
      j["tenants"][name] = {{"live_blocks", t.live_blocks},
                            {"live_value_bytes", t.live_value_bytes},
                            {"live_stored_bytes", t.live_stored_bytes}};
    }
    j["problems"] = r->problems;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("G3 %s: %llu segments (%llu sealed, %llu left unsealed by a crash), %s\n",
                o.g3.c_str(), static_cast<unsigned long long>(r->segments),
                static_cast<unsigned long long>(r->sealed_segments),
                static_cast<unsigned long long>(r->unsealed_segments),
                FormatBytes(static_cast<double>(r->segment_bytes)).c_str());
    std::printf("  records %llu (%llu blocks, %llu tombstones): %llu live blocks, %llu dead records\n",
                static_cast<unsigned long long>(r->records), static_cast<unsigned long long>(r->blocks),
                static_cast<unsigned long long>(r->tombstones),
                static_cast<unsigned long long>(r->live_blocks),
                static_cast<unsigned long long>(r->dead_records));
    for (const auto& [name, t] : r->tenants) {
      std::printf("  tenant %-20s %8llu blocks %12s (%s stored)\n", name.c_str(),
                  static_cast<unsigned long long>(t.live_blocks),
                  FormatBytes(static_cast<double>(t.live_value_bytes)).c_str(),
                  FormatBytes(static_cast<double>(t.live_stored_bytes)).c_str());
    }
    std::printf("  corrupt records %llu, torn records %llu, footer mismatches %llu, bad segments "
                "%llu, orphan segments %llu\n",
                static_cast<unsigned long long>(r->corrupt_records),
                static_cast<unsigned long long>(r->torn_records),
                static_cast<unsigned long long>(r->footer_mismatches),
                static_cast<unsigned long long>(r->bad_segments),
                static_cast<unsigned long long>(r->orphan_segments));
    PrintProblems(r->problems);
    if (o.repair) {
      std::printf("repaired: %llu segments removed, %llu rewritten, %llu damaged records left "
                  "behind\n",
                  static_cast<unsigned long long>(r->removed_segments),
                  static_cast<unsigned long long>(r->rewritten_segments),
                  static_cast<unsigned long long>(r->dropped_records));
    } else if (problems) {
      std::printf("run again with --repair (kvtierd stopped) to rewrite damaged and unsealed "
                  "segments with their intact records and remove orphan and bad segments\n");
    }
  }
  if (!problems) return kClean;
  return o.repair ? kRepaired : kLeft;
}

int CheckG4(const FsckOptions& o) {
  std::string root = o.g4;
  if (root.starts_with("s3://")) {
    return Failed(o.g4, Status::InvalidArgument(
                            "fsck reads G4 on a file system; an S3 bucket is checked by the "
                            "tier itself (every read verifies, corrupt objects are removed) and "
                            "swept by the janitor"));
  }
  if (root.starts_with("file:")) root = root.substr(5);
  const uint64_t stale_us = static_cast<uint64_t>(o.stale_after_s * 1e6);
  Result<SharedCheckReport> r = CheckSharedDirectory(root, o.repair, stale_us);
  if (!r.ok()) return Failed(o.g4, r.status());
  if (o.json_output) {
    json j;
    j["g4"] = root;
    j["clean"] = r->clean();
    for (const auto& [name, value] :
         {std::pair<const char*, uint64_t>{"objects", r->objects}, {"corrupt_objects", r->corrupt_objects},
          {"newer_version_objects", r->newer_version_objects}, {"session_markers", r->session_markers},
          {"orphan_session_markers", r->orphan_session_markers}, {"temp_files", r->temp_files},
          {"stale_temp_files", r->stale_temp_files}, {"notices", r->notices}, {"records", r->records},
          {"other_files", r->other_files}, {"removed_objects", r->removed_objects},
          {"removed_markers", r->removed_markers}, {"removed_temp_files", r->removed_temp_files}}) {
      j[name] = value;
    }
    j["janitor_holder"] = r->janitor_holder;
    j["tenants"] = json::object();
    for (const auto& [name, t] : r->tenants) {
      j["tenants"][name] = {{"objects", t.objects},
                            {"value_bytes", t.value_bytes},
                            {"stored_bytes", t.stored_bytes}};
    }
    j["problems"] = r->problems;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("G4 %s: %llu objects, %llu session markers, %llu temp files, %llu deletion "
                "notices, %llu key records, janitor lease %s\n",
                root.c_str(), static_cast<unsigned long long>(r->objects),
                static_cast<unsigned long long>(r->session_markers),
                static_cast<unsigned long long>(r->temp_files),
                static_cast<unsigned long long>(r->notices),
                static_cast<unsigned long long>(r->records),
                r->janitor_holder.empty() ? "free" : ("held by " + r->janitor_holder).c_str());
    for (const auto& [name, t] : r->tenants) {
      std::printf("  tenant %-20s %8llu objects %12s (%s stored)\n", name.c_str(),
                  static_cast<unsigned long long>(t.objects),
                  FormatBytes(static_cast<double>(t.value_bytes)).c_str(),
                  FormatBytes(static_cast<double>(t.stored_bytes)).c_str());
    }
    std::printf("  corrupt objects %llu, orphan session markers %llu, stale temp files %llu "
                "(older than %.0f s), newer-format objects %llu\n",
                static_cast<unsigned long long>(r->corrupt_objects),
                static_cast<unsigned long long>(r->orphan_session_markers),
                static_cast<unsigned long long>(r->stale_temp_files), o.stale_after_s,
                static_cast<unsigned long long>(r->newer_version_objects));
    PrintProblems(r->problems);
    if (o.repair) {
      std::printf("repaired: %llu objects, %llu session markers and %llu temp files removed\n",
                  static_cast<unsigned long long>(r->removed_objects),
                  static_cast<unsigned long long>(r->removed_markers),
                  static_cast<unsigned long long>(r->removed_temp_files));
    } else if (!r->clean()) {
      std::printf("run again with --repair to remove them (safe while nodes run)\n");
    }
  }
  if (r->clean()) return kClean;
  return o.repair ? kRepaired : kLeft;
}

}  // namespace

void AddFsckCommand(CLI::App* admin, int* exit_code) {
  auto o = std::make_shared<FsckOptions>();
  CLI::App* fsck = admin->add_subcommand(
      "fsck", "Check a G3 directory (kvtierd stopped) or a G4 directory offline; --repair");
  fsck->add_option("--g3", o->g3, "G3 directory ([disk] dir)");
  fsck->add_option("--g4", o->g4, "G4 location on a file system ([shared] location)");
  fsck->add_flag("--repair", o->repair, "Fix what was found (see docs/operations.md)");
  fsck->add_flag("--json", o->json_output, "Print the report as JSON");
  fsck->add_option("--stale-after", o->stale_after_s,
                   "G4: seconds after which temp files and markers without an object are orphans")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  fsck->callback([o, exit_code] {
    if (o->g3.empty() == o->g4.empty()) {
      *exit_code = Failed("usage", Status::InvalidArgument("give one of --g3 DIR or --g4 DIR"));
      return;
    }
    *exit_code = o->g3.empty() ? CheckG4(*o) : CheckG3(*o);
  });
}

}  // namespace kvtier::cli
