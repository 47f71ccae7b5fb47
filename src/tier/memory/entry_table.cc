#include "src/tier/memory/entry_table.h"

namespace kvtier {
namespace {
constexpr size_t kInitialSlots = 1024;
}  // namespace

EntryTable::EntryTable() : slots_(kInitialSlots, kNil) {}

uint32_t EntryTable::NewEntry() {
  uint32_t index;
  if (free_head_ != kNil) {
    index = free_head_;
    free_head_ = at(index).next;
  } else {
    if ((next_unused_ & kChunkMask) == 0 && (next_unused_ >> kChunkShift) == chunks_.size()) {
      chunks_.push_back(std::make_unique<Entry[]>(kChunkSize));
    }
    index = next_unused_++;
  }
  at(index) = Entry();
  return index;
}

void EntryTable::FreeEntry(uint32_t index) {
  Entry& e = at(index);
  e.state = EntryState::kFree;
  e.next = free_head_;
  free_head_ = index;
}

size_t EntryTable::Home(uint32_t tenant, const BlockKey& key) const {
  uint64_t h = key.Hash64() ^ (static_cast<uint64_t>(tenant) * 0x9e3779b97f4a7c15ULL);
  return static_cast<size_t>(h) & (slots_.size() - 1);
}

uint32_t EntryTable::Find(uint32_t tenant, const BlockKey& key) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = Home(tenant, key);; i = (i + 1) & mask) {
    uint32_t idx = slots_[i];
    if (idx == kNil) return kNil;
    const Entry& e = at(idx);
    if (e.tenant == tenant && e.key == key) return idx;
  }
}

void EntryTable::Index(uint32_t index) {
  // Keep the load factor at or below 3/4 so probes stay short.
  if (4 * (indexed_ + 1) > 3 * slots_.size()) Grow();
  const Entry& e = at(index);
  const size_t mask = slots_.size() - 1;
  size_t i = Home(e.tenant, e.key);
  while (slots_[i] != kNil) i = (i + 1) & mask;
  slots_[i] = index;
  ++indexed_;
}

void EntryTable::Unindex(uint32_t index) {
  const Entry& e = at(index);
  const size_t mask = slots_.size() - 1;
  size_t i = Home(e.tenant, e.key);
  while (slots_[i] != index) i = (i + 1) & mask;
  // Backward-shift deletion: pull later members of the probe run into the hole so lookups
  // never need tombstones.
  for (size_t j = (i + 1) & mask; slots_[j] != kNil; j = (j + 1) & mask) {
    const Entry& m = at(slots_[j]);
    size_t home = Home(m.tenant, m.key);
    // The member at j may fill hole i only if its home is not in the cyclic range (i, j].
    bool home_in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
    if (!home_in_range) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = kNil;
  --indexed_;
}

void EntryTable::Grow() {
  std::vector<uint32_t> old = std::move(slots_);
  slots_.assign(old.size() * 2, kNil);
  const size_t mask = slots_.size() - 1;
  for (uint32_t idx : old) {
    if (idx == kNil) continue;
    const Entry& e = at(idx);
    size_t i = Home(e.tenant, e.key);
    while (slots_[i] != kNil) i = (i + 1) & mask;
    slots_[i] = idx;
  }
}

size_t EntryTable::MemoryUsage() const {
  return chunks_.size() * kChunkSize * sizeof(Entry) + slots_.capacity() * sizeof(uint32_t);
}

}  // namespace kvtier
