#include "src/common/page_runs.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvtier {
namespace {

std::vector<Extent> Runs(const PageRuns& s, Extent within = {0, UINT32_MAX}) {
  std::vector<Extent> out;
  s.ForEachIn(within, [&out](const Extent& x) { out.push_back(x); });
  return out;
}

TEST(PageRunsTest, AddsCountOnlyNewPagesAndCoalesce) {
  PageRuns s;
  EXPECT_EQ(s.Add({10, 5}), 5u);
  EXPECT_EQ(s.Add({20, 5}), 5u);
  EXPECT_EQ(s.Add({12, 10}), 5u) << "pages 15..19 are new; 12..14 and 20..21 were there";
  EXPECT_EQ(Runs(s), (std::vector<Extent>{{10, 15}}));
  EXPECT_EQ(s.Add({25, 3}), 3u);
  EXPECT_EQ(s.Add({7, 3}), 3u);
  EXPECT_EQ(Runs(s), (std::vector<Extent>{{7, 21}})) << "adjacent runs merge";
  EXPECT_EQ(s.pages(), 21u);
  EXPECT_EQ(s.runs(), 1u);
}

TEST(PageRunsTest, RemovesAndListsWithinARange) {
  PageRuns s;
  s.Add({0, 100});
  EXPECT_EQ(s.Remove({40, 20}), 20u);
  EXPECT_EQ(s.Remove({50, 20}), 10u) << "only 60..69 were still there";
  EXPECT_EQ(Runs(s), (std::vector<Extent>{{0, 40}, {70, 30}}));
  EXPECT_EQ(Runs(s, {30, 50}), (std::vector<Extent>{{30, 10}, {70, 10}}));
  EXPECT_EQ(s.pages(), 70u);
  EXPECT_EQ(s.Remove({200, 5}), 0u);
  EXPECT_EQ(s.Add({UINT32_MAX - 4, 4}), 4u) << "the last pages of the address space";
  EXPECT_EQ(Runs(s, {UINT32_MAX - 10, 10}), (std::vector<Extent>{{UINT32_MAX - 4, 4}}));
}

TEST(PageRunsTest, MatchesABitPerPage) {
  std::mt19937 rng(7);
  constexpr uint32_t kPages = 4096;
  std::vector<bool> bits(kPages);
  PageRuns s;
  for (int op = 0; op < 20000; ++op) {
    const uint32_t first = rng() % kPages;
    const uint32_t n = 1 + rng() % std::min<uint32_t>(64, kPages - first);
    uint32_t changed = 0;
    const bool add = rng() % 2 == 0;
    for (uint32_t p = first; p < first + n; ++p) {
      changed += bits[p] != add;
      bits[p] = add;
    }
    ASSERT_EQ(add ? s.Add({first, n}) : s.Remove({first, n}), changed) << "op " << op;
  }
  std::vector<Extent> expected;
  for (uint32_t p = 0; p < kPages;) {
    if (!bits[p]) {
      ++p;
      continue;
    }
    const uint32_t from = p;
    while (p < kPages && bits[p]) ++p;
    expected.push_back({from, p - from});
  }
  EXPECT_EQ(Runs(s), expected);
}

}  // namespace
}  // namespace kvtier
