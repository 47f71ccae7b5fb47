#include "src/common/arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kvtier {

Result<std::unique_ptr<Arena>> Arena::Map(int fd, uint64_t size, bool prefault,
                                          const std::string& what) {
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("sizing " + what + " to " + std::to_string(size) +
                                     " bytes: " + std::strerror(err));
  }
  int flags = MAP_SHARED | (prefault ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("mapping " + what + " of " + std::to_string(size) +
                                     " bytes: " + std::strerror(err));
  }
  // Transparent huge pages cut TLB misses on 2 MiB-scale copies; advisory only.
  madvise(p, size, MADV_HUGEPAGE);
  return std::unique_ptr<Arena>(new Arena(fd, static_cast<std::byte*>(p), size));
}

Result<std::unique_ptr<Arena>> Arena::Create(uint64_t size, bool prefault) {
  if (size == 0) return Status::InvalidArgument("arena size is 0");
  int fd = memfd_create("kvtier-g2", MFD_CLOEXEC);
  if (fd < 0) return Status::Internal(std::string("memfd_create: ") + std::strerror(errno));
  return Map(fd, size, prefault, "the G2 arena");
}

Result<std::unique_ptr<Arena>> Arena::OpenFile(const std::string& path, uint64_t size, bool keep,
                                               bool prefault) {
  if (size == 0) return Status::InvalidArgument("arena size is 0");
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    return (err == EACCES || err == EPERM ? Status::PermissionDenied : Status::Unavailable)(
        "opening the G2 arena file " + path + ": " + std::strerror(err));
  }
  if (!keep && ftruncate(fd, 0) != 0) {
    int err = errno;
    close(fd);
    return Status::Unavailable("emptying the G2 arena file " + path + ": " + std::strerror(err));
  }
  // The pages are taken now: on a file system that fills up, a sparse mapping would fault
  // (SIGBUS) on the first write past what is left, long after start-up. Map then cuts off
  // what lies past `size`.
  if (int err = posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    close(fd);
    return Status::ResourceExhausted("reserving " + std::to_string(size) + " bytes for the G2 arena file " +
                                     path + ": " + std::strerror(err));
  }
  return Map(fd, size, prefault, "the G2 arena file " + path);
}

Arena::~Arena() {
  munmap(base_, size_);
  close(fd_);
}

}  // namespace kvtier
