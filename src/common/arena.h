// Arena: one memfd-backed shared-memory region. The fd can be passed to another process
// (SCM_RIGHTS) which maps the same pages, which is how same-host clients read G2 without a copy.

#ifndef KVTIER_COMMON_ARENA_H_
#define KVTIER_COMMON_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvtier/status.h"

namespace kvtier {

// Thread-safe: immutable after Create; the bytes themselves are the caller's to coordinate.
class Arena {
 public:
  // Creates and maps `size` bytes. With `prefault`, every page is touched up front.
  static Result<std::unique_ptr<Arena>> Create(uint64_t size, bool prefault);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::byte* base() const { return base_; }
  uint64_t size() const { return size_; }
  // The memfd; owned by the arena.
  int fd() const { return fd_; }

 private:
  Arena(int fd, std::byte* base, uint64_t size) : fd_(fd), base_(base), size_(size) {}
  int fd_;
  std::byte* base_;
  uint64_t size_;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_ARENA_H_
