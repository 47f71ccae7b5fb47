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

}  // namespace
}  // namespace kvtier
