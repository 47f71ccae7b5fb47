// The Store with G2 and G3 together, on a real directory: demotion of evicted blocks,
// admission, promotion on hit, prefix lookups across tiers, deletes on every tier, and
// persistence across a reopen.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "kvtier/events.h"
#include "kvtier/store.h"
#include "src/env/fault_injection_env.h"

namespace kvtier {
namespace {

constexpr uint64_t kBlock = 64 * kKiB;

BlockKey Key(uint64_t v) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &v, sizeof(v));
  b[31] = 0x3a;
  return BlockKey(b);
}

std::vector<std::byte> Value(uint64_t k) {
  std::vector<std::byte> v(kBlock);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::byte(static_cast<uint8_t>(k * 31 + i / 7));
  return v;
}

class StoreTieringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtier_tiering_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // G2 holds `memory_blocks` blocks; G3 has room for many more.
  void Open(uint64_t memory_blocks, AdmissionOptions admission = {.frequency_gate = false},
            BlockEventListener* events = nullptr) {
    store_.reset();
    Options o;
    o.event_listener = events;
    o.memory.capacity_bytes = memory_blocks * kBlock;
    o.max_block_bytes = kBlock;
    o.disk.dir = dir_.string();
    o.disk.capacity_bytes = 64 * kMiB;
    o.disk.segment_bytes = 4 * kMiB;
    o.disk_admission = admission;
    Result<std::unique_ptr<Store>> s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    tenant_ = *store_->FindTenant("default");
  }

  Status Put(uint64_t k, std::optional<uint64_t> parent = std::nullopt) {
    PutOptions po;
    if (parent) po.parent = Key(*parent);
    return store_->Put(tenant_, Key(k), Value(k), po);
  }

  bool Has(uint64_t k) {
    std::vector<std::byte> out(kBlock);
    Result<size_t> n = store_->Read(tenant_, Key(k), out);
    if (!n.ok()) return false;
    EXPECT_EQ(out, Value(k)) << "block " << k << " came back with wrong bytes";
    return true;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
  TenantId tenant_;
};

TEST_F(StoreTieringTest, EvictedBlocksAreServedFromWhereverTheyAre) {
  Open(4);
  for (uint64_t k = 0; k < 40; ++k) ASSERT_TRUE(Put(k).ok());
  // With the frequency gate off, every one of the 36 evictions is admitted to G3.
  EXPECT_EQ(store_->Stats().admitted_blocks, 36u);
  // Every block is in G2, on its way to G3, or in G3: none is lost, none waits.
  for (uint64_t k = 0; k < 40; ++k) EXPECT_TRUE(Has(k)) << "block " << k;
}

