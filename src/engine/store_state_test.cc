// State beside KV in the embedded Store (include/kvtier/state.h): state keys, the resume
// lookup's answers, atomic puts, and G2's eviction of what no resume can use.

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kvtier/state.h"
#include "kvtier/store.h"
#include "src/engine/store_test_util.h"

namespace kvtier {
namespace {

using testing_util::Key;
using testing_util::ManualClockEnv;
using testing_util::Value;
constexpr uint64_t kBlock = testing_util::kTestBlock;

BlockKey State(uint64_t block, std::string_view group) { return *StateKey(Key(block), group); }

BlockWrite Write(const BlockKey& key, std::span<const std::byte> value,
                 std::optional<BlockKey> parent = std::nullopt, BlockRole role = BlockRole::kKv) {
  BlockWrite w;
  w.key = key;
  w.value = value;
  w.parent = parent;
  w.role = role;
  return w;
}

TEST(StateKeyTest, MatchesTheDocumentedBytes) {
  // docs/block_keys.md, "State keys": the first key of its test vectors, group "mamba".
  BlockKey k0 = *BlockKey::FromHex("1710bad8fce2903e92c90cdf5a919e7a29a32df64990441fe7fb500b2026ff33");
  EXPECT_EQ(StateKey(k0, "mamba")->ToHex(),
            "e6b6a14fd5781cc2cae0ffbd1931f4661360324c69c20a954b6505103dce66ac");
  EXPECT_EQ(StateKey(k0, "swa/k")->ToHex(),
            "a26ed4f08e09c42f39e91477965153294f2cba96b2f04024787b408015cfe708");
  EXPECT_NE(*StateKey(k0, "mamba"), *StateKey(k0, "mamba/conv_0"));
  EXPECT_NE(*StateKey(k0, "mamba"), *StateKey(Key(1), "mamba"));
}

TEST(StateKeyTest, RefusesNamesOutsideTheAlphabet) {
  for (std::string_view bad : {"", "a b", "mamba\n", "é", "x*y"}) {
    EXPECT_EQ(StateKey(Key(0), bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(StateKey(Key(0), std::string(kMaxStateGroupBytes + 1, 'a')).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(StateKey(Key(0), std::string(kMaxStateGroupBytes, 'a')).ok());
  EXPECT_TRUE(StateKey(Key(0), "deepseek_v4_c4_indexer_scale/0:x@y.z-1").ok());
}

class StoreStateTest : public ::testing::Test {
 protected:
  void Open(uint64_t blocks) {
    Options o;
    o.memory.capacity_bytes = blocks * kBlock;
    o.max_block_bytes = kBlock;
    o.tenants = {TenantOptions{"default"}};
    o.env = &env_;
    store_ = std::move(Store::Open(o)).value();
    tenant_ = *store_->FindTenant("default");
  }

  // KV blocks [first, last] of one chain (block i's parent is i - 1), stored as a hybrid
  // model's KV.
  void PutChain(uint64_t first, uint64_t last) {
    for (uint64_t i = first; i <= last; ++i) {
      PutOptions po;
      if (i > 0) po.parent = Key(i - 1);
      po.role = BlockRole::kKvNeedsState;
      ASSERT_TRUE(store_->Put(tenant_, Key(i), Value(i), po).ok());
    }
  }

  // Group `group`'s value at each block of `blocks` (each block stored already).
  void PutStates(std::string_view group, std::initializer_list<uint64_t> blocks) {
    for (uint64_t b : blocks) {
      std::vector<std::byte> v = Value(1000 + b, 4096);
      BlockWrite w = Write(State(b, group), v, Key(b), BlockRole::kState);
      ASSERT_TRUE(store_->PutAtomic(tenant_, std::span(&w, 1)).ok());
    }
  }

  ResumeMatch Lookup(size_t blocks, std::vector<StateGroup> groups) {
    std::vector<BlockKey> keys;
    for (size_t i = 0; i < blocks; ++i) keys.push_back(Key(i));
    ResumeQuery q;
    q.groups = std::move(groups);
    q.all_lengths = true;
    Result<ResumeMatch> m = store_->LookupResume(tenant_, keys, q);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : ResumeMatch{};
  }

  bool Has(const BlockKey& key) { return store_->Get(tenant_, key).ok(); }

  ManualClockEnv env_;
  std::unique_ptr<Store> store_;
  TenantId tenant_;
};

TEST_F(StoreStateTest, AResumeNeedsTheStateAtItsBoundary) {
  Open(64);
  PutChain(0, 7);
  PutStates("mamba", {3, 5});
  ResumeMatch m = Lookup(8, {{"mamba", 1}});
  EXPECT_EQ(m.kv_blocks, 8u);
  EXPECT_EQ(m.resume_blocks, 6u);  // After block 5: the last boundary with a state.
  EXPECT_EQ(m.resumable, (std::vector<uint32_t>{4, 6}));
  EXPECT_EQ(m.group_blocks, (std::vector<uint32_t>{6}));
  EXPECT_EQ(m.tiers.size(), 8u);
  // Without groups it is a prefix lookup in blocks.
  ResumeMatch plain = Lookup(8, {});
  EXPECT_EQ(plain.resume_blocks, 8u);
  EXPECT_EQ(plain.resumable.size(), 8u);
}

TEST_F(StoreStateTest, ASlidingWindowNeedsItsLastBlocksAndAPerTokenCacheNeedsEveryBlock) {
  Open(64);
  PutChain(0, 7);
  PutStates("swa", {1, 2, 4, 5, 6});
  PutStates("indexer", {0, 1, 2, 3, 4});
  // A window of 2 blocks: a resume after block i needs i-1 and i.
  ResumeMatch swa = Lookup(8, {{"swa", 2}});
  EXPECT_EQ(swa.resumable, (std::vector<uint32_t>{3, 6, 7}));
  // Every block up to the boundary: a prefix of values.
  ResumeMatch indexer = Lookup(8, {{"indexer", 0}});
  EXPECT_EQ(indexer.resumable, (std::vector<uint32_t>{1, 2, 3, 4, 5}));
  // Together: only the lengths both allow.
  ResumeMatch both = Lookup(8, {{"swa", 2}, {"indexer", 0}});
  EXPECT_EQ(both.resumable, (std::vector<uint32_t>{3}));
  EXPECT_EQ(both.resume_blocks, 3u);
  EXPECT_EQ(both.group_blocks, (std::vector<uint32_t>{7, 5}));
  // A window longer than the prefix needs the blocks there are.
  ResumeMatch wide = Lookup(3, {{"indexer", 100}});
  EXPECT_EQ(wide.resumable, (std::vector<uint32_t>{1, 2, 3}));
}

TEST_F(StoreStateTest, AResumeNeverGoesPastTheKvPrefix) {
  Open(64);
  PutChain(0, 3);
  PutStates("mamba", {3});
  ASSERT_TRUE(store_->Delete(tenant_, Key(2)).ok());
  ResumeMatch m = Lookup(4, {{"mamba", 1}});
  EXPECT_EQ(m.kv_blocks, 2u);
  EXPECT_EQ(m.resume_blocks, 0u);  // The state after block 3 needs blocks 0..3.
  EXPECT_TRUE(m.resumable.empty());
}

TEST_F(StoreStateTest, AGroupNeverStoredResumesNothing) {
  Open(64);
  PutChain(0, 3);
  PutStates("mamba", {3});
  ResumeMatch m = Lookup(4, {{"mamba", 1}, {"conv", 1}});
  EXPECT_EQ(m.kv_blocks, 4u);
  EXPECT_EQ(m.resume_blocks, 0u);
  EXPECT_EQ(m.group_blocks, (std::vector<uint32_t>{4, 0}));
}

TEST_F(StoreStateTest, SeveralKeysPerBlockMustAllBePresent) {
  Open(64);
  // Blocks of two keys (K and V apart): block i is keys 2i and 2i+1, its state hangs off 2i.
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(store_->Put(tenant_, Key(i), Value(i)).ok());
  PutStates("mamba", {2, 4});  // Blocks 1 and 2.
  ASSERT_TRUE(store_->Delete(tenant_, Key(5)).ok());  // Block 2 loses its V.
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 8; ++i) keys.push_back(Key(i));
  ResumeQuery q{2, {{"mamba", 1}}, true};
  Result<ResumeMatch> m = store_->LookupResume(tenant_, keys, q);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kv_blocks, 2u);
  EXPECT_EQ(m->resumable, (std::vector<uint32_t>{2}));
  EXPECT_EQ(m->tiers.size(), 4u);
}

TEST_F(StoreStateTest, BadQueriesGetClearErrors) {
  Open(16);
  std::vector<BlockKey> keys = {Key(0), Key(1), Key(2)};
  auto code = [&](ResumeQuery q) { return store_->LookupResume(tenant_, keys, q).status().code(); };
  EXPECT_EQ(code({2, {}, false}), StatusCode::kInvalidArgument);  // 3 keys, 2 per block.
  EXPECT_EQ(code({0, {}, false}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1, {{"a b", 1}}, false}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1, {{"m", 1}, {"m", 2}}, false}), StatusCode::kInvalidArgument);
  std::vector<StateGroup> many;
  for (size_t i = 0; i <= kMaxStateGroups; ++i) many.push_back({"g" + std::to_string(i), 1});
  EXPECT_EQ(code({1, many, false}), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->LookupResume(TenantId{7}, keys, {}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(StoreStateTest, AnAtomicPutStoresAllOrNothing) {
  Open(16);
  std::vector<std::byte> v0 = Value(0), v1 = Value(1), empty;
  std::vector<BlockWrite> writes = {Write(Key(0), v0), Write(Key(1), v1, Key(0)),
                                    Write(Key(2), empty, Key(1))};
  EXPECT_EQ(store_->PutAtomic(tenant_, writes).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(Has(Key(0)));
  EXPECT_FALSE(Has(Key(1)));
  writes.pop_back();
  ASSERT_TRUE(store_->PutAtomic(tenant_, writes).ok());
  EXPECT_TRUE(Has(Key(0)) && Has(Key(1)));
  // Again: present keys count as stored.
  EXPECT_TRUE(store_->PutAtomic(tenant_, writes).ok());
  EXPECT_EQ(store_->Stats().blocks, 2u);
}

TEST_F(StoreStateTest, AnAtomicPutTooLargeForG2IsRefusedWithoutEvictingAnything) {
  Open(4);
  PutChain(0, 1);
  std::vector<std::vector<std::byte>> values;
  std::vector<BlockWrite> writes;
  for (uint64_t i = 10; i < 15; ++i) values.push_back(Value(i));
  for (uint64_t i = 0; i < 5; ++i) writes.push_back(Write(Key(10 + i), values[i]));
  EXPECT_EQ(store_->PutAtomic(tenant_, writes).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(Key(0)) && Has(Key(1)));
  // One that fits evicts what it needs, and is then whole.
  writes.resize(3);
  ASSERT_TRUE(store_->PutAtomic(tenant_, writes).ok());
  EXPECT_TRUE(Has(Key(10)) && Has(Key(11)) && Has(Key(12)));
}

TEST_F(StoreStateTest, AStateValueNeedsItsBlock) {
  Open(16);
  std::vector<std::byte> v = Value(7, 4096);
  BlockWrite orphan = Write(State(5, "mamba"), v, std::nullopt, BlockRole::kState);
  EXPECT_EQ(store_->PutAtomic(tenant_, std::span(&orphan, 1)).code(),
            StatusCode::kInvalidArgument);  // No parent named.
  PutOptions state_only;
  state_only.role = BlockRole::kState;
  EXPECT_EQ(store_->Put(tenant_, orphan.key, v, state_only).code(),
            StatusCode::kInvalidArgument);
  orphan.parent = Key(5);
  EXPECT_EQ(store_->PutAtomic(tenant_, std::span(&orphan, 1)).code(),
            StatusCode::kFailedPrecondition);  // Block 5 is not stored.
  EXPECT_FALSE(Has(orphan.key));
  // With its block in the same put, or stored before, it is accepted.
  std::vector<std::byte> kv = Value(5);
  std::vector<BlockWrite> both = {Write(Key(5), kv, std::nullopt, BlockRole::kKvNeedsState),
                                  orphan};
  ASSERT_TRUE(store_->PutAtomic(tenant_, both).ok());
  BlockWrite again = Write(State(5, "conv"), v, Key(5), BlockRole::kState);
  EXPECT_TRUE(store_->PutAtomic(tenant_, std::span(&again, 1)).ok());
}

TEST_F(StoreStateTest, ReadersSeeAnAtomicPutWholeOrNotAtAll) {
  Open(64);  // Room for everything: no eviction, so a put's blocks stay once seen.
  constexpr uint64_t kPuts = 2000;
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> torn{0};
  std::thread reader([&] {
    for (;;) {
      const uint64_t i = done.load();
      // The put after the last finished one may be in flight: a lookup of both its keys, in
      // G2 under one lock, finds 0 or 2, never the first alone.
      const std::vector<BlockKey> keys = {Key(2 * i), Key(2 * i + 1)};
      Result<PrefixMatch> m = store_->LookupPrefix(tenant_, keys);
      if (m.ok() && m->num_blocks == 1) torn.fetch_add(1);
      if (i >= kPuts) return;
    }
  });
  std::vector<std::byte> small = Value(1, 512);
  for (uint64_t i = 0; i < kPuts; ++i) {
    std::vector<BlockWrite> w = {Write(Key(2 * i), small), Write(Key(2 * i + 1), small, Key(2 * i))};
    ASSERT_TRUE(store_->PutAtomic(tenant_, w).ok());
    ASSERT_TRUE(store_->Delete(tenant_, Key(2 * i)).ok());  // Keep G2 from filling up.
    ASSERT_TRUE(store_->Delete(tenant_, Key(2 * i + 1)).ok());
    done.store(i + 1);
  }
  reader.join();
  EXPECT_EQ(torn.load(), 0u);
}

TEST_F(StoreStateTest, KvThatLostItsStateIsEvictedFirst) {
  Open(10);
  // Chain B (older): b0, b1 and the state after b1. Chain A: a0..a2 and the state after a2.
  PutChain(100, 101);
  PutStates("mamba", {101});
  PutChain(0, 2);
  PutStates("mamba", {2});
  // A's state goes (deleted here; evicted or expired alike): a2 is KV nobody can resume from.
  ASSERT_TRUE(store_->Delete(tenant_, State(2, "mamba")).ok());
  // Five more blocks need room for one: a2 goes, not B's older blocks or state.
  for (uint64_t i = 200; i < 205; ++i) ASSERT_TRUE(store_->Put(tenant_, Key(i), Value(i)).ok());
  EXPECT_FALSE(Has(Key(2)));
  EXPECT_TRUE(Has(Key(100)) && Has(Key(101)) && Has(State(101, "mamba")));
  EXPECT_TRUE(Has(Key(0)) && Has(Key(1)));
}

TEST_F(StoreStateTest, PlainKvIsNotAffectedByTheStateRules) {
  Open(4);
  // kKv blocks without children keep their LRU order: the oldest goes first.
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(store_->Put(tenant_, Key(i), Value(i)).ok());
  ASSERT_TRUE(store_->Put(tenant_, Key(9), Value(9)).ok());
  EXPECT_FALSE(Has(Key(0)));
  EXPECT_TRUE(Has(Key(1)) && Has(Key(2)) && Has(Key(3)));
}

TEST_F(StoreStateTest, APayloadFreeStoreKeepsTheSameBooks) {
  Options o;
  o.memory.capacity_bytes = 16 * kBlock;
  o.max_block_bytes = kBlock;
  o.payload_free = true;
  o.env = &env_;
  store_ = std::move(Store::Open(o)).value();
  tenant_ = *store_->FindTenant("default");
  PutChain(0, 3);
  PutStates("mamba", {1, 3});
  EXPECT_EQ(Lookup(4, {{"mamba", 1}}).resumable, (std::vector<uint32_t>{2, 4}));
}

}  // namespace
}  // namespace kvtier
