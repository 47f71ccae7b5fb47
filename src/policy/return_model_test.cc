#include "src/policy/return_model.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvtier {
namespace {

// A key's hash, spread over the whole range as real key hashes are.
uint64_t Hash(uint64_t i) { return (i + 1) * 0x9e3779b97f4a7c15ULL; }

TEST(ReturnModelTest, KnowsNothingBeforeReturnsAreSeen) {
  ReturnModel m;
  EXPECT_EQ(m.ReturnChance(0, 0), 0);
  EXPECT_EQ(m.ReturnChance(5, 1000), 0);
  EXPECT_EQ(m.median_return_seconds(), 0);
}

// Class 0 tips come back one time in four, after `class0_after` seconds idle; class 3 tips
// three times in four, after `class3_after`. Then time passes far beyond every return, so that
// no period is still running.
void LearnTwoClasses(ReturnModel& m, uint32_t class0_after, uint32_t class3_after) {
  uint32_t now = 1000;
  for (uint64_t i = 0; i < 2000; ++i, now += 1) {
    const int block_class = i % 2 == 0 ? 0 : 3;
    m.OnAccess(Hash(i), block_class, now, /*tip=*/true);
    const bool returns = block_class == 0 ? i % 8 == 0 : i % 8 != 1;
    const uint32_t after = block_class == 0 ? class0_after : class3_after;
    if (returns) m.OnAccess(Hash(i), block_class, now + after, /*tip=*/false);
  }
  for (int i = 0; i <= 128; ++i) m.OnAccess(Hash((1u << 30) + i), 0, now + 100000, true);
}

TEST(ReturnModelTest, LearnsThatDeeperConversationsComeBackMoreOften) {
  ReturnModel m;
  LearnTwoClasses(m, 60, 60);
  EXPECT_NEAR(m.ReturnChance(0, 10), 0.25, 0.05);
  EXPECT_NEAR(m.ReturnChance(3, 10), 0.75, 0.05);
  // Once idle past the time they come back, neither is likely to.
  EXPECT_LT(m.ReturnChance(3, 200), 0.05);
  EXPECT_NEAR(m.median_return_seconds(), 60, 10);
  // The estimate is sure of itself with a thousand periods a class.
  EXPECT_LT(m.ChanceError(0, 10), 0.03);
}

TEST(ReturnModelTest, TheChanceWithinAWindowCountsOnlyTheReturnsInIt) {
  ReturnModel m;
  LearnTwoClasses(m, 10, 1000);
  // Ever, class 3 is the likelier to come back; within the next minute, class 0.
  EXPECT_NEAR(m.ReturnChance(3, 5), 0.75, 0.05);
  EXPECT_NEAR(m.ReturnChance(0, 5), 0.25, 0.05);
  EXPECT_LT(m.ReturnChance(3, 5, 60), 0.02);
  EXPECT_NEAR(m.ReturnChance(0, 5, 60), 0.25, 0.05);
  // A window that ends before the returns misses them; one that spans them sees them all.
  EXPECT_LT(m.ReturnChance(0, 0, 4), 0.02);
  EXPECT_NEAR(m.ReturnChance(3, 500, 1000), 0.75, 0.05);
  EXPECT_LT(m.ChanceError(3, 5, 60), m.ChanceError(3, 5));
}

TEST(ReturnModelTest, ChanceNeverRisesWithIdleTime) {
  ReturnModel m;
  uint32_t now = 1000;
  for (uint64_t i = 0; i < 3000; ++i, now += 2) {
    m.OnAccess(Hash(i), 1, now, true);
    // Returns spread from 2 s to about 30 minutes.
    if (i % 3 != 0) m.OnAccess(Hash(i), 1, now + 2 + static_cast<uint32_t>(i % 1800), false);
  }
  double previous = 1;
  for (uint32_t idle = 0; idle < 100000; idle = idle * 2 + 1) {
    const double chance = m.ReturnChance(1, idle);
    EXPECT_LE(chance, previous) << "at " << idle << " s idle";
    previous = chance;
  }
}

TEST(ReturnModelTest, AccessesWithinASecondAreOneVisit) {
  ReturnModel m;
  for (uint64_t i = 0; i < 500; ++i) {
    m.OnAccess(Hash(i), 0, 100, true);
    m.OnAccess(Hash(i), 0, 100, true);  // Matched, then read, in the same second.
  }
  EXPECT_EQ(m.periods(), 0);
}

TEST(ReturnModelTest, ABlockThatStopsBeingATipIsNoLongerFollowed) {
  ReturnModel m;
  for (uint64_t i = 0; i < 500; ++i) {
    m.OnAccess(Hash(i), 0, 100, true);   // Put: the chain's tip.
    m.OnAccess(Hash(i), 0, 100, false);  // The next block of the same prompt extends it.
  }
  EXPECT_EQ(m.tracked(), 0u);
  EXPECT_EQ(m.periods(), 0);
}

TEST(ReturnModelTest, KeysStillFollowedKeepTheirPeriodsWhenOthersStop) {
  ReturnModel m;
  for (uint64_t i = 0; i < 1000; ++i) m.OnAccess(Hash(i), 1, 100, true);
  // Every other chain is extended in the same second: its tip is no longer followed, and no
  // period ended with a return.
  for (uint64_t i = 0; i < 1000; i += 2) m.OnAccess(Hash(i), 1, 100, false);
  EXPECT_EQ(m.tracked(), 500u);
  EXPECT_EQ(m.periods(), 0);
  // The others come back a minute later: each is one return.
  for (uint64_t i = 1; i < 1000; i += 2) m.OnAccess(Hash(i), 1, 160, true);
  EXPECT_EQ(m.tracked(), 500u);
  EXPECT_EQ(m.periods(), 500);
  // New chains just before the horizon of those returns: the refreshes they bring end no
  // period, since every followed key was last used at 160 s.
  const uint32_t later = 160 + ReturnModel::kHorizonSeconds - 10;
  for (uint64_t i = 1000; i < 1200; ++i) m.OnAccess(Hash(i), 1, later, true);
  EXPECT_EQ(m.tracked(), 700u);
  EXPECT_EQ(m.periods(), 500);
}

TEST(ReturnModelTest, FollowsABoundedSampleOfKeys) {
  ReturnModel m(/*max_tracked=*/1000);
  for (uint64_t i = 0; i < 100000; ++i) m.OnAccess(Hash(i), 0, 100, true);
  EXPECT_LE(m.tracked(), 1000u);
  EXPECT_GE(m.tracked(), 250u);
}

}  // namespace
}  // namespace kvtier
