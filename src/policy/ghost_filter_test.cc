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

}  // namespace
}  // namespace kvtier
