#include "src/common/arena.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

namespace kvtier {

namespace {

// The bracketed choice of a /sys setting such as "always [advise] never"; "" when unreadable.
std::string Chosen(const char* setting) {
  std::ifstream in(setting);
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1) : "";
}

// The huge= option of the tmpfs mount holding `dir` ("never" when absent, tmpfs's default);
// "" when `dir` is not on tmpfs.
std::string TmpfsHuge(const std::string& dir) {
  std::ifstream in("/proc/self/mounts");
  std::string device, point, type, options, best_point, best;
  while (in >> device >> point >> type >> options) {
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    const bool inside = dir == point || point == "/" ||
                        (dir.starts_with(point) && dir[point.size()] == '/');
    if (!inside || point.size() < best_point.size()) continue;
    best_point = point;
    best.clear();
    if (type != "tmpfs") continue;
    best = "never";
    if (const size_t at = options.find("huge="); at != std::string::npos) {
      const size_t end = options.find(',', at);
      best = options.substr(at + 5, end == std::string::npos ? std::string::npos : end - at - 5);
    }
  }
  return best;
}

}  // namespace

std::string SmallPagesReason(const std::string& file) {
  const std::string dir = std::filesystem::path(file).parent_path().string();
  struct statfs fs {};
  if (!file.empty() && statfs(dir.c_str(), &fs) == 0 &&
      fs.f_type == static_cast<decltype(fs.f_type)>(HUGETLBFS_MAGIC)) {
    return "";
  }
  const char* knob = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
  const std::string shmem = Chosen(knob);
  if (shmem.empty() || shmem == "force") return "";  // No transparent huge pages, or forced.
  if (shmem == "deny") return std::string(knob) + " is deny";
  if (file.empty()) {
    return shmem == "never" ? std::string(knob) + " is never; set it to advise" : "";
  }
  const std::string huge = TmpfsHuge(dir);
  return huge == "never" ? "the tmpfs holding " + file + " is mounted without huge pages " +
                               "(huge=never); remount it with huge=advise"
                         : "";
}

uint64_t UsableMemoryBytes(std::string* source) {
  uint64_t bytes = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
  *source = "physical memory";
  // The smallest limit on the way from the process's cgroup up to the hierarchy's root:
  // cgroup v2's memory.max ("0::/path" in /proc/self/cgroup), v1's memory.limit_in_bytes
  // ("N:memory:/path"). Directories that are not there (another cgroup namespace) are skipped.
  auto lowest_limit = [&](std::filesystem::path root, const std::string& path, const char* file) {
    std::filesystem::path dir = root / std::filesystem::path(path).relative_path();
    for (;; dir = dir.parent_path()) {
      std::ifstream in(dir / file);
      uint64_t limit = 0;
      if (in >> limit && limit < bytes) {
        bytes = limit;
        *source = (dir / file).string();
      }
      if (dir == root || !dir.has_parent_path() || dir == dir.parent_path()) break;
    }
  };
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    const size_t colon = line.find(':');
    const size_t second = line.find(':', colon + 1);
    if (colon == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = "," + line.substr(colon + 1, second - colon - 1) + ",";
    const std::string path = line.substr(second + 1);
    if (controllers == ",,") {
      lowest_limit("/sys/fs/cgroup", path, "memory.max");
    } else if (controllers.find(",memory,") != std::string::npos) {
      lowest_limit("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes");
    }
  }
  return bytes;
}

Result<std::unique_ptr<Arena>> Arena::Reserve(size_t count, uint64_t region_bytes) {
  if (count == 0 || region_bytes == 0) return Status::InvalidArgument("arena size is 0");
  if (region_bytes > UINT64_MAX / count) return Status::InvalidArgument("arena too large");
  // Address space only: each region is mapped over its part of it.
  void* p = mmap(nullptr, count * region_bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    // Each tenant's region spans the whole capacity (any tenant may fill G2), so tenants times
    // capacity must fit in the process's address space (128 TiB on x86-64 with 4-level paging).
    return Status::ResourceExhausted(
        "reserving " + std::to_string(count * region_bytes) +
        " bytes of address space for the G2 arena failed (" + std::strerror(errno) + "): " +
        std::to_string(count) + " tenants' regions of " + std::to_string(region_bytes) +
        " bytes each (every region spans memory.capacity); the kernel gives a process about "
        "128 TiB (2^47 bytes) of address space, so tenants x memory.capacity must stay under "
        "it: configure fewer tenants or a smaller memory.capacity");
  }
  std::unique_ptr<Arena> arena(new Arena(static_cast<std::byte*>(p), region_bytes));
  arena->reserved_ = count;
  arena->regions_.reserve(count);
  return arena;
}

