#include "src/policy/ghost_filter.h"

#include <algorithm>
#include <utility>

namespace kvtier {
namespace {
constexpr size_t kMinGenerationEntries = 32;

constexpr uint32_t kTagMask = (uint32_t{1} << 24) - 1;

// The fingerprint's low 24 bits, never 0 (an empty slot). Home() takes its high bits.
uint32_t Tag(uint64_t fingerprint) {
  const uint32_t tag = static_cast<uint32_t>(fingerprint) & kTagMask;
  return tag == 0 ? 1 : tag;
}
}  // namespace

void GhostFilter::Generation::Reset(size_t new_capacity) {
  capacity = new_capacity;
  count = 0;
  // Load factor at most 3/4 keeps linear probes short (a 4-byte slot: a probe run of eight
  // slots is half a cache line).
  slots.assign(new_capacity + new_capacity / 3 + 1, 0);
}

size_t GhostFilter::Generation::Home(uint64_t fingerprint) const {
  // The fingerprint's high bits scaled to the table's size (Lemire's multiply-shift).
  return static_cast<size_t>(
      (static_cast<unsigned __int128>(fingerprint) * slots.size()) >> 64);
}

size_t GhostFilter::Generation::Probe(uint64_t fingerprint) const {
  const uint32_t tag = Tag(fingerprint);
  size_t i = Home(fingerprint);
  while (slots[i] != 0 && (slots[i] & kTagMask) != tag) i = (i + 1 == slots.size()) ? 0 : i + 1;
  return i;
}

const uint32_t* GhostFilter::Generation::Find(uint64_t fingerprint) const {
  if (slots.empty()) return nullptr;
  const size_t i = Probe(fingerprint);
  return slots[i] == 0 ? nullptr : &slots[i];
}

void GhostFilter::Generation::Insert(uint64_t fingerprint, uint8_t value) {
  const size_t i = Probe(fingerprint);
  if (slots[i] != 0) return;  // Remembered already: keeps its value.
  slots[i] = uint32_t{value} << 24 | Tag(fingerprint);
  ++count;
}

void GhostFilter::Insert(uint64_t fingerprint, size_t target_entries, uint8_t value) {
  if (current_.slots.empty() || current_.count >= current_.capacity) {
    previous_ = std::move(current_);
    current_ = Generation();
    current_.Reset(std::max(kMinGenerationEntries, target_entries / 2));
  }
  current_.Insert(fingerprint, value);
}

std::optional<uint8_t> GhostFilter::Find(uint64_t fingerprint) const {
  const uint32_t* slot = current_.Find(fingerprint);
  if (slot == nullptr) slot = previous_.Find(fingerprint);
  if (slot == nullptr) return std::nullopt;
  return static_cast<uint8_t>(*slot >> 24);
}

size_t GhostFilter::MemoryUsage() const {
  return (current_.slots.capacity() + previous_.slots.capacity()) * sizeof(uint32_t);
}

}  // namespace kvtier
