#include "src/policy/ghost_filter.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(GhostFilterTest, RemembersRecentKeysAndForgetsOldOnes) {
  GhostFilter g;
  constexpr size_t kTarget = 1000;
  g.Insert(42, kTarget);
  EXPECT_TRUE(g.Contains(42));
  EXPECT_FALSE(g.Contains(43));
  // Within the target the key is still remembered...
  for (uint64_t i = 0; i < kTarget / 2 - 1; ++i) g.Insert(1000 + i, kTarget);
  EXPECT_TRUE(g.Contains(42));
  // ...and after two more generations it is gone.
  for (uint64_t i = 0; i < kTarget; ++i) g.Insert(100000 + i, kTarget);
  EXPECT_FALSE(g.Contains(42));
  EXPECT_TRUE(g.Contains(100000 + kTarget - 1));
}

TEST(GhostFilterTest, ZeroFingerprintIsAValidKey) {
  GhostFilter g;
  EXPECT_FALSE(g.Contains(0));
  g.Insert(0, 10);
  EXPECT_TRUE(g.Contains(0));
}

TEST(GhostFilterTest, RemembersAByteWithEachKey) {
  GhostFilter g;
  g.Insert(7, 100, 3);
  g.Insert(8, 100);
  g.Insert(1ull << 60 | 9, 100, 255);  // The fingerprint's top byte is not the value's.
  EXPECT_EQ(g.Find(7), std::optional<uint8_t>(3));
  EXPECT_EQ(g.Find(8), std::optional<uint8_t>(0));
  EXPECT_EQ(g.Find(1ull << 60 | 9), std::optional<uint8_t>(255));
  EXPECT_EQ(g.Find(10), std::nullopt);
  g.Insert(7, 100, 5);  // Remembered already: keeps its value.
  EXPECT_EQ(g.Find(7), std::optional<uint8_t>(3));
}

// Fingerprints as the MemoryTier passes them: BlockKey::Hash64, well mixed.
uint64_t Mixed(uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

TEST(GhostFilterTest, AFullFilterRemembersEveryKeyAndMistakesAlmostNoNewOne) {
  GhostFilter g;
  constexpr size_t kTarget = 400'000;
  // The current generation ends 3/4 full: its probe runs are at their longest.
  for (uint64_t i = 0; i < kTarget / 2; ++i) g.Insert(Mixed(i), kTarget);
  for (uint64_t i = 0; i < kTarget / 2; ++i) ASSERT_TRUE(g.Contains(Mixed(i))) << i;
  size_t mistaken = 0;
  for (uint64_t i = kTarget; i < kTarget + 1'000'000; ++i) mistaken += g.Contains(Mixed(i));
  // 24 bits of tag: about one new key in two million is taken for a remembered one here.
  EXPECT_LE(mistaken, 5u);
}

TEST(GhostFilterTest, CostsAtMostSixBytesPerKeyOfItsTarget) {
  GhostFilter g;
  constexpr size_t kTarget = 300'000;  // Not a power of two: nor is the table.
  for (uint64_t i = 0; i < 2 * kTarget; ++i) g.Insert(Mixed(i), kTarget);
  EXPECT_GE(g.size(), kTarget / 2);
  // Two generations of kTarget / 2 keys at 4 bytes a slot, 3/4 full: 16/3 bytes per key.
  EXPECT_LE(g.MemoryUsage(), 6 * kTarget);
}

}  // namespace
}  // namespace kvtier
