// Arena: one shared-memory region, an anonymous memfd or a named file on tmpfs or hugetlbfs
// (which outlives the process, for warm restarts). The fd can be passed to another process
// (SCM_RIGHTS) which maps the same pages, which is how same-host clients read G2 without a copy.

#ifndef KVTIER_COMMON_ARENA_H_
#define KVTIER_COMMON_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

// Thread-safe: immutable after Create; the bytes themselves are the caller's to coordinate.
class Arena {
 public:
  // Creates and maps `size` bytes. With `prefault`, every page is touched up front.
  static Result<std::unique_ptr<Arena>> Create(uint64_t size, bool prefault);
  // Maps `size` bytes of the file at `path`, created with mode 0600 when absent. With `keep`,
  // the bytes already there are kept (those past `size` are cut off, new ones read as zeros);
  // otherwise the file is emptied first, which gives tmpfs its pages back. Every page is
  // reserved up front (fallocate): ResourceExhausted when the file system lacks the room. The
  // caller keeps other processes out (a lock beside the file).
  static Result<std::unique_ptr<Arena>> OpenFile(const std::string& path, uint64_t size,
                                                 bool keep, bool prefault);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::byte* base() const { return base_; }
  uint64_t size() const { return size_; }
  // The memfd or file; owned by the arena.
  int fd() const { return fd_; }

 private:
  Arena(int fd, std::byte* base, uint64_t size) : fd_(fd), base_(base), size_(size) {}
  // Sizes `fd` (which it then owns) and maps it; `what` names it in errors.
  static Result<std::unique_ptr<Arena>> Map(int fd, uint64_t size, bool prefault,
                                            const std::string& what);
  int fd_;
  std::byte* base_;
  uint64_t size_;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_ARENA_H_