// Everything held, listed a slot at a time: G2's blocks with their parents and depths, then G3's,
// each exactly once per tier, and nothing deleted; across a reopen, what G3 recovered.
TEST_F(StoreTieringTest, ListHeldNamesEveryBlockOfEachTierOnceWithItsChain) {
  Open(4);
  for (uint64_t k = 0; k < 12; ++k) {
    ASSERT_TRUE(Put(k, k == 0 ? std::nullopt : std::optional<uint64_t>(k - 1)).ok());
  }
  ASSERT_TRUE(store_->Delete(tenant_, Key(3)).ok());
  const auto list = [&](size_t slots) {
    std::map<BlockMedium, std::map<BlockKey, HeldBlock>> held;
    uint64_t cursor = 0;
    for (int calls = 0; cursor != Store::kHeldEnd; ++calls) {
      EXPECT_LT(calls, 10000) << "the cursor does not advance";
      Result<std::vector<HeldBlock>> part = store_->ListHeld(tenant_, &cursor, slots);
      EXPECT_TRUE(part.ok()) << part.status().ToString();
      if (!part.ok()) break;
      for (const HeldBlock& b : *part) {
        EXPECT_TRUE(held[b.medium].emplace(b.key, b).second) << "listed twice";
      }
    }
    return held;
  };
  for (size_t slots : {1, 3, 4096}) {
    auto held = list(slots);
    ASSERT_EQ(held[BlockMedium::kCpu].size(), 4u) << slots;  // G2 holds the last four.
    // Block 8's parent was evicted to make room for it (tails first): the chain in G2 starts
    // there.
    const uint16_t head = held[BlockMedium::kCpu].at(Key(8)).depth;
    for (uint64_t k = 9; k < 12; ++k) {
      const HeldBlock& b = held[BlockMedium::kCpu].at(Key(k));
      ASSERT_TRUE(b.parent.has_value()) << "block " << k;
      EXPECT_EQ(*b.parent, Key(k - 1));
      EXPECT_EQ(b.depth, head + (k - 8));
    }
    EXPECT_EQ(held[BlockMedium::kDisk].size(), 7u) << "blocks 0-7 but the deleted 3";
    EXPECT_FALSE(held[BlockMedium::kDisk].contains(Key(3)));
  }
  Open(4);  // G2 is volatile here; G3 recovers its blocks, and lists them.
  auto held = list(2);
  EXPECT_TRUE(held[BlockMedium::kCpu].empty());
  EXPECT_EQ(held[BlockMedium::kDisk].size(), 7u);
  TenantId unknown{99};
  uint64_t cursor = 0;
  EXPECT_EQ(store_->ListHeld(unknown, &cursor, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTieringTest, BlocksSurviveAReopenThroughG3) {
  Open(4);
  for (uint64_t k = 0; k < 20; ++k) ASSERT_TRUE(Put(k).ok());
  Open(4);  // Closing drains the demotions in flight; G2's own contents are volatile.
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks, 0u);
  EXPECT_GE(s.disk_blocks, 16u);
  for (uint64_t k = 0; k < 16; ++k) EXPECT_TRUE(Has(k)) << "block " << k;
}

// Whether thread `tid` of this process is asleep (blocked), as /proc says.
bool Asleep(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t end = text.rfind(')');  // The state follows the command's name.
  return end != std::string::npos && end + 2 < text.size() && text[end + 2] == 'S';
}

TEST_F(StoreTieringTest, APutWaitsForCopiesHoldingAllOfG2InsteadOfFailing) {
  // Every G2 block under a lease for a copy to another tier (a flush to G3 here; G4 uploads on
  // put take the same leases): nothing is evictable, but the copies end on their own, so a put
  // waits for them. It failed with ResourceExhausted (CI's kv-events test met it under load,
  // its blocks all leased by G4 uploads).
  FaultInjectionEnv env(Env::Default());
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false;  // G3's writes wait while set...
  bool held = false;  // ...and one has.
  env.AddFault({.op = FaultInjectionEnv::Op::kWrite, .path_filter = [&](const std::string&) {
                  std::unique_lock l(mu);
                  held = held || hold;
                  cv.notify_all();
                  cv.wait(l, [&] { return !hold; });
                  return false;  // Not a fault: the write goes on once let.
                }});
  Options o;
  o.env = &env;
  o.memory.capacity_bytes = 4 * kBlock;
  o.max_block_bytes = kBlock;
  o.disk.dir = dir_.string();
  o.disk.capacity_bytes = 64 * kMiB;
  o.disk.segment_bytes = 4 * kMiB;
  o.disk_admission = {.frequency_gate = false};
  Result<std::unique_ptr<Store>> opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store_ = std::move(opened).value();
  tenant_ = *store_->FindTenant("default");
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(Put(k).ok());
  {
    std::lock_guard l(mu);
    hold = true;
  }
  std::thread flush([&] { EXPECT_TRUE(store_->Flush(tenant_).ok()); });
  {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return held; });  // The flush holds its leases on all four.
  }
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  Status put;
  std::thread writer([&] {
    tid = gettid();
    put = Put(4);
    done = true;
  });
  while (!done && (tid == 0 || !Asleep(tid))) std::this_thread::yield();
  {
    std::lock_guard l(mu);
    hold = false;
  }
  cv.notify_all();
  writer.join();
  flush.join();
  EXPECT_TRUE(put.ok()) << put.ToString();
  for (uint64_t k = 0; k <= 4; ++k) EXPECT_TRUE(Has(k)) << "block " << k;
  store_.reset();  // Before the Env it uses.
}

