#include "src/policy/ghost_filter.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace kvtier {
namespace {
constexpr size_t kMinGenerationEntries = 32;

uint64_t NonZero(uint64_t fp) { return fp == 0 ? 1 : fp; }
}  // namespace

void GhostFilter::Generation::Reset(size_t new_capacity) {
  capacity = new_capacity;
  count = 0;
  // Load factor at most 1/2 keeps linear probes short.
  slots.assign(std::bit_ceil(2 * new_capacity), 0);
}

bool GhostFilter::Generation::Contains(uint64_t fp) const {
  if (slots.empty()) return false;
  const size_t mask = slots.size() - 1;
  for (size_t i = fp & mask;; i = (i + 1) & mask) {
    if (slots[i] == fp) return true;
    if (slots[i] == 0) return false;
  }
}

void GhostFilter::Generation::Insert(uint64_t fp) {
  const size_t mask = slots.size() - 1;
  for (size_t i = fp & mask;; i = (i + 1) & mask) {
    if (slots[i] == fp) return;
    if (slots[i] == 0) {
      slots[i] = fp;
      ++count;
      return;
    }
  }
}

void GhostFilter::Insert(uint64_t fingerprint, size_t target_entries) {
  const uint64_t fp = NonZero(fingerprint);
  if (current_.slots.empty() || current_.count >= current_.capacity) {
    previous_ = std::move(current_);
    current_ = Generation();
    current_.Reset(std::max(kMinGenerationEntries, target_entries / 2));
  }
  current_.Insert(fp);
}

bool GhostFilter::Contains(uint64_t fingerprint) const {
  const uint64_t fp = NonZero(fingerprint);
  return current_.Contains(fp) || previous_.Contains(fp);
}

size_t GhostFilter::MemoryUsage() const {
  return (current_.slots.capacity() + previous_.slots.capacity()) * sizeof(uint64_t);
}

}  // namespace kvtier
