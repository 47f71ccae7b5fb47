#include "src/tier/memory/entry_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

namespace kvtier {
namespace {

BlockKey Key(uint64_t v) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &v, sizeof(v));
  return BlockKey(b);
}

// The hash index against a std::map model through random inserts and erases, across growth.
TEST(EntryTableTest, IndexAgreesWithAModel) {
  EntryTable t;
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> model;
  std::mt19937_64 rng(3);
  for (int step = 0; step < 200000; ++step) {
    uint32_t tenant = rng() % 3;
    uint64_t k = rng() % 5000;
    auto it = model.find({tenant, k});
    if (it == model.end()) {
      uint32_t idx = t.NewEntry();
      t.at(idx).key = Key(k);
      t.at(idx).tenant = tenant;
      t.Index(idx);
      model[{tenant, k}] = idx;
    } else {
      ASSERT_EQ(t.Find(tenant, Key(k)), it->second);
      t.Unindex(it->second);
      t.FreeEntry(it->second);
      model.erase(it);
      ASSERT_EQ(t.Find(tenant, Key(k)), kNil);
    }
  }
  ASSERT_EQ(t.indexed(), model.size());
  for (const auto& [tk, idx] : model) ASSERT_EQ(t.Find(tk.first, Key(tk.second)), idx);
}

TEST(EntryTableTest, ListsKeepOrderAndCounts) {
  EntryTable t;
  EntryList list;
  uint32_t a = t.NewEntry(), b = t.NewEntry(), c = t.NewEntry();
  t.PushBack(&list, a, 1);
  t.PushBack(&list, c, 3);
  t.InsertBefore(&list, c, b, 2);
  EXPECT_EQ(list.head, a);
  EXPECT_EQ(t.at(a).next, b);
  EXPECT_EQ(t.at(b).next, c);
  EXPECT_EQ(list.tail, c);
  EXPECT_EQ(list.count, 3u);
  EXPECT_EQ(list.pages, 6u);
  t.Remove(&list, a, 1);
  t.InsertBefore(&list, b, a, 1);
  EXPECT_EQ(list.head, a);
  t.Remove(&list, c, 3);
  EXPECT_EQ(list.tail, b);
  EXPECT_EQ(list.pages, 3u);
}

}  // namespace
}  // namespace kvtier