TEST_F(StoreTieringTest, FlushMakesEveryBlockInDramDurableOnceAndKeepsItInDram) {
  // The frequency gate would keep all of these out of G3 on eviction.
  Open(16, AdmissionOptions{});
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(Put(k).ok());
  Result<uint64_t> written = store_->Flush(tenant_);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, 10u);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks, 10u) << "flushed blocks stay in G2";
  EXPECT_EQ(s.disk_blocks, 10u);
  ASSERT_TRUE(Put(10).ok());
  EXPECT_EQ(*store_->Flush(tenant_), 1u) << "only what G3 lacks is written";
  Open(16, AdmissionOptions{});  // G2 is volatile here (no arena file); G3 is not.
  for (uint64_t k = 0; k <= 10; ++k) EXPECT_TRUE(Has(k)) << "block " << k;

  Options no_g3;
  no_g3.memory.capacity_bytes = 4 * kBlock;
  no_g3.max_block_bytes = kBlock;
  std::unique_ptr<Store> memory_only = std::move(Store::Open(no_g3)).value();
  EXPECT_EQ(memory_only->Flush(*memory_only->FindTenant("default")).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(StoreTieringTest, PrefixLookupSpansTiersAndAHitIsPromoted) {
  Open(4);
  for (uint64_t k = 0; k < 8; ++k) {
    ASSERT_TRUE(Put(k, k == 0 ? std::nullopt : std::optional<uint64_t>(k - 1)).ok());
  }
  Open(4);  // Everything evicted so far is in G3 now, and G2 starts empty.
  std::vector<BlockKey> keys;
  for (uint64_t k = 0; k < 8; ++k) keys.push_back(Key(k));
  Result<PrefixMatch> m = store_->LookupPrefix(tenant_, keys);
  ASSERT_TRUE(m.ok());
  ASSERT_GE(m->num_blocks, 4u);
  EXPECT_EQ(m->tiers[0], TierLevel::kG3);
  // Reading block 0 promotes it: the next lookup finds it in DRAM.
  ASSERT_TRUE(Has(0));
  m = store_->LookupPrefix(tenant_, keys);
  EXPECT_EQ(m->tiers[0], TierLevel::kG2);
  EXPECT_EQ(m->tiers[1], TierLevel::kG3);
  EXPECT_EQ(store_->Stats().promoted_blocks, 1u);
}

TEST_F(StoreTieringTest, FrequencyGateSkipsBlocksNobodyReadAgain) {
  Open(4, AdmissionOptions{.frequency_gate = true, .min_accesses = 2});
  // Blocks 0..9 are read once after their put (two accesses); 100..109 never.
  for (uint64_t k = 0; k < 10; ++k) {
    ASSERT_TRUE(Put(k).ok());
    ASSERT_TRUE(Has(k));
  }
  for (uint64_t k = 100; k < 110; ++k) ASSERT_TRUE(Put(k).ok());
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.admitted_blocks + s.skipped_infrequent, 16u);  // 20 puts into 4 blocks of G2.
  EXPECT_GT(s.skipped_infrequent, 0u);
  Open(4, AdmissionOptions{.frequency_gate = true, .min_accesses = 2});
  for (uint64_t k = 100; k < 110; ++k) EXPECT_FALSE(Has(k)) << "never-read block " << k;
  int read_again_on_disk = 0;
  for (uint64_t k = 0; k < 10; ++k) read_again_on_disk += Has(k);
  EXPECT_EQ(read_again_on_disk, static_cast<int>(s.admitted_blocks));
}

