// GhostFilter: a ghost list for G2 eviction. It remembers the fingerprints of roughly the last
// N keys evicted, so that a key coming back soon after eviction is recognised (and the
// eviction policy learns from it), with a byte the policy keeps for each.
//
// Two generations of open-addressed fingerprint sets: inserts go to the current one; when it
// holds N/2 entries it becomes the previous one and the old previous is dropped. Membership is
// "in either", so between N/2 and N recent keys are remembered, at 16 bytes per remembered key
// plus no per-entry allocation. A slot holds 56 bits of the fingerprint and the byte. A
// fingerprint collision only mistakes a new key for a return.
//
// Not thread-safe: the owner serialises calls.

#ifndef KVTIER_POLICY_GHOST_FILTER_H_
#define KVTIER_POLICY_GHOST_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kvtier {

class GhostFilter {
 public:
  // Remember about `target_entries` keys; the target may change on every insert. `value` is
  // kept with the key (a key inserted again keeps its first value while remembered).
  void Insert(uint64_t fingerprint, size_t target_entries, uint8_t value = 0);
  bool Contains(uint64_t fingerprint) const { return Find(fingerprint).has_value(); }
  // The value remembered with the key, or nullopt.
  std::optional<uint8_t> Find(uint64_t fingerprint) const;
  // Keys remembered now.
  size_t size() const { return current_.count + previous_.count; }
  size_t MemoryUsage() const;

 private:
  struct Generation {
    std::vector<uint64_t> slots;  // 0 = empty; size is a power of two.
    size_t count = 0;
    size_t capacity = 0;          // Entries before the generation is full.
    void Reset(size_t new_capacity);
    // Slots hold (value << 56) | fingerprint's low 56 bits, never 0.
    const uint64_t* Find(uint64_t fp56) const;
    void Insert(uint64_t slot);
  };

  Generation current_;
  Generation previous_;
};

}  // namespace kvtier

#endif  // KVTIER_POLICY_GHOST_FILTER_H_
