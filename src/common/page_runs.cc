#include "src/common/page_runs.h"

#include <iterator>
#include <vector>

namespace kvtier {

uint32_t PageRuns::Remove(const Extent& x) {
  std::vector<Extent> in;
  ForEachIn(x, [&in](const Extent& part) { in.push_back(part); });
  uint32_t removed = 0;
  for (const Extent& part : in) {
    // The run holding `part` starts at or before it; cut `part` out, keeping both ends.
    auto it = std::prev(runs_.upper_bound(part.first_page));
    const uint32_t first = it->first;
    const uint64_t end = uint64_t{first} + it->second;
    const uint64_t part_end = uint64_t{part.first_page} + part.num_pages;
    runs_.erase(it);
    if (first < part.first_page) runs_.emplace(first, part.first_page - first);
    if (part_end < end) {
      runs_.emplace(static_cast<uint32_t>(part_end), static_cast<uint32_t>(end - part_end));
    }
    removed += part.num_pages;
  }
  pages_ -= removed;
  return removed;
}

uint32_t PageRuns::Add(const Extent& x) {
  if (x.num_pages == 0) return 0;
  const uint32_t already = Remove(x);
  uint32_t first = x.first_page;
  uint32_t count = x.num_pages;
  // Coalesce with the runs that now end where `x` starts and start where it ends.
  const uint64_t end = uint64_t{first} + count;
  auto next = end <= UINT32_MAX ? runs_.find(static_cast<uint32_t>(end)) : runs_.end();
  if (next != runs_.end()) {
    count += next->second;
    runs_.erase(next);
  }
  auto after = runs_.lower_bound(first);
  if (after != runs_.begin()) {
    auto prev = std::prev(after);
    if (uint64_t{prev->first} + prev->second == first) {
      first = prev->first;
      count += prev->second;
      runs_.erase(prev);
    }
  }
  runs_.emplace(first, count);
  pages_ += x.num_pages;
  return x.num_pages - already;
}

}  // namespace kvtier
