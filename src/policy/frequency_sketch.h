// FrequencySketch: a count-min sketch of recent accesses with periodic halving (the TinyLFU
// "reset"), so the estimate reflects recent popularity rather than all-time counts.
//
// Four rows of 8-bit saturating counters; an item's estimate is its smallest counter, which
// over-counts only on collisions in every row. After `10 x width` increments every counter is
// halved.
//
// Not thread-safe: the owner serialises calls.

#ifndef KVTIER_POLICY_FREQUENCY_SKETCH_H_
#define KVTIER_POLICY_FREQUENCY_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier {

class FrequencySketch {
 public:
  // `expected_items`: how many distinct items are tracked at a time. Each row is four times
  // that wide (rounded up to a power of two), which keeps items seen once from reading as
  // seen twice to about 0.3%.
  explicit FrequencySketch(size_t expected_items);

  // Widens the rows for `expected_items` when they are too narrow for it (never narrows):
  // the owner calls it as its population grows, so the sketch's memory follows what is
  // tracked rather than a configured maximum. Widening doubles the rows, each counter copied to
  // both of its halves, so every estimate stays what it was; the period between halvings
  // grows with the width.
  void Reserve(size_t expected_items);

  void Increment(uint64_t hash);
  uint32_t Estimate(uint64_t hash) const;
  size_t MemoryUsage() const { return counters_.size(); }
  // Items the rows are wide enough for.
  size_t expected_items() const { return width_ / 4; }
  // Increments between two halvings.
  uint64_t sample_size() const { return reset_after_; }

 private:
  static constexpr int kRows = 4;
  size_t Slot(int row, uint64_t hash) const;
  void Halve();

  std::vector<uint8_t> counters_;  // kRows rows of width_ counters.
  size_t width_;
  uint64_t increments_ = 0;
  uint64_t reset_after_;
};

}  // namespace kvtier

#endif  // KVTIER_POLICY_FREQUENCY_SKETCH_H_
