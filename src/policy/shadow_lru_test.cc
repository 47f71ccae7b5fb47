#include "src/policy/shadow_lru.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <list>
#include <random>
#include <unordered_map>
#include <vector>

namespace kvtier {
namespace {

// Spread small numbers over the hash space, as BlockKey::Hash64 does for keys.
uint64_t H(uint64_t v) {
  v += 0x9e3779b97f4a7c15ULL;
  v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL;
  v = (v ^ (v >> 27)) * 0x94d049bb133111ebULL;
  return v ^ (v >> 31);
}

std::vector<uint64_t> Chain(std::initializer_list<uint64_t> ids) {
  std::vector<uint64_t> out;
  for (uint64_t id : ids) out.push_back(H(id));
  return out;
}

TEST(ShadowLruTest, ServesAPrefixOnlyWhileEveryKeyOfItIsHeld) {
  ShadowLru lru;
  ShadowLru::Served s = lru.Lookup(Chain({1, 2, 3}), 0, 100);
  EXPECT_EQ(s.sampled, 3u);
  EXPECT_EQ(s.lru, 0u);
  EXPECT_EQ(s.cache, 0u);
  // All three are held now; the fourth is new. The cache served two of them.
  s = lru.Lookup(Chain({1, 2, 3, 4}), 2, 100);
  EXPECT_EQ(s.lru, 3u);
  EXPECT_EQ(s.cache, 2u);
  // A key missing in the middle ends the prefix, though later keys are held.
  s = lru.Lookup(Chain({1, 5, 3}), 3, 100);
  EXPECT_EQ(s.lru, 1u);
  EXPECT_EQ(s.cache, 3u);
}

TEST(ShadowLruTest, DropsTheLeastRecentlyUsedKeyAtTheCachesSize) {
  ShadowLru lru;
  lru.Lookup(Chain({1}), 0, 2);
  lru.Lookup(Chain({2}), 0, 2);
  lru.Lookup(Chain({1}), 0, 2);  // 2 is now the least recent.
  lru.Lookup(Chain({3}), 0, 2);
  EXPECT_EQ(lru.Lookup(Chain({1}), 0, 2).lru, 1u);
  EXPECT_EQ(lru.Lookup(Chain({3}), 0, 2).lru, 1u);
  EXPECT_EQ(lru.Lookup(Chain({2}), 0, 2).lru, 0u);
}

TEST(ShadowLruTest, AnErasedKeyIsNoLongerServed) {
  ShadowLru lru;
  lru.Lookup(Chain({1, 2, 3}), 0, 100);
  lru.Erase(H(2));
  lru.Erase(H(9));  // Never held: nothing happens.
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(lru.Lookup(Chain({1, 2, 3}), 0, 100).lru, 1u);
}

// An exact LRU of `capacity` blocks: the blocks of a stream of lookups it serves as prefixes.
uint64_t ExactLruServed(const std::vector<std::vector<uint64_t>>& lookups, size_t capacity) {
  std::list<uint64_t> order;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  uint64_t served = 0;
  for (const std::vector<uint64_t>& keys : lookups) {
    bool prefix = true;
    for (uint64_t k : keys) {
      auto it = where.find(k);
      prefix = prefix && it != where.end();
      served += prefix;
      if (it != where.end()) {
        order.splice(order.end(), order, it->second);
      } else {
        where.emplace(k, order.insert(order.end(), k));
        if (order.size() > capacity) {
          where.erase(order.front());
          order.pop_front();
        }
      }
    }
  }
  return served;
}

TEST(ShadowLruTest, ASampleOfAFewThousandKeysEstimatesALargeCachesHitRatio) {
  // Conversations of growing chains over a pool larger than the cache; lookups are the whole
  // chain so far plus one new block.
  constexpr size_t kCapacity = 40000;
  constexpr size_t kMaxSampled = 2048;
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint64_t>> chains(3000);
  std::vector<std::vector<uint64_t>> lookups;
  uint64_t next = 1;
  size_t references = 0;
  while (references < 2'000'000) {
    // Popular conversations come back more often (a Zipf-like choice).
    const size_t c = static_cast<size_t>(
        std::pow(static_cast<double>(rng() % 1000000) / 1e6, 2.0) * chains.size());
    chains[c].push_back(H(next++));
    lookups.push_back(chains[c]);
    references += chains[c].size();
    if (chains[c].size() > 64) chains[c].clear();  // The conversation ends; a new one starts.
  }
  ShadowLru sampled(kMaxSampled);
  uint64_t sampled_refs = 0, sampled_served = 0;
  for (const std::vector<uint64_t>& keys : lookups) {
    const ShadowLru::Served s = sampled.Lookup(keys, 0, kCapacity);
    sampled_refs += s.sampled;
    sampled_served += s.lru;
  }
  EXPECT_LE(sampled.size(), kMaxSampled);
  EXPECT_GT(sampled_refs, references / 32);
  const double exact = static_cast<double>(ExactLruServed(lookups, kCapacity)) /
                       static_cast<double>(references);
  const double estimate = static_cast<double>(sampled_served) / static_cast<double>(sampled_refs);
  EXPECT_GT(exact, 0.2);
  EXPECT_LT(exact, 0.9);
  EXPECT_NEAR(estimate, exact, 0.01) << "exact " << exact;
}

TEST(ShadowLruTest, FollowingEveryKeyItIsExactlyLru) {
  // Chains of random lengths over a pool four times the cache: many evictions, and keys that
  // collide in the index.
  std::mt19937_64 rng(3);
  std::vector<std::vector<uint64_t>> lookups;
  for (int r = 0; r < 20000; ++r) {
    std::vector<uint64_t> keys;
    const uint64_t start = rng() % 2000, n = 1 + rng() % 12;
    for (uint64_t i = 0; i < n; ++i) keys.push_back(H((start + i) % 2000));
    lookups.push_back(std::move(keys));
  }
  ShadowLru lru(500);
  uint64_t served = 0;
  for (const std::vector<uint64_t>& keys : lookups) served += lru.Lookup(keys, 0, 500).lru;
  EXPECT_EQ(lru.size(), 500u);
  EXPECT_EQ(served, ExactLruServed(lookups, 500));
  EXPECT_GT(served, 10000u);  // Not trivially: a quarter of the pool fits.
}

TEST(ShadowLruTest, ForgetsWhatItNoLongerSamplesWhenTheCacheGrows) {
  ShadowLru lru(64);
  for (uint64_t i = 0; i < 64; ++i) lru.Lookup(Chain({i}), 0, 64);
  EXPECT_EQ(lru.size(), 64u);
  // A cache four times as large is followed at a quarter of the rate, in as many keys.
  lru.Lookup(Chain({1000}), 0, 256);
  EXPECT_LE(lru.size(), 64u);
  EXPECT_LE(lru.capacity(), 64u);
  EXPECT_GE(lru.capacity(), 32u);
}

}  // namespace
}  // namespace kvtier
