#include "src/common/single_flight.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

TEST(SingleFlightTest, ABurstForOneKeySharesOneComputation) {
  SingleFlight<int, std::string> flights;
  constexpr int kFollowers = 7;
  std::atomic<int> computed{0};
  std::atomic<int> followed{0};
  std::vector<std::string> got(kFollowers + 1);
  // The followers start once the leader's computation runs, and it cannot finish before
  // every one of them is waiting for it.
  std::vector<std::thread> followers;
  got[0] = flights.Do(1, [&] {
    ++computed;
    for (int i = 1; i <= kFollowers; ++i) {
      followers.emplace_back([&, i] {
        bool was_follower = false;
        got[i] = flights.Do(
            1, [&] { ++computed; return std::string("computed again"); }, &was_follower);
        if (was_follower) ++followed;
      });
    }
    flights.AwaitFollowers(1, kFollowers);
    return std::string("block 1");
  });
  for (std::thread& t : followers) t.join();
  EXPECT_EQ(computed.load(), 1);
  EXPECT_EQ(followed.load(), kFollowers);
  for (const std::string& g : got) EXPECT_EQ(g, "block 1");
}

TEST(SingleFlightTest, OtherKeysAndLaterCallsComputeTheirOwn) {
  SingleFlight<int, int> flights;
  std::atomic<int> computed{0};
  // While key 1 is in flight, key 2 computes on its own; after key 1 is done, a new call for
  // key 1 computes again (nothing is cached).
  std::thread leader([&] {
    EXPECT_EQ(flights.Do(1, [&] {
      ++computed;
      EXPECT_EQ(flights.Do(2, [&] { ++computed; return 20; }), 20);
      return 10;
    }), 10);
  });
  leader.join();
  bool followed = true;
  EXPECT_EQ(flights.Do(1, [&] { ++computed; return 11; }, &followed), 11);
  EXPECT_FALSE(followed);
  EXPECT_EQ(computed.load(), 3);
}

TEST(SingleFlightTest, ABatchLeadsWhatIsNotInFlightAndFollowsTheRest) {
  SingleFlight<int, int> flights;
  std::vector<std::vector<size_t>> batches;  // What each leader's fn was asked, in order.
  Mutex mu;
  auto compute = [&](const std::vector<int>& keys) {
    return [&, keys](std::span<const size_t> led) {
      std::vector<int> values;
      std::vector<size_t> asked;
      for (size_t i : led) {
        values.push_back(keys[i] * 10);
        asked.push_back(static_cast<size_t>(keys[i]));
      }
      MutexLock lock(&mu);
      batches.push_back(asked);
      return values;
    };
  };
  // The first caller leads keys 1 and 2; while it computes, a second caller asks for 2 and
  // 3: it follows 2 and leads 3 alone. The first cannot finish before someone follows key 2.
  const std::vector<int> first = {1, 2};
  const std::vector<int> second = {2, 3};
  std::vector<int> second_got;
  size_t followed = 0;
  std::thread other;
  const std::vector<int> first_got =
      flights.DoMany(first, [&](std::span<const size_t> led) {
        other = std::thread(
            [&] { second_got = flights.DoMany(second, compute(second), &followed); });
        flights.AwaitFollowers(2, 1);
        return compute(first)(led);
      });
  other.join();
  EXPECT_EQ(first_got, (std::vector<int>{10, 20}));
  EXPECT_EQ(second_got, (std::vector<int>{20, 30}));
  EXPECT_EQ(followed, 1u);
  std::sort(batches.begin(), batches.end());
  EXPECT_EQ(batches, (std::vector<std::vector<size_t>>{{1, 2}, {3}}));  // Key 2 computed once.
}

}  // namespace
}  // namespace kvtier
