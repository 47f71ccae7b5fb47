#include "src/policy/frequency_sketch.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace kvtier {
namespace {
constexpr size_t kMinWidth = 1024;
constexpr uint64_t kRowSeeds[] = {0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL,
                                  0x165667b19e3779f9ULL, 0xd6e8feb86659fd93ULL};
}  // namespace

FrequencySketch::FrequencySketch(size_t expected_items)
    : width_(std::bit_ceil(std::max(kMinWidth, 4 * expected_items))), reset_after_(10 * width_) {
  counters_.assign(kRows * width_, 0);
}

void FrequencySketch::Reserve(size_t expected_items) {
  const size_t width = std::bit_ceil(std::max(kMinWidth, 4 * expected_items));
  if (width <= width_) return;
  // Widths are powers of two, so an item's slot in a row of width 2w is its slot in the row of
  // width w, or that plus w: both copies hold its counter.
  std::vector<uint8_t> wider(kRows * width);
  for (int r = 0; r < kRows; ++r) {
    const uint8_t* row = counters_.data() + r * width_;
    for (size_t copy = 0; copy < width / width_; ++copy) {
      std::copy(row, row + width_, wider.begin() + r * width + copy * width_);
    }
  }
  counters_ = std::move(wider);
  width_ = width;
  reset_after_ = 10 * width_;
}

size_t FrequencySketch::Slot(int row, uint64_t hash) const {
  uint64_t h = (hash ^ kRowSeeds[row]) * kRowSeeds[(row + 1) % kRows];
  return row * width_ + static_cast<size_t>(h >> 32) % width_;
}

void FrequencySketch::Increment(uint64_t hash) {
  for (int r = 0; r < kRows; ++r) {
    uint8_t& c = counters_[Slot(r, hash)];
    if (c < UINT8_MAX) ++c;
  }
  if (++increments_ >= reset_after_) Halve();
}

uint32_t FrequencySketch::Estimate(uint64_t hash) const {
  uint32_t m = UINT8_MAX;
  for (int r = 0; r < kRows; ++r) m = std::min<uint32_t>(m, counters_[Slot(r, hash)]);
  return m;
}

void FrequencySketch::Halve() {
  for (uint8_t& c : counters_) c >>= 1;
  increments_ /= 2;
}

}  // namespace kvtier
