// Arena: G2's shared memory, one region per tenant, each region its own file: an anonymous
// memfd, or a named file on tmpfs or hugetlbfs (which outlives the process, for warm
// restarts). The regions are mapped side by side in one reservation of this process's address
// space. They are sparse: a page takes memory from when it is first written (or Back) until it
// is discarded, so the regions together never hold more than what their owner allocates.
//
// A region's read-only descriptor can be passed to another process (SCM_RIGHTS). That process
// then maps this region's pages and no other region's, and cannot change them: a mapping for
// writing, a write, a truncation or an fallocate through it is refused by the kernel. This is
// how same-host clients read their own tenant's G2 blocks without a copy and nobody else's.

#ifndef KVTIER_COMMON_ARENA_H_
#define KVTIER_COMMON_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

// The memory this process can have: the machine's physical memory, or less where its cgroup
// (v2 memory.max, of its own cgroup or an ancestor) limits it. *source says which, for errors.
uint64_t UsableMemoryBytes(std::string* source);

// Why an arena at `file` ("" = a memfd) will sit on 4 KiB pages, and what would change that,
// for the start-up log; "" when it can have huge pages: a file on hugetlbfs, or transparent
// huge pages for shared memory (/sys/kernel/mm/transparent_hugepage/shmem_enabled for a
// memfd, the tmpfs mount's huge= option for a file there).
std::string SmallPagesReason(const std::string& file);

// Thread-safe: immutable after Create; the bytes themselves are the caller's to coordinate.
class Arena {
 public:
  // Creates `regions` memfds of `region_bytes` each and maps them.
  static Result<std::unique_ptr<Arena>> Create(size_t regions, uint64_t region_bytes);
  // Maps `paths[i]` as region i, each created with mode 0600 when absent. With `keep`, the
  // bytes already there are kept (those past `region_bytes` are cut off, new ones read as
  // zeros); otherwise each file is emptied first, which gives tmpfs its pages back. The caller
  // keeps other processes out (a lock beside the files).
  static Result<std::unique_ptr<Arena>> OpenFiles(const std::vector<std::string>& paths,
                                                  uint64_t region_bytes, bool keep);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  size_t regions() const { return regions_.size(); }
  uint64_t region_bytes() const { return region_bytes_; }
  std::byte* base(size_t region) const { return base_ + region * region_bytes_; }
  // The region's read-write descriptor; owned by the arena.
  int fd(size_t region) const { return regions_[region].fd; }
  // A descriptor of the region opened read-only; owned by the arena.
  int read_only_fd(size_t region) const { return regions_[region].read_only_fd; }
  // Bytes of memory the region's file holds now.
  uint64_t BackedBytes(size_t region) const;

  // Takes the memory for [offset, offset + length) of `region` now (fallocate) and maps it
  // here, rather than at the first write: ResourceExhausted when the file system lacks the
  // room, where a write would fault (SIGBUS) instead. REQUIRES: page-aligned.
  Status Back(size_t region, uint64_t offset, uint64_t length) const;
  // Gives the memory of [offset, offset + length) of `region` back; the bytes read as zeros
  // afterwards, in every process that maps the region.
  void Discard(size_t region, uint64_t offset, uint64_t length) const;

 private:
  struct Region {
    int fd = -1;
    int read_only_fd = -1;
  };
  Arena(std::byte* base, uint64_t region_bytes) : base_(base), region_bytes_(region_bytes) {}
  // Reserves the address space for `count` regions.
  static Result<std::unique_ptr<Arena>> Reserve(size_t count, uint64_t region_bytes);
  // Sizes `fd` (which the arena then owns) and maps it as the next region; `what` names it.
  Status AddRegion(int fd, const std::string& what);

  std::byte* const base_;
  const uint64_t region_bytes_;
  size_t reserved_ = 0;  // Regions the address space was reserved for.
  std::vector<Region> regions_;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_ARENA_H_
