// ExtentAllocator: hands out runs of whole pages of a fixed-size region.
//
// A request is served by the best-fitting single free run when one exists; otherwise it is
// assembled from several runs, largest first. So a request succeeds whenever enough pages are
// free in total: fragmentation costs extra pieces per block, never capacity. Freed runs
// coalesce with their neighbours.
//
// Not thread-safe: the owner serialises calls.

#ifndef KVTIER_COMMON_EXTENT_ALLOCATOR_H_
#define KVTIER_COMMON_EXTENT_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"

namespace kvtier {

struct Extent {
  uint32_t first_page = 0;
  uint32_t num_pages = 0;
  friend bool operator==(const Extent&, const Extent&) = default;
};

class ExtentAllocator {
 public:
  explicit ExtentAllocator(uint32_t total_pages);

  // Appends the extents of a `pages`-page allocation to `out` and returns true, or returns
  // false without changing anything when fewer than `pages` pages are free. REQUIRES: pages > 0.
  bool Allocate(uint32_t pages, std::vector<Extent>* out);

  // REQUIRES: every extent was handed out by Allocate (or Claim) and is not already free.
  void Free(const Extent& extent);

  // Takes exactly the pages of `extent` (adopting blocks whose place is already known) and
  // returns true, or returns false without changing anything when any of them is not free or
  // lies past the end. REQUIRES: extent.num_pages > 0.
  bool Claim(const Extent& extent);

  uint32_t total_pages() const { return total_pages_; }
  uint32_t free_pages() const { return free_pages_; }
  uint32_t largest_free_run() const;
  size_t free_runs() const { return by_start_.size(); }
  // Calls fn(extent) for each free run, in page order.
  template <typename Fn>
  void ForEachFreeRun(Fn fn) const {
    for (const auto& [first, count] : by_start_) fn(Extent{first, count});
  }
  // Approximate heap bytes of the free map (B-tree nodes at typical fill).
  size_t MemoryUsage() const;

 private:
  void InsertFree(uint32_t first, uint32_t count);
  void EraseFree(absl::btree_map<uint32_t, uint32_t>::iterator it);

  const uint32_t total_pages_;
  uint32_t free_pages_;
  // B-trees: about 10 bytes per free run each, against 56 for a red-black tree node.
  absl::btree_map<uint32_t, uint32_t> by_start_;            // first page -> run length
  absl::btree_set<std::pair<uint32_t, uint32_t>> by_size_;  // (run length, first page)
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_EXTENT_ALLOCATOR_H_
