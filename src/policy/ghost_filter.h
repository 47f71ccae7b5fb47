// GhostFilter: a ghost list for G2 eviction. It remembers the fingerprints of roughly the last
// N keys evicted, so that a key coming back soon after eviction is recognised (and the
// eviction policy learns from it).
//
// Two generations of open-addressed fingerprint sets: inserts go to the current one; when it
// holds N/2 entries it becomes the previous one and the old previous is dropped. Membership is
// "in either", so between N/2 and N recent keys are remembered, at 16 bytes per remembered key
// plus no per-entry allocation. A fingerprint collision only mistakes a new key for a return.
//
// Not thread-safe: the owner serialises calls.

#ifndef KVTIER_POLICY_GHOST_FILTER_H_
#define KVTIER_POLICY_GHOST_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier {

class GhostFilter {
 public:
  // Remember about `target_entries` keys; the target may change on every insert.
  void Insert(uint64_t fingerprint, size_t target_entries);
  bool Contains(uint64_t fingerprint) const;
  // Keys remembered now.
  size_t size() const { return current_.count + previous_.count; }
  size_t MemoryUsage() const;

 private:
  struct Generation {
    std::vector<uint64_t> slots;  // 0 = empty; size is a power of two.
    size_t count = 0;
    size_t capacity = 0;          // Entries before the generation is full.
    void Reset(size_t new_capacity);
    bool Contains(uint64_t fp) const;
    void Insert(uint64_t fp);
  };

  Generation current_;
  Generation previous_;
};

}  // namespace kvtier

#endif  // KVTIER_POLICY_GHOST_FILTER_H_
