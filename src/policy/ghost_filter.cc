#include "src/policy/ghost_filter.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace kvtier {
namespace {
constexpr size_t kMinGenerationEntries = 32;

constexpr uint64_t kFingerprintMask = (uint64_t{1} << 56) - 1;

// The low 56 bits of the fingerprint, never 0 (an empty slot).
uint64_t Fingerprint56(uint64_t fp) {
  fp &= kFingerprintMask;
  return fp == 0 ? 1 : fp;
}
}  // namespace

void GhostFilter::Generation::Reset(size_t new_capacity) {
  capacity = new_capacity;
  count = 0;
  // Load factor at most 1/2 keeps linear probes short.
  slots.assign(std::bit_ceil(2 * new_capacity), 0);
}

const uint64_t* GhostFilter::Generation::Find(uint64_t fp56) const {
  if (slots.empty()) return nullptr;
  const size_t mask = slots.size() - 1;
  for (size_t i = fp56 & mask;; i = (i + 1) & mask) {
    if ((slots[i] & kFingerprintMask) == fp56) return &slots[i];
    if (slots[i] == 0) return nullptr;
  }
}

void GhostFilter::Generation::Insert(uint64_t slot) {
  const size_t mask = slots.size() - 1;
  const uint64_t fp56 = slot & kFingerprintMask;
  for (size_t i = fp56 & mask;; i = (i + 1) & mask) {
    if ((slots[i] & kFingerprintMask) == fp56) return;
    if (slots[i] == 0) {
      slots[i] = slot;
      ++count;
      return;
    }
  }
}

void GhostFilter::Insert(uint64_t fingerprint, size_t target_entries, uint8_t value) {
  if (current_.slots.empty() || current_.count >= current_.capacity) {
    previous_ = std::move(current_);
    current_ = Generation();
    current_.Reset(std::max(kMinGenerationEntries, target_entries / 2));
  }
  current_.Insert(uint64_t{value} << 56 | Fingerprint56(fingerprint));
}

std::optional<uint8_t> GhostFilter::Find(uint64_t fingerprint) const {
  const uint64_t fp56 = Fingerprint56(fingerprint);
  const uint64_t* slot = current_.Find(fp56);
  if (slot == nullptr) slot = previous_.Find(fp56);
  if (slot == nullptr) return std::nullopt;
  return static_cast<uint8_t>(*slot >> 56);
}

size_t GhostFilter::MemoryUsage() const {
  return (current_.slots.capacity() + previous_.slots.capacity()) * sizeof(uint64_t);
}

}  // namespace kvtier
