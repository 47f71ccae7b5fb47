#include "src/common/extent_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvtier {
namespace {

uint32_t Pages(const std::vector<Extent>& xs) {
  uint32_t n = 0;
  for (const Extent& x : xs) n += x.num_pages;
  return n;
}

TEST(ExtentAllocatorTest, BestFitThenCoalesce) {
  ExtentAllocator a(100);
  std::vector<Extent> x, y, z;
  ASSERT_TRUE(a.Allocate(10, &x));
  ASSERT_TRUE(a.Allocate(20, &y));
  ASSERT_TRUE(a.Allocate(10, &z));
  EXPECT_EQ(x[0], (Extent{0, 10}));
  EXPECT_EQ(y[0], (Extent{10, 20}));
  EXPECT_EQ(a.free_pages(), 60u);
  a.Free(x[0]);
  a.Free(z[0]);
  // Holes of 10 (at 0) and 70 (at 30): a 10-page request takes the exact hole.
  std::vector<Extent> w;
  ASSERT_TRUE(a.Allocate(10, &w));
  EXPECT_EQ(w[0], (Extent{0, 10}));
  a.Free(w[0]);
  a.Free(y[0]);
  EXPECT_EQ(a.free_runs(), 1u);
  EXPECT_EQ(a.largest_free_run(), 100u);
}

TEST(ExtentAllocatorTest, ClaimTakesExactlyTheFreePagesNamed) {
  ExtentAllocator a(100);
  EXPECT_TRUE(a.Claim({40, 10}));
  EXPECT_TRUE(a.Claim({0, 5}));
  EXPECT_TRUE(a.Claim({95, 5}));
  EXPECT_EQ(a.free_pages(), 80u);
  EXPECT_EQ(a.free_runs(), 2u);  // [5, 40) and [50, 95).
  // Overlapping what is taken, or past the end: refused, nothing changes.
  EXPECT_FALSE(a.Claim({45, 10}));
  EXPECT_FALSE(a.Claim({35, 6}));
  EXPECT_FALSE(a.Claim({96, 1}));
  EXPECT_FALSE(a.Claim({99, 2}));
  EXPECT_FALSE(a.Claim({200, 1}));
  EXPECT_EQ(a.free_pages(), 80u);
  // Claimed pages are freed like allocated ones and coalesce back into one run.
  a.Free({40, 10});
  a.Free({0, 5});
  a.Free({95, 5});
  EXPECT_EQ(a.free_runs(), 1u);
  EXPECT_EQ(a.largest_free_run(), 100u);
}

TEST(ExtentAllocatorTest, FragmentedSpaceIsStillUsableInPieces) {
  ExtentAllocator a(64);
  std::vector<std::vector<Extent>> blocks(16);
  for (auto& b : blocks) ASSERT_TRUE(a.Allocate(4, &b));
  for (size_t i = 0; i < blocks.size(); i += 2) a.Free(blocks[i][0]);
  // 32 pages free but no run longer than 4: a 20-page request is assembled from 5 pieces.
  EXPECT_EQ(a.largest_free_run(), 4u);
  std::vector<Extent> big;
  ASSERT_TRUE(a.Allocate(20, &big));
  EXPECT_EQ(Pages(big), 20u);
  EXPECT_EQ(big.size(), 5u);
  EXPECT_EQ(a.free_pages(), 12u);
  std::vector<Extent> too_big;
  EXPECT_FALSE(a.Allocate(13, &too_big));
  EXPECT_TRUE(too_big.empty());
}

TEST(ExtentAllocatorTest, RandomChurnNeverOverlapsOrLeaks) {
  constexpr uint32_t kTotal = 4096;
  ExtentAllocator a(kTotal);
  std::vector<int> owner(kTotal, -1);
  std::vector<std::vector<Extent>> live;
  std::mt19937 rng(1);
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && (rng() % 2 == 0 || a.free_pages() < 64)) {
      size_t i = rng() % live.size();
      for (const Extent& x : live[i]) {
        for (uint32_t p = x.first_page; p < x.first_page + x.num_pages; ++p) owner[p] = -1;
        a.Free(x);
      }
      live[i] = std::move(live.back());
      live.pop_back();
    } else {
      uint32_t want = 1 + rng() % 64;
      std::vector<Extent> got;
      const uint32_t free_before = a.free_pages();
      bool ok = a.Allocate(want, &got);
      ASSERT_EQ(ok, want <= free_before);
      if (!ok) continue;
      ASSERT_EQ(Pages(got), want);
      for (const Extent& x : got) {
        for (uint32_t p = x.first_page; p < x.first_page + x.num_pages; ++p) {
          ASSERT_LT(p, kTotal);
          ASSERT_EQ(owner[p], -1) << "page " << p << " handed out twice";
          owner[p] = step;
        }
      }
      live.push_back(std::move(got));
    }
    uint32_t used = 0;
    for (const auto& b : live) used += Pages(b);
    ASSERT_EQ(used + a.free_pages(), kTotal);
  }
  for (const auto& b : live) {
    for (const Extent& x : b) a.Free(x);
  }
  EXPECT_EQ(a.free_runs(), 1u);
}

}  // namespace
}  // namespace kvtier
