// ShadowLru: what an LRU cache of the same size would have served, on a spatial sample of the
// keys (SHARDS, Waldspurger et al., FAST'15): a key is followed when its hash is below a
// threshold, and an LRU of (the cache's blocks x the sampling rate) entries holds the followed
// keys. The threshold halves whenever that LRU would hold more than `max_sampled` keys, so its
// memory stays bounded while the cache grows; a cache of up to `max_sampled` blocks is followed
// whole.
//
// It answers prefix lookups as the cache does: a followed key counts as served when it and
// every followed key before it in the lookup are in the LRU, the reference's own policy
// (the Drive loop of tools/planning/reference_policies.cc) accessing each key in order.
//
// Fixed memory, no allocation after construction: the keys live in a pool threaded by the LRU
// order, found through an open-addressed index.
//
// Not thread-safe: the owner serialises calls.

#ifndef KVTIER_POLICY_SHADOW_LRU_H_
#define KVTIER_POLICY_SHADOW_LRU_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvtier {

class ShadowLru {
 public:
  explicit ShadowLru(size_t max_sampled = 4096);

  struct Served {
    uint32_t sampled = 0;  // Followed keys in the lookup.
    uint32_t lru = 0;      // Of those, served by the LRU as part of the prefix.
    uint32_t cache = 0;    // Of those, within the `found` the cache served.
  };
  // A prefix lookup of the keys hashing to `hashes`, of which the cache served the first
  // `found`, when it holds `cache_blocks` blocks; then each key is accessed (an engine stores
  // what it did not find).
  Served Lookup(std::span<const uint64_t> hashes, size_t found, uint64_t cache_blocks);

  // The key is gone for any cache (expired, deleted): the LRU forgets it too.
  void Erase(uint64_t hash);

  // The LRU's capacity in followed keys, at the last lookup.
  size_t capacity() const { return capacity_; }
  size_t size() const { return size_; }
  size_t MemoryUsage() const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t hash = 0;
    uint32_t prev = kNone;
    uint32_t next = kNone;  // Doubles as the free list's link.
  };

  bool Followed(uint64_t hash) const { return hash <= threshold_; }
  // The followed hashes are the small ones, their high bits zero: mixed before masking.
  size_t Home(uint64_t hash) const {
    return static_cast<size_t>((hash * 0x9e3779b97f4a7c15ULL) >> 32) & (index_.size() - 1);
  }
  // The index slot holding `hash`, or the empty slot where it would go.
  size_t SlotOf(uint64_t hash) const;
  void Unlink(uint32_t node);
  void PushBack(uint32_t node);
  // Removes the node from the LRU, the index and into the free list.
  void Remove(uint32_t node);

  size_t max_sampled_;
  uint64_t threshold_ = UINT64_MAX;
  size_t capacity_ = 1;
  size_t size_ = 0;
  std::vector<Node> nodes_;       // max_sampled_ of them.
  uint32_t free_ = kNone;
  uint32_t head_ = kNone;         // Least recent.
  uint32_t tail_ = kNone;
  std::vector<uint32_t> index_;   // Node numbers; kNone = empty. Size: a power of two.
};

}  // namespace kvtier

#endif  // KVTIER_POLICY_SHADOW_LRU_H_
