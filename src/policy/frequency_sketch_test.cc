#include "src/policy/frequency_sketch.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvtier
