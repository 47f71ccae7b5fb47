// PageRuns: a set of pages kept as disjoint, coalesced runs. Its memory follows the number of
// runs, not the number of pages it could hold: G2 tracks which of a tenant's pages hold memory
// with one, where a bit per page of the whole capacity would cost 32 MiB per tenant of a
// 1 TiB G2 whatever it stores.
//
// Not thread-safe: the owner serialises calls.

#ifndef KVTIER_COMMON_PAGE_RUNS_H_
#define KVTIER_COMMON_PAGE_RUNS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/container/btree_map.h"
#include "src/common/extent_allocator.h"

namespace kvtier {

class PageRuns {
 public:
  // Adds the pages of `x`; returns how many of them were not in the set.
  uint32_t Add(const Extent& x);
  // Removes the pages of `x` (those in the set); returns how many were.
  uint32_t Remove(const Extent& x);

  // Calls fn(extent) for each run of pages in both the set and `x`, in page order. `fn` must
  // not change the set.
  template <typename Fn>
  void ForEachIn(const Extent& x, Fn fn) const {
    const uint64_t end = uint64_t{x.first_page} + x.num_pages;
    auto it = runs_.upper_bound(x.first_page);
    if (it != runs_.begin()) --it;
    for (; it != runs_.end() && it->first < end; ++it) {
      const uint64_t from = std::max<uint64_t>(it->first, x.first_page);
      const uint64_t to = std::min<uint64_t>(uint64_t{it->first} + it->second, end);
      if (from < to) fn(Extent{static_cast<uint32_t>(from), static_cast<uint32_t>(to - from)});
    }
  }

  uint64_t pages() const { return pages_; }
  size_t runs() const { return runs_.size(); }

 private:
  absl::btree_map<uint32_t, uint32_t> runs_;  // First page -> length; disjoint, not adjacent.
  uint64_t pages_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_PAGE_RUNS_H_