Status Arena::AddRegion(int fd, const std::string& what) {
  if (ftruncate(fd, static_cast<off_t>(region_bytes_)) != 0) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("sizing " + what + " to " + std::to_string(region_bytes_) +
                                     " bytes: " + std::strerror(err));
  }
  // The read-only descriptor is a second open of the same file, so the kernel checks every
  // use of it against O_RDONLY.
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  int ro = open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) {
    int err = errno;
    close(fd);
    return Status::Unavailable("opening " + what + " read-only through " + self + ": " +
                               std::strerror(err) + " (is /proc mounted?)");
  }
  std::byte* at = base(regions_.size());
  // MAP_NORESERVE: a hugetlbfs file would otherwise reserve every huge page of the region at
  // once; pages are taken as blocks are allocated instead (Back).
  void* p = mmap(at, region_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
                 fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(ro);
    close(fd);
    return Status::ResourceExhausted("mapping " + what + " of " + std::to_string(region_bytes_) +
                                     " bytes: " + std::strerror(err));
  }
  // Transparent huge pages cut TLB misses on 2 MiB-scale copies; advisory only.
  madvise(p, region_bytes_, MADV_HUGEPAGE);
  regions_.push_back({fd, ro});
  return Status::OK();
}

Result<std::unique_ptr<Arena>> Arena::Create(size_t regions, uint64_t region_bytes) {
  Result<std::unique_ptr<Arena>> arena = Reserve(regions, region_bytes);
  if (!arena.ok()) return arena.status();
  for (size_t i = 0; i < regions; ++i) {
    int fd = memfd_create("kvtier-g2", MFD_CLOEXEC);
    if (fd < 0) return Status::Internal(std::string("memfd_create: ") + std::strerror(errno));
    KVTIER_RETURN_IF_ERROR((*arena)->AddRegion(fd, "the G2 arena"));
  }
  return arena;
}

Result<std::unique_ptr<Arena>> Arena::OpenFiles(const std::vector<std::string>& paths,
                                                uint64_t region_bytes, bool keep) {
  Result<std::unique_ptr<Arena>> arena = Reserve(paths.size(), region_bytes);
  if (!arena.ok()) return arena.status();
  for (const std::string& path : paths) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      int err = errno;
      return (err == EACCES || err == EPERM ? Status::PermissionDenied : Status::Unavailable)(
          "opening the G2 arena file " + path + ": " + std::strerror(err));
    }
    if (!keep && ftruncate(fd, 0) != 0) {
      int err = errno;
      close(fd);
      return Status::Unavailable("emptying the G2 arena file " + path + ": " +
                                 std::strerror(err));
    }
    KVTIER_RETURN_IF_ERROR((*arena)->AddRegion(fd, "the G2 arena file " + path));
  }
  return arena;
}

uint64_t Arena::BackedBytes(size_t region) const {
  struct stat st{};
  if (fstat(regions_[region].fd, &st) != 0) return 0;
  return uint64_t(st.st_blocks) * 512;
}

Status Arena::Back(size_t region, uint64_t offset, uint64_t length) const {
  // Through the mapping (Linux 5.14+), so that the pages come as its advice asks: huge pages
  // where the kernel allows them for shared memory on MADV_HUGEPAGE (posix_fallocate alone
  // would take 4 KiB pages there), one call rather than a fault per page at the first write.
  // It fails cleanly (no SIGBUS) where memory is short; posix_fallocate then says why, and
  // backs the pages on older kernels.
  constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE, unnamed in older headers.
  if (madvise(base(region) + offset, length, kMadvPopulateWrite) == 0) return Status::OK();
  if (int err = posix_fallocate(regions_[region].fd, static_cast<off_t>(offset),
                                static_cast<off_t>(length));
      err != 0) {
    return Status::ResourceExhausted("taking " + std::to_string(length) +
                                     " bytes of memory for G2: " + std::strerror(err));
  }
  madvise(base(region) + offset, length, kMadvPopulateWrite);
  return Status::OK();
}

void Arena::Discard(size_t region, uint64_t offset, uint64_t length) const {
  // Cannot fail on tmpfs, hugetlbfs or a memfd for whole pages; if it did, the pages would
  // simply stay allocated.
  (void)fallocate(regions_[region].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(offset), static_cast<off_t>(length));
}

Arena::~Arena() {
  munmap(base_, reserved_ * region_bytes_);
  for (const Region& r : regions_) {
    close(r.read_only_fd);
    close(r.fd);
  }
}

}  // namespace kvtier
