#include "src/common/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

TEST(WorkerPoolTest, RunsEveryIndexOnce) {
  WorkerPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  pool.ParallelFor(hits.size(), [&](size_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(WorkerPoolTest, ConcurrentBatchesAndNoThreads) {
  WorkerPool pool(3);
  std::atomic<uint64_t> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) pool.ParallelFor(10, [&](size_t i) { sum += i; });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4u * 50u * 45u);
  WorkerPool inline_pool(0);
  uint64_t inline_sum = 0;
  inline_pool.ParallelFor(10, [&](size_t i) { inline_sum += i; });
  EXPECT_EQ(inline_sum, 45u);
}

}  // namespace
}  // namespace kvtier