TEST_F(StoreTieringTest, ShortPrefixesAreNotWrittenToG3) {
  const AdmissionOptions admission{.min_prefix_blocks = 4, .frequency_gate = false};
  Open(8, admission);
  // A 3-block chain and a 5-block chain, then filler that pushes them all out of G2.
  for (uint64_t k = 0; k < 3; ++k) {
    ASSERT_TRUE(Put(k, k == 0 ? std::nullopt : std::optional<uint64_t>(k - 1)).ok());
  }
  for (uint64_t k = 10; k < 15; ++k) {
    ASSERT_TRUE(Put(k, k == 10 ? std::nullopt : std::optional<uint64_t>(k - 1)).ok());
  }
  for (uint64_t k = 100; k < 116; ++k) ASSERT_TRUE(Put(k).ok());
  EXPECT_EQ(store_->Stats().skipped_short_prefix, 3u + 16u - 8u);
  Open(8, admission);
  std::vector<BlockKey> short_chain = {Key(0), Key(1), Key(2)};
  EXPECT_EQ(store_->LookupPrefix(tenant_, short_chain)->num_blocks, 0u);
  std::vector<BlockKey> long_chain_all = {Key(10), Key(11), Key(12), Key(13), Key(14)};
  EXPECT_EQ(store_->LookupPrefix(tenant_, long_chain_all)->num_blocks, 5u);
}

// Records events as (medium, key) sets and parents; thread-safe, as the Store requires.
class Recorder final : public BlockEventListener {
 public:
  void OnStored(uint32_t, const BlockKey& key, const BlockKey* parent, BlockMedium m,
                const EngineHash*) override {
    std::lock_guard l(mu_);
    stored[m].insert(key);
    if (m == BlockMedium::kCpu) parents[key] = parent ? std::optional(*parent) : std::nullopt;
    stored_more_.notify_all();
  }
  void OnRemoved(uint32_t, const BlockKey& key, BlockMedium m) override {
    std::lock_guard l(mu_);
    removed[m].insert(key);
  }
  void OnCleared(uint32_t tenant) override {
    std::lock_guard l(mu_);
    cleared.push_back(tenant);
  }
  // Until `medium` has taken `n` blocks (events come from the store's threads).
  void WaitForStored(BlockMedium medium, size_t n) {
    std::unique_lock l(mu_);
    stored_more_.wait(l, [&] { return stored[medium].size() >= n; });
  }
  std::mutex mu_;
  std::condition_variable stored_more_;
  std::map<BlockMedium, std::set<BlockKey>> stored, removed;
  std::map<BlockKey, std::optional<BlockKey>> parents;
  std::vector<uint32_t> cleared;
};

TEST_F(StoreTieringTest, EventsTellWhatEachTierGainsAndLoses) {
  Recorder r;
  Open(2, {.frequency_gate = false}, &r);
  for (uint64_t k = 0; k < 6; ++k) {
    ASSERT_TRUE(Put(k, k == 0 ? std::nullopt : std::optional<uint64_t>(k - 1)).ok());
  }
  store_.reset();  // Drains the demotions in flight.
  std::set<BlockKey> all, in_g2;
  for (uint64_t k = 0; k < 6; ++k) all.insert(Key(k));
  EXPECT_EQ(r.stored[BlockMedium::kCpu], all);
  EXPECT_EQ(r.parents[Key(0)], std::nullopt);
  EXPECT_EQ(r.parents[Key(3)], Key(2));
  // Every block evicted from G2 was written to G3 (no frequency gate), and said so.
  EXPECT_FALSE(r.removed[BlockMedium::kCpu].empty());
  EXPECT_EQ(r.stored[BlockMedium::kDisk], r.removed[BlockMedium::kCpu]);
  EXPECT_TRUE(r.removed[BlockMedium::kDisk].empty());

  Recorder again;
  Open(2, {.frequency_gate = false}, &again);  // What G3 recovers is not announced.
  EXPECT_TRUE(again.stored[BlockMedium::kDisk].empty());
  const BlockKey on_disk = *r.stored[BlockMedium::kDisk].begin();
  ASSERT_TRUE(store_->Delete(tenant_, on_disk).ok());
  EXPECT_EQ(again.removed[BlockMedium::kDisk], std::set<BlockKey>{on_disk});
  ASSERT_TRUE(store_->DeleteTenant(tenant_, "test").ok());
  EXPECT_EQ(again.cleared, std::vector<uint32_t>{tenant_.value});
  EXPECT_EQ(again.removed[BlockMedium::kDisk].size(), r.stored[BlockMedium::kDisk].size());
  store_.reset();
}

