// Finding and removing G2 arena files (arena_files.h). The lock file's contents:
//   "kvtier G2 arena\n" "data_dir=" <absolute path> "\n"
// The lock itself is the flock kvtierd holds on it; /proc/locks says who holds one without
// taking it (taking it, even for a moment, would make a kvtierd starting then fail).

#include "src/tier/memory/arena_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

namespace kvtier {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kLockMagic = "kvtier G2 arena\n";
constexpr std::string_view kDataDirField = "data_dir=";
constexpr size_t kMaxLockBytes = 64 * 1024;  // A path is at most 4 KiB; more is not ours.

bool IsHex16(std::string_view s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// The arena a file of `name` belongs to, or "" when it is not an arena's file by its name.
std::string ArenaOf(std::string_view name) {
  for (std::string_view suffix : {".lock", ".index", ".index.tmp"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      return std::string(name.substr(0, name.size() - suffix.size()));
    }
  }
  const size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && dot > 0 && IsHex16(name.substr(dot + 1))) {
    return std::string(name.substr(0, dot));
  }
  // The single file of the layout before per-tenant regions.
  if (name.starts_with(kDefaultArenaPrefix) && IsHex16(name.substr(kDefaultArenaPrefix.size()))) {
    return std::string(name);
  }
  return "";
}

// The lock file's contents when kvtier wrote it (it starts with kLockMagic).
std::optional<std::string> ReadLock(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxLockBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxLockBytes || !text.starts_with(kLockMagic)) return std::nullopt;
  return text;
}

std::string DataDirOf(const std::string& lock) {
  const std::string_view rest = std::string_view(lock).substr(kLockMagic.size());
  if (!rest.starts_with(kDataDirField) || !rest.ends_with('\n')) return "";
  return std::string(rest.substr(kDataDirField.size(), rest.size() - kDataDirField.size() - 1));
}

using FileId = std::tuple<unsigned, unsigned, uint64_t>;  // Device major, minor, inode.

// Who holds a flock on which file, from /proc/locks ("1: FLOCK  ADVISORY  WRITE 1234
// 00:19:5678 0 EOF"; waiters are marked "->" and hold nothing).
Result<std::map<FileId, int>> FlockHolders() {
  std::ifstream in("/proc/locks");
  if (!in) {
    return Status::Unavailable(std::string("cannot read /proc/locks (which arenas are in use): ") +
                               std::strerror(errno));
  }
  std::map<FileId, int> holders;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string number, kind, advisory, mode, file;
    int pid = 0;
    if (!(fields >> number >> kind) || kind != "FLOCK") continue;
    if (!(fields >> advisory >> mode >> pid >> file)) continue;
    unsigned major = 0, minor = 0;
    unsigned long long inode = 0;
    if (std::sscanf(file.c_str(), "%x:%x:%llu", &major, &minor, &inode) == 3) {
      holders[{major, minor, inode}] = pid;
    }
  }
  return holders;
}

}  // namespace

std::string_view ArenaStateName(ArenaState state) {
  switch (state) {
    case ArenaState::kInUse: return "in use";
    case ArenaState::kStopped: return "stopped";
    case ArenaState::kOrphaned: return "orphaned";
    case ArenaState::kUnknownOwner: return "unknown owner";
  }
  return "?";
}

Result<std::vector<ArenaFiles>> ListArenas(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return Status::NotFound(dir + " does not exist");
    return Status::Unavailable("cannot list " + dir + ": " + ec.message());
  }
  std::map<std::string, std::vector<std::string>> files;  // By arena path.
  for (const fs::directory_entry& entry : it) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string arena = ArenaOf(entry.path().filename().string());
    if (!arena.empty()) files[(fs::path(dir) / arena).string()].push_back(entry.path().string());
  }
  Result<std::map<FileId, int>> holders = FlockHolders();
  if (!holders.ok()) return holders.status();

  std::vector<ArenaFiles> arenas;
  for (auto& [path, names] : files) {
    const std::string lock_path = path + ".lock";
    const std::optional<std::string> lock = ReadLock(lock_path);
    if (!lock && !(fs::path(path).filename().string().starts_with(kDefaultArenaPrefix) &&
                   IsHex16(fs::path(path).filename().string().substr(kDefaultArenaPrefix.size())))) {
      continue;  // Another program's files that happen to look alike.
    }
    ArenaFiles a;
    a.path = path;
    a.files = std::move(names);
    std::sort(a.files.begin(), a.files.end(), [&](const std::string& x, const std::string& y) {
      return std::make_pair(x == lock_path, x) < std::make_pair(y == lock_path, y);
    });
    for (const std::string& f : a.files) {
      struct stat st {};
      if (::stat(f.c_str(), &st) != 0) continue;
      a.bytes += uint64_t(st.st_blocks) * 512;
      if (f == lock_path) {
        auto held = holders->find({major(st.st_dev), minor(st.st_dev), uint64_t(st.st_ino)});
        if (held != holders->end()) a.holder_pid = held->second;
      }
    }
    if (lock) a.data_dir = DataDirOf(*lock);
    if (a.holder_pid != 0) {
      a.state = ArenaState::kInUse;
    } else if (a.data_dir.empty()) {
      a.state = ArenaState::kUnknownOwner;
    } else {
      // Anything but a clear "not there" (a directory we may not read) counts as there.
      const fs::file_status status = fs::status(a.data_dir, ec);
      a.state = status.type() == fs::file_type::not_found ? ArenaState::kOrphaned
                                                          : ArenaState::kStopped;
    }
    arenas.push_back(std::move(a));
  }
  return arenas;
}

Status RemoveArena(const ArenaFiles& arena) {
  const std::string lock_path = arena.path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT) {
    return Status::Unavailable("cannot open " + lock_path + ": " + std::strerror(errno));
  }
  if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Status::FailedPrecondition("the G2 arena " + arena.path +
                                        " is in use (a running kvtierd holds " + lock_path + ")");
    }
    return Status::Unavailable("cannot lock " + lock_path + ": " + std::strerror(err));
  }
  // Holding the lock, no kvtierd can start on these files while they go; the lock file goes
  // last, so that one starting afterwards creates a new one.
  Status status;
  for (const std::string& f : arena.files) {
    if (f == lock_path) continue;
    if (::unlink(f.c_str()) != 0 && errno != ENOENT && status.ok()) {
      status = Status::Unavailable("cannot remove " + f + ": " + std::strerror(errno));
    }
  }
  if (status.ok() && ::unlink(lock_path.c_str()) != 0 && errno != ENOENT) {
    status = Status::Unavailable("cannot remove " + lock_path + ": " + std::strerror(errno));
  }
  if (fd >= 0) ::close(fd);
  return status;
}

Status WriteArenaOwner(const std::string& arena_file, const std::string& data_dir, Env* env) {
  Result<std::unique_ptr<File>> file =
      env->OpenFile(arena_file + ".lock", FileOptions{.create = true, .truncate = true});
  if (!file.ok()) return file.status();
  std::string text(kLockMagic);
  if (!data_dir.empty()) text += std::string(kDataDirField) + data_dir + "\n";
  return (*file)->Write(0, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

}  // namespace kvtier
