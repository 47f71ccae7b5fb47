#include "src/common/extent_allocator.h"

#include <iterator>

namespace kvtier {
namespace {
// Per free run in each B-tree: the 8-byte value at the 3/4 fill that random inserts and
// erases settle at, plus node headers.
constexpr size_t kBtreeBytesPerRun = 12;
}  // namespace

ExtentAllocator::ExtentAllocator(uint32_t total_pages)
    : total_pages_(total_pages), free_pages_(0) {
  if (total_pages > 0) InsertFree(0, total_pages);
}

void ExtentAllocator::InsertFree(uint32_t first, uint32_t count) {
  by_start_.emplace(first, count);
  by_size_.emplace(count, first);
  free_pages_ += count;
}

void ExtentAllocator::EraseFree(absl::btree_map<uint32_t, uint32_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_pages_ -= it->second;
  by_start_.erase(it);
}

bool ExtentAllocator::Allocate(uint32_t pages, std::vector<Extent>* out) {
  if (pages == 0 || pages > free_pages_) return false;
  auto fit = by_size_.lower_bound({pages, 0});
  if (fit != by_size_.end()) {
    // Best fit: the smallest run that holds the whole request, lowest address among equals.
    auto [len, first] = *fit;
    EraseFree(by_start_.find(first));
    if (len > pages) InsertFree(first + pages, len - pages);
    out->push_back({first, pages});
    return true;
  }
  // No single run is large enough: take the largest runs until the request is covered.
  uint32_t remaining = pages;
  while (remaining > 0) {
    auto [len, first] = *std::prev(by_size_.end());
    EraseFree(by_start_.find(first));
    uint32_t take = len < remaining ? len : remaining;
    if (len > take) InsertFree(first + take, len - take);
    out->push_back({first, take});
    remaining -= take;
  }
  return true;
}

bool ExtentAllocator::Claim(const Extent& extent) {
  const uint64_t end = uint64_t{extent.first_page} + extent.num_pages;
  auto it = by_start_.upper_bound(extent.first_page);
  if (it == by_start_.begin()) return false;
  --it;  // The free run starting at or before the extent.
  const auto [first, len] = *it;
  if (uint64_t{first} + len < end) return false;
  EraseFree(it);
  if (first < extent.first_page) InsertFree(first, extent.first_page - first);
  if (uint64_t{first} + len > end) {
    InsertFree(static_cast<uint32_t>(end), static_cast<uint32_t>(uint64_t{first} + len - end));
  }
  return true;
}

void ExtentAllocator::Free(const Extent& extent) {
  uint32_t first = extent.first_page;
  uint32_t count = extent.num_pages;
  // B-tree erases invalidate iterators, so each neighbour is looked up afresh.
  auto next = by_start_.find(first + count);
  if (next != by_start_.end()) {
    count += next->second;
    EraseFree(next);
  }
  auto after = by_start_.lower_bound(first);
  if (after != by_start_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == first) {
      first = prev->first;
      count += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(first, count);
}

uint32_t ExtentAllocator::largest_free_run() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

size_t ExtentAllocator::MemoryUsage() const { return 2 * by_start_.size() * kBtreeBytesPerRun; }

}  // namespace kvtier