// A put into a full G2 demotes ahead of its need (an eighth of G2 here: 4 blocks), so that G3
// is handed several blocks per write, I/Os in flight together, rather than one block, the one
// the put waits for, at a time. The first write carries 4 blocks whatever the timing (put 33
// queues them at once); later ones depend on how far the puts run ahead of the Demoter.
TEST_F(StoreTieringTest, APutIntoAFullG2HandsG3SeveralBlocksPerWrite) {
  Recorder r;
  // The store goes before the listener it calls, also when an assertion ends the test early.
  struct ResetFirst {
    std::unique_ptr<Store>& store;
    ~ResetFirst() { store.reset(); }
  } reset_first{store_};
  Open(32, {.frequency_gate = false}, &r);
  for (uint64_t k = 0; k < 36; ++k) ASSERT_TRUE(Put(k).ok());
  // Only puts evict: every admission has happened, and once G3 has taken them all, every write
  // that carried them has begun.
  const uint64_t admitted = store_->Stats().admitted_blocks;
  ASSERT_GE(admitted, 4u);
  r.WaitForStored(BlockMedium::kDisk, admitted);
  EXPECT_LT(store_->Stats().demotion_writes, admitted);
  for (uint64_t k = 0; k < 36; ++k) EXPECT_TRUE(Has(k)) << "block " << k;
}

TEST_F(StoreTieringTest, DeleteRemovesEveryCopy) {
  Open(2);
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(Put(k).ok());
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(store_->Delete(tenant_, Key(k)).ok()) << k;
  for (uint64_t k = 0; k < 10; ++k) EXPECT_FALSE(Has(k)) << "block " << k;
  EXPECT_EQ(store_->Delete(tenant_, Key(3)).code(), StatusCode::kNotFound);
  Open(2);
  for (uint64_t k = 0; k < 10; ++k) EXPECT_FALSE(Has(k)) << "block " << k << " after reopen";
}

