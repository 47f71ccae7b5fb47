// The files G2's warm restart leaves on tmpfs or hugetlbfs, found and removed.
//
// A G2 arena (MemoryTierOptions::arena_file, kvtierd's /dev/shm/kvtier-g2-<hash of data_dir>)
// is files that outlive their process: `<arena>.<16 hex digits>` per tenant, `<arena>.index`
// after a clean stop and `<arena>.lock`, which the process that uses the arena holds (flock)
// and in which it writes whose arena it is: its data directory. An arena nobody will start
// again (its data directory was removed or moved, its daemon was a test's) holds memory until
// someone removes it; these functions tell which arenas those are (`kvtier admin arenas`,
// kvtierd's start-up log) and remove them without ever touching one in use.
//
// Thread safety: stateless functions. Linux only (the holder is found in /proc/locks).

#ifndef KVTIER_TIER_MEMORY_ARENA_FILES_H_
#define KVTIER_TIER_MEMORY_ARENA_FILES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier {

// The default arena files' prefix in /dev/shm (kvtierd's [memory] arena_file = "").
inline constexpr std::string_view kDefaultArenaPrefix = "kvtier-g2-";

enum class ArenaState {
  kInUse,         // A running process holds its lock.
  kStopped,       // Nobody holds it and its data directory exists: that kvtierd's next start
                  // adopts it (a warm restart).
  kOrphaned,      // Nobody holds it and its data directory is gone: nothing will adopt it.
  kUnknownOwner,  // Nobody holds it and its lock names no data directory (an older kvtierd's,
                  // an embedder's Store without one, or the lock file is gone).
};
std::string_view ArenaStateName(ArenaState state);  // "in use", "stopped", ...

struct ArenaFiles {
  std::string path;                // The arena file name; its files are path + ".*".
  std::vector<std::string> files;  // Every file of it, the lock last.
  uint64_t bytes = 0;              // Memory its files hold (allocated blocks, not sizes).
  int holder_pid = 0;              // The process holding its lock; 0 = none.
  std::string data_dir;            // The owner's data directory from its lock; "" = unknown.
  ArenaState state = ArenaState::kUnknownOwner;
};

// The arenas in directory `dir`: those named kvtier-g2-<16 hex digits> and any other whose
// lock file kvtier wrote, by path. Files of other programs are not listed. NotFound when `dir`
// does not exist; an unreadable /proc/locks is an error (without it, an arena in use could
// not be told from one that is not).
Result<std::vector<ArenaFiles>> ListArenas(const std::string& dir);

// Removes an arena's files: takes its lock (FailedPrecondition, nothing removed, when a
// process holds it), removes the regions and the index, then the lock file. Files already
// gone are not an error.
Status RemoveArena(const ArenaFiles& arena);

// Called by the process that holds `arena_file`'s lock: records in the lock file that the
// arena belongs to `data_dir` (absolute; "" = no data directory).
Status WriteArenaOwner(const std::string& arena_file, const std::string& data_dir, Env* env);

}  // namespace kvtier

#endif  // KVTIER_TIER_MEMORY_ARENA_FILES_H_
