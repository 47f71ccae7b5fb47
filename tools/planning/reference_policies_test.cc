#include "tools/planning/reference_policies.h"

#include <gtest/gtest.h>

#include <map>

namespace kvtier::planning {
namespace {

// Requests written as strings of block names, one character per block: {"ab", "a"} is a
// request for blocks a then b, then one for block a.
BlockStream Stream(std::initializer_list<const char*> requests) {
  BlockStream s;
  std::map<char, uint32_t> ids;
  for (const char* r : requests) {
    s.request_begin.push_back(s.blocks.size());
    for (const char* c = r; *c != '\0'; ++c) {
      auto [it, inserted] = ids.try_emplace(*c, static_cast<uint32_t>(ids.size()));
      s.blocks.push_back(it->second);
    }
  }
  s.request_begin.push_back(s.blocks.size());
  s.distinct_blocks = static_cast<uint32_t>(ids.size());
  return s;
}

using Hits = std::vector<uint32_t>;

TEST(ReferencePoliciesTest, LruEvictsTheLeastRecentlyUsedBlock) {
  // Room for two: a is used again before c arrives, so c pushes out b, not a.
  const BlockStream s = Stream({"a", "b", "a", "c", "b", "a"});
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kLru, 2), (Hits{0, 0, 1, 0, 0, 0}));
}

TEST(ReferencePoliciesTest, ArcKeepsAReusedBlockThatLruLosesToNewOnes) {
  // a is used twice, then two new blocks pass: LRU evicts a for c; ARC keeps a in its
  // frequency list and gives up b, seen once.
  const BlockStream s = Stream({"a", "a", "b", "c", "a"});
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kLru, 2), (Hits{0, 1, 0, 0, 0}));
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kArc, 2), (Hits{0, 1, 0, 0, 1}));
}

TEST(ReferencePoliciesTest, ArcFollowsItsGhostListsByTheBook) {
  // Room for two, worked through Megiddo and Modha's algorithm:
  //   a       T1 [a]
  //   a       hit: T2 [a]
  //   b       T1 [b]
  //   c       full: T1 is over its target p = 0, so b goes to ghost list B1; T1 [c]
  //   b       B1 hit: p = 1; T1 is not over it, so a goes to B2; T2 [b]
  //   a       B2 hit: p = 0; c goes to B1; T2 [b a]
  //   b       hit
  const BlockStream s = Stream({"a", "a", "b", "c", "b", "a", "b"});
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kArc, 2), (Hits{0, 1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kLru, 2), (Hits{0, 1, 0, 0, 1, 0, 1}));
}

TEST(ReferencePoliciesTest, OptEvictsTheBlockNeededLast) {
  // Room for two when c arrives: a is needed next, b after it. OPT evicts b; with bypass it
  // does not store c at all (never needed again) and keeps both.
  const BlockStream s = Stream({"a", "b", "c", "a", "b"});
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kLru, 2), (Hits{0, 0, 0, 0, 0}));
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kOpt, 2), (Hits{0, 0, 0, 1, 0}));
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kOptBypass, 2), (Hits{0, 0, 0, 1, 1}));
}

TEST(ReferencePoliciesTest, InfiniteHitsEveryBlockSeenBefore) {
  const BlockStream s = Stream({"ab", "abc", "d", "abcd"});
  EXPECT_EQ(SimulateReferencePolicy(s, ReferencePolicy::kInfinite, 1), (Hits{0, 2, 0, 4}));
}

TEST(ReferencePoliciesTest, HitsStopAtTheFirstMissingBlockOfAPrefix) {
  // b is resident when "xb" arrives, but x is not: nothing past the miss counts, and b is
  // stored again (an access), so it is still there for "ab".
  const BlockStream s = Stream({"ab", "xb", "ab"});
  for (ReferencePolicy p : kReferencePolicies) {
    EXPECT_EQ(SimulateReferencePolicy(s, p, 3), (Hits{0, 0, 2})) << ReferencePolicyName(p);
  }
}

TEST(ReferencePoliciesTest, NoPolicyBeatsTheInfiniteCacheOrOptWithBypass) {
  const BlockStream s = Stream({"abc", "abd", "ae", "abc", "f", "abd", "g", "ae", "abc"});
  auto total = [&](ReferencePolicy p, uint64_t capacity) {
    uint64_t n = 0;
    for (uint32_t h : SimulateReferencePolicy(s, p, capacity)) n += h;
    return n;
  };
  for (uint64_t capacity = 1; capacity <= 8; ++capacity) {
    const uint64_t bound = total(ReferencePolicy::kInfinite, capacity);
    EXPECT_LE(total(ReferencePolicy::kOptBypass, capacity), bound);
    EXPECT_LE(total(ReferencePolicy::kLru, capacity), total(ReferencePolicy::kOpt, capacity))
        << capacity;
    EXPECT_LE(total(ReferencePolicy::kArc, capacity), bound);
  }
}

}  // namespace
}  // namespace kvtier::planning
