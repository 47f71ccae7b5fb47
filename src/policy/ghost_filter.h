// GhostFilter: a ghost list for G2 eviction. It remembers the fingerprints of roughly the last
// N keys evicted, so that a key coming back soon after eviction is recognised (and the
// eviction policy learns from it), with a byte the policy keeps for each.
//
// Two generations of open-addressed fingerprint sets: inserts go to the current one; when it
// holds N/2 entries it becomes the previous one and the old previous is dropped. Membership is
// "in either", so between N/2 and N recent keys are remembered. A slot is 4 bytes: 24 bits of
// the fingerprint and the byte; the slot a key probes from comes from the fingerprint's other
// bits, so a lookup mistakes a new key for a return about once in 2^24 probes of a full slot
// (a fingerprint collision only does that). Tables are at most 3/4 full and not rounded to a
// power of two: 16/3 bytes per key of the target N (5.3 to 10.7 per key remembered), with no
// per-entry allocation. A full G2 keeps two filters of up to four keys per queued block each,
// so these bytes are a large part of its index (docs/store.md, "What the Store costs").
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
    std::vector<uint32_t> slots;  // 0 = empty.
    size_t count = 0;
    size_t capacity = 0;          // Entries before the generation is full.
    void Reset(size_t new_capacity);
    // Slots hold (value << 24) | the fingerprint's tag (Tag(), never 0). Find returns the
    // slot holding the tag on the fingerprint's probe run, or nullptr.
    const uint32_t* Find(uint64_t fingerprint) const;
    void Insert(uint64_t fingerprint, uint8_t value);
    size_t Home(uint64_t fingerprint) const;
    // The slot on the fingerprint's probe run that holds its tag, else the empty slot that
    // ends the run. REQUIRES: slots not empty.
    size_t Probe(uint64_t fingerprint) const;
  };

  Generation current_;
  Generation previous_;
};

}  // namespace kvtier

#endif  // KVTIER_POLICY_GHOST_FILTER_H_
