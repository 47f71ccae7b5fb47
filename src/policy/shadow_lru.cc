#include "src/policy/shadow_lru.h"

#include <algorithm>
#include <bit>

namespace kvtier {

ShadowLru::ShadowLru(size_t max_sampled)
    : max_sampled_(std::max<size_t>(max_sampled, 1)),
      nodes_(max_sampled_),
      index_(std::bit_ceil(2 * max_sampled_), kNone) {
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].next = i + 1 < nodes_.size() ? i + 1 : kNone;
  }
  free_ = 0;
}

ShadowLru::Served ShadowLru::Lookup(std::span<const uint64_t> hashes, size_t found,
                                    uint64_t cache_blocks) {
  // The rate that keeps the LRU within max_sampled_ keys; it only ever falls.
  const auto rate = [this] { return static_cast<double>(threshold_) * 0x1.0p-64; };
  bool fell = false;
  while (threshold_ > 1 &&
         static_cast<double>(cache_blocks) * rate() > static_cast<double>(max_sampled_)) {
    threshold_ >>= 1;
    fell = true;
  }
  capacity_ = std::clamp<size_t>(static_cast<size_t>(static_cast<double>(cache_blocks) * rate()),
                                 1, max_sampled_);
  if (fell) {
    for (uint32_t n = head_; n != kNone;) {
      const uint32_t next = nodes_[n].next;
      if (!Followed(nodes_[n].hash)) Remove(n);
      n = next;
    }
  }
  while (size_ > capacity_) Remove(head_);
  Served served;
  bool prefix = true;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint64_t h = hashes[i];
    if (!Followed(h)) continue;
    ++served.sampled;
    const uint32_t n = index_[SlotOf(h)];
    prefix = prefix && n != kNone;
    if (prefix) ++served.lru;
    if (i < found) ++served.cache;
    if (n != kNone) {
      Unlink(n);
      PushBack(n);
      continue;
    }
    if (size_ == capacity_) Remove(head_);
    const uint32_t fresh = free_;
    free_ = nodes_[fresh].next;
    nodes_[fresh].hash = h;
    index_[SlotOf(h)] = fresh;
    PushBack(fresh);
    ++size_;
  }
  return served;
}

void ShadowLru::Erase(uint64_t hash) {
  if (!Followed(hash)) return;
  if (const uint32_t n = index_[SlotOf(hash)]; n != kNone) Remove(n);
}

size_t ShadowLru::SlotOf(uint64_t hash) const {
  const size_t mask = index_.size() - 1;
  for (size_t i = Home(hash); ; i = (i + 1) & mask) {
    if (index_[i] == kNone || nodes_[index_[i]].hash == hash) return i;
  }
}

void ShadowLru::Unlink(uint32_t n) {
  Node& node = nodes_[n];
  (node.prev != kNone ? nodes_[node.prev].next : head_) = node.next;
  (node.next != kNone ? nodes_[node.next].prev : tail_) = node.prev;
  node.prev = node.next = kNone;
}

void ShadowLru::PushBack(uint32_t n) {
  nodes_[n].prev = tail_;
  nodes_[n].next = kNone;
  (tail_ != kNone ? nodes_[tail_].next : head_) = n;
  tail_ = n;
}

void ShadowLru::Remove(uint32_t n) {
  Unlink(n);
  // Backward-shift deletion keeps every probe sequence unbroken.
  const size_t mask = index_.size() - 1;
  size_t hole = SlotOf(nodes_[n].hash);
  for (size_t i = (hole + 1) & mask; index_[i] != kNone; i = (i + 1) & mask) {
    const size_t home = Home(nodes_[index_[i]].hash);
    // Move the entry back into the hole unless its home lies cyclically in (hole, i].
    if (((i - home) & mask) >= ((i - hole) & mask)) {
      index_[hole] = index_[i];
      hole = i;
    }
  }
  index_[hole] = kNone;
  nodes_[n].next = free_;
  free_ = n;
  --size_;
}

size_t ShadowLru::MemoryUsage() const {
  return nodes_.capacity() * sizeof(Node) + index_.capacity() * sizeof(uint32_t);
}

}  // namespace kvtier
