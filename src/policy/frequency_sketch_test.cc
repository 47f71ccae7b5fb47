#include "src/policy/frequency_sketch.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier {
namespace {

uint64_t Mix(uint64_t v) {
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdULL;
  v ^= v >> 33;
  return v;
}

TEST(FrequencySketchTest, CountsAccesses) {
  FrequencySketch s(1000);
  EXPECT_EQ(s.Estimate(Mix(1)), 0u);
  s.Increment(Mix(1));
  s.Increment(Mix(1));
  s.Increment(Mix(2));
  EXPECT_EQ(s.Estimate(Mix(1)), 2u);
  EXPECT_EQ(s.Estimate(Mix(2)), 1u);
}

TEST(FrequencySketchTest, OldPopularityDecays) {
  FrequencySketch s(1024);
  for (int i = 0; i < 8; ++i) s.Increment(Mix(7));
  EXPECT_EQ(s.Estimate(Mix(7)), 8u);
  // A sample's worth of increments (here of one other item) triggers one halving.
  for (uint64_t i = 8; i < s.sample_size(); ++i) s.Increment(Mix(1000));
  EXPECT_EQ(s.Estimate(Mix(7)), 4u);
}

TEST(FrequencySketchTest, FewFalsePositivesAtDesignLoad) {
  FrequencySketch s(4096);
  for (uint64_t i = 0; i < 4096; ++i) s.Increment(Mix(i));
  int over = 0;
  for (uint64_t i = 0; i < 4096; ++i) over += s.Estimate(Mix(i)) >= 2;
  // Each item was seen once; a few collide in every row (the sketch over-counts, never under).
  EXPECT_LT(over, 4096 / 100);
}

TEST(FrequencySketchTest, GrowingKeepsEveryEstimateAndSizesMemoryByItems) {
  FrequencySketch s(1024);
  const size_t small = s.MemoryUsage();
  std::vector<uint32_t> before;
  for (uint64_t i = 0; i < 3000; ++i) {
    for (uint64_t k = 0; k <= i % 5; ++k) s.Increment(Mix(i));
  }
  for (uint64_t i = 0; i < 6000; ++i) before.push_back(s.Estimate(Mix(i)));
  s.Reserve(1000);  // Already wide enough: nothing changes.
  EXPECT_EQ(s.MemoryUsage(), small);
  s.Reserve(100'000);
  EXPECT_GE(s.expected_items(), 100'000u);
  EXPECT_EQ(s.MemoryUsage(), 4 * 4 * s.expected_items()) << "four rows of 4 counters per item";
  EXPECT_LT(s.MemoryUsage(), 4 * 4 * 2 * 100'000u) << "at most twice what the items need";
  for (uint64_t i = 0; i < 6000; ++i) {
    ASSERT_EQ(s.Estimate(Mix(i)), before[i]) << "item " << i << " changed its count by growing";
  }
}

}  // namespace
}  // namespace kvtier