TEST_F(StoreTieringTest, ReplaceKeepsTheSameBytesAndReplacesOthersInEveryTier) {
  Open(2);
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(store_->Replace(tenant_, Key(k), Value(k)).ok());
  Open(2);  // Now every block is in G3 only.
  ASSERT_EQ(store_->Stats().blocks, 0u);
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(store_->Replace(tenant_, Key(k), Value(k)).ok());
  EXPECT_EQ(store_->Stats().blocks, 0u) << "the same bytes in G3: nothing stored again";
  EXPECT_EQ(store_->StatsForTenant(tenant_)->deletes, 0u);
  ASSERT_TRUE(store_->Replace(tenant_, Key(5), Value(50)).ok());
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(store_->Read(tenant_, Key(5), out).ok());
  EXPECT_EQ(out, Value(50));
  ASSERT_TRUE(store_->Replace(tenant_, Key(5), Value(51)).ok()) << "a value in G2 replaced again";
  ASSERT_TRUE(store_->Read(tenant_, Key(5), out).ok());
  EXPECT_EQ(out, Value(51));
  Open(2);  // G2 is volatile: the new value is gone with it; the old one must stay gone.
  EXPECT_EQ(store_->Read(tenant_, Key(5), out).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTieringTest, CommitReplaceKeepsTheSameBytesAndReplacesOthersInG3) {
  // What an S3 PUT of a name the daemon did not know stores: bytes written into an allocation.
  auto commit = [&](uint64_t k, const std::vector<std::byte>& value) {
    Result<BlockAllocation> a = store_->Allocate(tenant_, Key(k), value.size());
    if (!a.ok()) return a.status();
    size_t offset = 0;
    for (std::span<std::byte> piece : a->extents()) {
      std::memcpy(piece.data(), value.data() + offset, piece.size());
      offset += piece.size();
    }
    return store_->CommitReplace(std::move(*a));
  };
  Open(2);
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(commit(k, Value(k)).ok());
  EXPECT_EQ(store_->Allocate(tenant_, Key(3), kBlock).status().code(), StatusCode::kAlreadyExists)
      << "G2 holds it: the caller replaces the value whole (Replace)";
  Open(2);  // Now every block is in G3 only.
  ASSERT_TRUE(commit(0, Value(0)).ok());
  EXPECT_EQ(store_->Stats().blocks, 0u) << "the same bytes in G3: nothing stored again";
  EXPECT_EQ(store_->StatsForTenant(tenant_)->deletes, 0u);
  ASSERT_TRUE(commit(1, Value(10)).ok());
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(store_->Read(tenant_, Key(1), out).ok());
  EXPECT_EQ(out, Value(10));
  ASSERT_TRUE(commit(5, Value(5)).ok()) << "a key no tier holds";
  ASSERT_TRUE(store_->Read(tenant_, Key(5), out).ok());
  EXPECT_EQ(out, Value(5));
  Open(2);  // G2 is volatile: the new value is gone with it; G3's old one must be gone too.
  EXPECT_EQ(store_->Read(tenant_, Key(1), out).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Read(tenant_, Key(0), out).ok());
  EXPECT_EQ(out, Value(0));
}

TEST_F(StoreTieringTest, PinBringsAG3BlockBackToDram) {
  Open(2);
  for (uint64_t k = 0; k < 6; ++k) ASSERT_TRUE(Put(k).ok());
  Open(2);
  ASSERT_TRUE(store_->Pin(tenant_, Key(0)).ok());
  for (uint64_t k = 20; k < 30; ++k) ASSERT_TRUE(Put(k).ok());
  std::vector<BlockKey> keys = {Key(0)};
  EXPECT_EQ(store_->LookupPrefix(tenant_, keys)->tiers, std::vector<TierLevel>{TierLevel::kG2});
}

TEST_F(StoreTieringTest, AChainLongerThanDramLeavesItABlockAtATimeForAnAtomicPut) {
  // G2 holds 8 blocks; a chain of 20 leaves it tail first, each block through G3. The tip and a
  // state of three blocks' size, in one atomic put, need room that only the chain's older
  // blocks can give, each once its child has gone down: the put waits for those demotions
  // instead of failing, and everything is readable afterwards.
  Options o;
  o.memory.capacity_bytes = 8 * kBlock;
  o.max_block_bytes = 4 * kBlock;
  o.disk.dir = dir_.string();
  o.disk.capacity_bytes = 64 * kMiB;
  o.disk.segment_bytes = 4 * kMiB;
  o.disk_admission = {.frequency_gate = false};
  store_ = std::move(Store::Open(o)).value();
  tenant_ = *store_->FindTenant("default");
  for (uint64_t i = 0; i < 20; ++i) {
    ASSERT_TRUE(Put(i, i > 0 ? std::optional<uint64_t>(i - 1) : std::nullopt).ok()) << i;
  }
  std::vector<std::byte> tip = Value(20);
  std::vector<std::byte> state(3 * kBlock - 4096, std::byte{7});
  std::vector<BlockWrite> writes(2);
  writes[0].key = Key(20);
  writes[0].value = tip;
  writes[0].parent = Key(19);
  writes[0].role = BlockRole::kKvNeedsState;
  writes[1].key = *StateKey(Key(20), "mamba");
  writes[1].value = state;
  writes[1].parent = Key(20);
  writes[1].role = BlockRole::kState;
  Status put = store_->PutAtomic(tenant_, writes);
  ASSERT_TRUE(put.ok()) << put.ToString();
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i <= 20; ++i) keys.push_back(Key(i));
  Result<ResumeMatch> m = store_->LookupResume(tenant_, keys, {1, {{"mamba", 1}}, false});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->resume_blocks, 21u);
  for (uint64_t i = 0; i <= 20; ++i) EXPECT_TRUE(Has(i)) << i;
}

}  // namespace
}  // namespace kvtier
