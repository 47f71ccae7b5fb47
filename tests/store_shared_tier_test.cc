// Stores of several "nodes" sharing one G4 directory (SharedFsTier): a block put on one node
// is a hit on another, prefix lookups reach G4 in one round and go on in G3 past it,
// deletions by session and tenant reach G4, encrypted G4 objects open only with the tenant's
// key.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "kvtier/store.h"
#include "src/env/fault_injection_env.h"
#include "src/tier/disk/disk_test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlock = 64 * kKiB;

BlockKey Key(uint64_t v) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &v, sizeof(v));
  b[31] = 0x64;
  return BlockKey(b);
}

std::vector<std::byte> Value(uint64_t k) {
  std::vector<std::byte> v(kBlock);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::byte(static_cast<uint8_t>(k * 13 + i / 5));
  return v;
}

class StoreSharedTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvtier_g4store_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "g4");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A node: G2 of `memory_blocks` blocks, no G3, G4 on the shared directory.
  Options NodeOptions(const std::string& node, uint64_t memory_blocks,
                      SharedTierOptions::WritePolicy policy) {
    Options o;
    o.memory.capacity_bytes = memory_blocks * kBlock;
    o.max_block_bytes = kBlock;
    o.disk_admission = {.frequency_gate = false};
    o.shared.location = (dir_ / "g4").string();
    o.shared.node_id = node;
    o.shared.write_policy = policy;
    o.shared.sync = false;
    o.shared.janitor_interval_seconds = 0;
    o.tenants = {TenantOptions{"acme"}, TenantOptions{"globex"}};
    return o;
  }

  static std::unique_ptr<Store> Open(const Options& o) {
    Result<std::unique_ptr<Store>> s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static bool Has(Store* store, TenantId t, uint64_t k) {
    std::vector<std::byte> out(kBlock);
    Result<size_t> n = store->Read(t, Key(k), out);
    if (!n.ok()) return false;
    EXPECT_EQ(out, Value(k)) << "block " << k << " came back with wrong bytes";
    return true;
  }

  fs::path dir_;
};

TEST_F(StoreSharedTierTest, ABlockPutOnOneNodeIsAHitOnAnother) {
  const auto kOnPut = SharedTierOptions::WritePolicy::kOnPut;
  std::unique_ptr<Store> a = Open(NodeOptions("node-a", 8, kOnPut));
  std::unique_ptr<Store> c = Open(NodeOptions("node-c", 8, kOnPut));
  ASSERT_TRUE(a && c);
  const TenantId acme = *a->FindTenant("acme");
  for (uint64_t k = 0; k < 4; ++k) {
    PutOptions po;
    if (k > 0) po.parent = Key(k - 1);
    ASSERT_TRUE(a->Put(acme, Key(k), Value(k), po).ok());
  }
  a.reset();  // Closing uploads what is queued.
  std::vector<BlockKey> keys;
  for (uint64_t k = 0; k < 5; ++k) keys.push_back(Key(k));
  Result<PrefixMatch> match = c->LookupPrefix(acme, keys);
  ASSERT_TRUE(match.ok());
  EXPECT_EQ(match->num_blocks, 4u);
  for (TierLevel t : match->tiers) EXPECT_EQ(t, TierLevel::kG4);
  for (uint64_t k = 0; k < 4; ++k) EXPECT_TRUE(Has(c.get(), acme, k)) << k;
  // Promoted: the next lookup finds them in DRAM.
  match = c->LookupPrefix(acme, keys);
  ASSERT_TRUE(match.ok());
  EXPECT_EQ(match->tiers.front(), TierLevel::kG2);
  // Another tenant never sees them.
  EXPECT_FALSE(Has(c.get(), *c->FindTenant("globex"), 0));
  StoreStats stats = c->Stats();
  EXPECT_GE(stats.shared_hits, 4u);
}

TEST_F(StoreSharedTierTest, APrefixGoesOnInG3PastABlockOnlyG4Holds) {
  const auto kOnPut = SharedTierOptions::WritePolicy::kOnPut;
  const auto kOnDemotion = SharedTierOptions::WritePolicy::kOnDemotion;
  std::unique_ptr<Store> a = Open(NodeOptions("node-a", 8, kOnPut));
  ASSERT_TRUE(a);
  const TenantId acme = *a->FindTenant("acme");
  ASSERT_TRUE(a->Put(acme, Key(0), Value(0)).ok());
  a.reset();  // Block 0: in G4 only.
  Options oc = NodeOptions("node-c", 8, kOnDemotion);
  oc.disk.dir = (dir_ / "c-disk").string();
  oc.disk.capacity_bytes = 16 * kMiB;
  oc.disk.segment_bytes = 1 * kMiB;
  std::unique_ptr<Store> c = Open(oc);
  ASSERT_TRUE(c);
  for (uint64_t k = 1; k < 3; ++k) {
    PutOptions po;
    po.parent = Key(k - 1);
    ASSERT_TRUE(c->Put(acme, Key(k), Value(k), po).ok());
  }
  ASSERT_TRUE(c->Flush(acme).ok());
  c.reset();
  c = Open(oc);  // Blocks 1 and 2: in C's G3 only (nothing was evicted, so nothing uploaded).
  ASSERT_TRUE(c);
  const std::vector<BlockKey> keys = {Key(0), Key(1), Key(2), Key(3)};
  Result<PrefixMatch> match = c->LookupPrefix(acme, keys);
  ASSERT_TRUE(match.ok());
  EXPECT_EQ(match->num_blocks, 3u);
  EXPECT_EQ(match->tiers,
            (std::vector<TierLevel>{TierLevel::kG4, TierLevel::kG3, TierLevel::kG3}));
  for (uint64_t k = 0; k < 3; ++k) EXPECT_TRUE(Has(c.get(), acme, k)) << k;
}

TEST_F(StoreSharedTierTest, ABurstOfReadsOfOneG4BlockIsServedRightAndCountedOnce) {
  // Sixteen threads of one node read a block only G4 holds, at once. Each read is either a G4
  // read or joins one in flight (single flight), and every reader gets the block's bytes.
  // Promotion is off so that no reader finds it in G2. That a burst really shares one read is
  // tested deterministically in src/common/single_flight_test.cc.
  const auto kOnPut = SharedTierOptions::WritePolicy::kOnPut;
  std::unique_ptr<Store> a = Open(NodeOptions("node-a", 8, kOnPut));
  Options reader = NodeOptions("node-b", 8, kOnPut);
  reader.shared.promote_on_hit = false;
  std::unique_ptr<Store> b = Open(reader);
  ASSERT_TRUE(a && b);
  const TenantId acme = *a->FindTenant("acme");
  ASSERT_TRUE(a->Put(acme, Key(7), Value(7)).ok());
  a.reset();
  constexpr int kReaders = 16;
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kReaders; ++i) {
    threads.emplace_back([&] {
      std::vector<std::byte> out(kBlock);
      Result<size_t> n = b->Read(acme, Key(7), out);
      if (n.ok() && *n == kBlock && out == Value(7)) ++right;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(right.load(), kReaders);
  const StoreStats stats = b->Stats();
  EXPECT_EQ(stats.shared_hits + stats.shared_reads_coalesced, uint64_t{kReaders});
  EXPECT_EQ(stats.shared_errors, 0u);
}

TEST_F(StoreSharedTierTest, ABurstOfReadsOfOneG4BlockReadsItOnceWhenItIsPromoted) {
  // The same burst with promotion on: a reader either joins the read in flight, or finds the
  // block in G2, promoted before that read answered anyone; one that missed G2 just before
  // the promotion finds it there when it would start a read of its own. One G4 read in all.
  const auto kOnPut = SharedTierOptions::WritePolicy::kOnPut;
  std::unique_ptr<Store> a = Open(NodeOptions("node-a", 8, kOnPut));
  std::unique_ptr<Store> b = Open(NodeOptions("node-b", 8, kOnPut));
  ASSERT_TRUE(a && b);
  const TenantId acme = *a->FindTenant("acme");
  ASSERT_TRUE(a->Put(acme, Key(7), Value(7)).ok());
  a.reset();
  constexpr int kReaders = 16;
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kReaders; ++i) {
    threads.emplace_back([&, i] {
      std::vector<std::byte> out(kBlock);
      if (i % 2 == 0) {
        Result<size_t> n = b->Read(acme, Key(7), out);
        if (n.ok() && *n == kBlock && out == Value(7)) ++right;
      } else if (Result<BlockHandle> h = b->Get(acme, Key(7)); h.ok() && h->size() == kBlock) {
        h->CopyTo(out);
        if (out == Value(7)) ++right;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(right.load(), kReaders);
  EXPECT_EQ(b->Stats().shared_hits, 1u);
}

TEST_F(StoreSharedTierTest, AFoundBlockIsCheckedInG4OnceUntilADeletionOrAFailedRead) {
  const auto kOnPut = SharedTierOptions::WritePolicy::kOnPut;
  Options writer = NodeOptions("node-a", 8, kOnPut);
  writer.shared.notice_poll_ms = 0;
  std::unique_ptr<Store> a = Open(writer);
  ASSERT_TRUE(a);
  const TenantId acme = *a->FindTenant("acme");
  std::vector<BlockKey> keys;
  for (uint64_t k = 0; k < 4; ++k) {
    PutOptions po;
    if (k > 0) po.parent = Key(k - 1);
    ASSERT_TRUE(a->Put(acme, Key(k), Value(k), po).ok());
    keys.push_back(Key(k));
  }
  a.reset();  // Closing uploads what is queued.
  a = Open(writer);
  // B keeps what it reads out of G2, so that its lookups go to G4 each time; C asks G4 always.
  Options ob = NodeOptions("node-b", 8, kOnPut);
  ob.shared.promote_on_hit = false;
  ob.shared.notice_poll_ms = 0;
  ob.shared.exists_cache_ms = 3'600'000;
  Options oc = ob;
  oc.shared.node_id = "node-c";
  oc.shared.exists_cache_ms = 0;
  std::unique_ptr<Store> b = Open(ob);
  std::unique_ptr<Store> c = Open(oc);
  ASSERT_TRUE(a && b && c);
  for (int round = 0; round < 3; ++round) {
    for (Store* s : {b.get(), c.get()}) {
      Result<PrefixMatch> match = s->LookupPrefix(acme, keys);
      ASSERT_TRUE(match.ok());
      EXPECT_EQ(match->num_blocks, 4u);
    }
  }
  // B asked G4 once per block; the two later rounds were answered by what it found.
  EXPECT_EQ(b->Stats().shared_checks_cached, 8u);
  EXPECT_EQ(c->Stats().shared_checks_cached, 0u);
  // A read needs no second check either.
  EXPECT_TRUE(Has(b.get(), acme, 3));
  EXPECT_EQ(b->Stats().shared_checks_cached, 9u);

  // Another node deletes block 1 from G4 (NotFound: that node held no copy of its own); B,
  // not yet told, still names it...
  EXPECT_EQ(a->Delete(acme, Key(1)).code(), StatusCode::kNotFound);
  EXPECT_EQ(b->LookupPrefix(acme, keys)->num_blocks, 4u);
  EXPECT_EQ(c->LookupPrefix(acme, keys)->num_blocks, 1u);
  // ...until a read finds it gone, a miss, never other bytes: then B asks G4 again.
  EXPECT_FALSE(Has(b.get(), acme, 1));
  EXPECT_EQ(b->LookupPrefix(acme, keys)->num_blocks, 1u);
  // A deletion on B forgets everything it found before.
  const uint64_t cached = b->Stats().shared_checks_cached;
  EXPECT_EQ(b->Delete(acme, Key(3)).code(), StatusCode::kNotFound);  // B held no copy.
  EXPECT_EQ(b->LookupPrefix(acme, std::span(keys).first(1))->num_blocks, 1u);
  EXPECT_EQ(b->Stats().shared_checks_cached, cached);
}

TEST_F(StoreSharedTierTest, EvictedBlocksAreWrittenToG4OnDemotionWithoutG3) {
  const auto kOnDemotion = SharedTierOptions::WritePolicy::kOnDemotion;
  std::unique_ptr<Store> a = Open(NodeOptions("node-a", 2, kOnDemotion));
  ASSERT_TRUE(a);
  const TenantId acme = *a->FindTenant("acme");
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(a->Put(acme, Key(k), Value(k)).ok());
  // Every block is readable: in G2 or, once evicted, from G4.
  for (uint64_t k = 0; k < 8; ++k) EXPECT_TRUE(Has(a.get(), acme, k)) << k;
  EXPECT_GE(a->Stats().demoted_blocks, 6u);
}

// Blocks deleted right after they left G2 (their uploads queued, under way or done) are not
// published afterwards: once A has closed, and so drained its uploads, G4 holds no object.
// (Another node would not read them either way: applying A's deletion notices removes them.)
TEST_F(StoreSharedTierTest, ABlockDeletedWhileItsUploadIsQueuedStaysDeleted) {
  constexpr uint64_t kBlocks = 256;
  Options oa = NodeOptions("node-a", 2, SharedTierOptions::WritePolicy::kOnDemotion);
  oa.shared.sync = true;  // Uploads slower than puts: a queue builds up.
  std::unique_ptr<Store> a = Open(oa);
  ASSERT_TRUE(a);
  const TenantId acme = *a->FindTenant("acme");
  for (uint64_t k = 0; k < kBlocks; ++k) ASSERT_TRUE(a->Put(acme, Key(k), Value(k)).ok());
  for (uint64_t k = kBlocks; k-- > 0;) {  // The newest first: their uploads are still queued.
    // NotFound for a block out of G2 (G4 cannot tell whether it deleted anything).
    const Status deleted = a->Delete(acme, Key(k));
    ASSERT_TRUE(deleted.ok() || deleted.code() == StatusCode::kNotFound) << deleted.ToString();
  }
  a.reset();
  size_t objects = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "g4")) {
    objects += e.is_regular_file() && e.path().string().find("/objects/") != std::string::npos;
  }
  EXPECT_EQ(objects, 0u);
}

// Node C, writing G4 on demotion, reads what node A published: each block read is promoted
// into C's small G2 and soon evicted again, and never uploaded back to G4.
TEST_F(StoreSharedTierTest, BlocksReadFromG4AreNotUploadedAgainWhenEvicted) {
  std::unique_ptr<Store> a = Open(NodeOptions("node-a", 8, SharedTierOptions::WritePolicy::kOnPut));
  ASSERT_TRUE(a);
  const TenantId acme = *a->FindTenant("acme");
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(a->Put(acme, Key(k), Value(k)).ok());
  a.reset();  // Closing uploads what is queued.
  std::unique_ptr<Store> c =
      Open(NodeOptions("node-c", 2, SharedTierOptions::WritePolicy::kOnDemotion));
  ASSERT_TRUE(c);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t k = 0; k < 8; ++k) EXPECT_TRUE(Has(c.get(), acme, k)) << k;
  }
  // 16 promotions into room for 2: a promotion waits for the pages of earlier evictions, so
  // most of them are done; none was uploaded.
  StoreStats stats = c->Stats();
  EXPECT_GE(stats.demotion_shared_skips, 6u);
  EXPECT_EQ(stats.shared_puts, 0u);
}

// Node A deletes by session, by key and by tenant; node C, which holds its own copies in G2
// and G3, removes them when it applies A's deletion notices, each notice once.
TEST_F(StoreSharedTierTest, DeletionsOnOneNodeReachTheOtherNodesG2AndG3) {
  // C writes G4 on demotion: its G2 of three blocks evicts to G3 (and G4) as it fills.
  Options oa = NodeOptions("node-a", 8, SharedTierOptions::WritePolicy::kOnPut);
  Options oc = NodeOptions("node-c", 3, SharedTierOptions::WritePolicy::kOnDemotion);
  oa.shared.notice_poll_ms = oc.shared.notice_poll_ms = 0;  // Applied when the test says.
  oc.disk.dir = (dir_ / "c-disk").string();
  oc.disk.capacity_bytes = 16 * kMiB;
  oc.disk.segment_bytes = 1 * kMiB;
  std::unique_ptr<Store> a = Open(oa);
  std::unique_ptr<Store> c = Open(oc);
  ASSERT_TRUE(a && c);
  const TenantId acme = *a->FindTenant("acme");
  const TenantId globex = *a->FindTenant("globex");
  // Blocks 0-1 in session 7, 2-3 in session 8, 4-5 in none; globex has 6-7. C stores them
  // too (as if it had computed them): most end up in its G3, its G2 holding three.
  auto put_all = [&](Store* s) {
    for (uint64_t k = 0; k < 6; ++k) {
      PutOptions po;
      po.session = k < 2 ? 7 : k < 4 ? 8 : 0;
      const Status put = s->Put(acme, Key(k), Value(k), po);
      ASSERT_TRUE(put.ok()) << put.ToString();
    }
    for (uint64_t k = 6; k < 8; ++k) ASSERT_TRUE(s->Put(globex, Key(k), Value(k)).ok());
  };
  put_all(a.get());
  put_all(c.get());
  ASSERT_TRUE(a->DeleteSession(acme, 7, "alice").ok());
  ASSERT_TRUE(a->Delete(acme, Key(4)).ok());
  ASSERT_TRUE(a->DeleteTenant(globex, "alice").ok());
  EXPECT_EQ(a->Stats().deletion_notices_published, 3u);
  // Until C applies them, its own copies still serve.
  for (uint64_t k : {0, 4}) EXPECT_TRUE(Has(c.get(), acme, k)) << k;
  EXPECT_TRUE(Has(c.get(), globex, 6));
  Result<uint64_t> applied = c->ApplyDeletionNotices();
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(*applied, 3u);
  for (uint64_t k : {0, 1, 4}) EXPECT_FALSE(Has(c.get(), acme, k)) << k;
  for (uint64_t k : {6, 7}) EXPECT_FALSE(Has(c.get(), globex, k)) << k;
  for (uint64_t k : {2, 3, 5}) EXPECT_TRUE(Has(c.get(), acme, k)) << k;
  EXPECT_EQ(c->Stats().deletion_notices_applied, 3u);
  // Each notice once; A never applies its own.
  EXPECT_EQ(*c->ApplyDeletionNotices(), 0u);
  EXPECT_EQ(*a->ApplyDeletionNotices(), 0u);
  // A later deletion by C reaches A.
  ASSERT_TRUE(c->DeleteSession(acme, 8, "bob").ok());
  EXPECT_TRUE(Has(a.get(), acme, 2));
  EXPECT_EQ(*a->ApplyDeletionNotices(), 1u);
  EXPECT_FALSE(Has(a.get(), acme, 2));
  EXPECT_FALSE(Has(a.get(), acme, 3));
}

TEST_F(StoreSharedTierTest, ANoticeThatFailedToApplyIsAppliedAgainAndItsDeletionSurvivesARestart) {
  FaultInjectionEnv env(Env::Default());
  Options oa = NodeOptions("node-a", 8, SharedTierOptions::WritePolicy::kOnPut);
  Options oc = NodeOptions("node-c", 3, SharedTierOptions::WritePolicy::kOnDemotion);
  oa.shared.notice_poll_ms = oc.shared.notice_poll_ms = 0;  // Applied when the test says.
  const fs::path c_disk = dir_ / "c-disk";
  oc.disk.dir = c_disk.string();
  oc.disk.capacity_bytes = 16 * kMiB;
  oc.disk.segment_bytes = 1 * kMiB;
  oc.env = &env;
  std::unique_ptr<Store> a = Open(oa);
  std::unique_ptr<Store> c = Open(oc);
  ASSERT_TRUE(a && c);
  const TenantId acme = *a->FindTenant("acme");
  // Session 7 on both nodes; C's G2 holds three blocks, so most of its copies are in its G3.
  for (Store* s : {a.get(), c.get()}) {
    for (uint64_t k = 0; k < 6; ++k) {
      PutOptions po;
      po.session = 7;
      const Status put = s->Put(acme, Key(k), Value(k), po);
      ASSERT_TRUE(put.ok()) << put.ToString();
    }
  }
  ASSERT_TRUE(a->DeleteSession(acme, 7, "alice").ok());

  // C cannot record the deletion in its G3 (every write there fails).
  env.AddFault({.op = FaultInjectionEnv::Op::kWrite,
                .path_filter = [&](const std::string& path) {
                  return path.starts_with(c_disk.string());
                }});
  Result<uint64_t> applied = c->ApplyDeletionNotices();
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(*applied, 0u);
  EXPECT_EQ(c->Stats().deletion_notices_pending, 1u);
  for (uint64_t k = 0; k < 6; ++k) EXPECT_FALSE(Has(c.get(), acme, k)) << k;

  // Once G3 writes again, the next round applies the notice again, though it was read before.
  env.ClearFaults();
  applied = c->ApplyDeletionNotices();
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(*applied, 1u);
  EXPECT_EQ(c->Stats().deletion_notices_pending, 0u);
  EXPECT_EQ(c->Stats().deletion_notices_applied, 1u);

  // The deletion is durable in C's G3: after a restart (no notice read yet), nothing returns.
  c.reset();
  c = Open(oc);
  ASSERT_NE(c, nullptr);
  for (uint64_t k = 0; k < 6; ++k) EXPECT_FALSE(Has(c.get(), acme, k)) << k;
}

TEST_F(StoreSharedTierTest, ANodeThatMayHaveMissedDeletionNoticesEmptiesItsG2AndG3) {
  constexpr uint64_t kDay = 24ull * 3600 * 1000000;
  disk_test::ManualClock clock;  // Files are the real ones; the test moves the clock.
  clock.now_us = Env::Default()->NowMicros();
  Options o = NodeOptions("node-c", 3, SharedTierOptions::WritePolicy::kOnDemotion);
  o.shared.notice_poll_ms = 0;  // Only the gap decides here, not the notices themselves.
  o.shared.notice_retention_seconds = 7 * 24 * 3600;
  o.disk.dir = (dir_ / "c-disk").string();
  o.disk.capacity_bytes = 16 * kMiB;
  o.disk.segment_bytes = 1 * kMiB;
  o.env = &clock;
  // Six blocks: G2 holds three, the others go to G3. Then a successful read of the notices.
  auto put_six = [&](Store* s) {
    const TenantId acme = *s->FindTenant("acme");
    for (uint64_t k = 0; k < 6; ++k) ASSERT_TRUE(s->Put(acme, Key(k), Value(k)).ok());
    ASSERT_TRUE(s->ApplyDeletionNotices().ok());
  };
  // This node's own copies (G2 and G3); G4's are not its to drop.
  auto local_blocks = [](Store* s) { return s->Stats().blocks + s->Stats().disk_blocks; };

  std::unique_ptr<Store> c = Open(o);
  ASSERT_NE(c, nullptr);
  put_six(c.get());
  // Down for a day: within the retention, so what G3 holds is kept.
  c.reset();
  clock.now_us += kDay;
  c = Open(o);
  ASSERT_NE(c, nullptr);
  EXPECT_GE(c->Stats().disk_blocks, 3u);
  EXPECT_EQ(c->Stats().notice_gap_resets, 0u);

  // Down for eight days more (the last read was nine days ago): notices it missed may be gone.
  c.reset();
  clock.now_us += 8 * kDay;
  c = Open(o);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(local_blocks(c.get()), 0u);
  EXPECT_EQ(c->Stats().notice_gap_resets, 1u);

  // Running, but unable to read the notices for eight days: the same at the next read.
  put_six(c.get());
  EXPECT_GE(local_blocks(c.get()), 3u);
  clock.now_us += 8 * kDay;
  ASSERT_TRUE(c->ApplyDeletionNotices().ok());
  EXPECT_EQ(local_blocks(c.get()), 0u);
  EXPECT_EQ(c->Stats().notice_gap_resets, 2u);

  // Its record of the notices lost, it cannot tell: it empties a G3 that holds blocks.
  put_six(c.get());
  c.reset();
  ASSERT_TRUE(fs::remove(dir_ / "c-disk" / "notice-state"));
  c = Open(o);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(local_blocks(c.get()), 0u);
  EXPECT_EQ(c->Stats().notice_gap_resets, 1u);
}

TEST_F(StoreSharedTierTest, DeletionsBySessionAndTenantReachG4FromAnyNode) {
  const auto kOnPut = SharedTierOptions::WritePolicy::kOnPut;
  std::unique_ptr<Store> a = Open(NodeOptions("node-a", 16, kOnPut));
  ASSERT_TRUE(a);
  const TenantId acme = *a->FindTenant("acme");
  const TenantId globex = *a->FindTenant("globex");
  for (uint64_t k = 0; k < 6; ++k) {
    PutOptions po;
    po.session = k < 3 ? 7 : 8;
    ASSERT_TRUE(a->Put(acme, Key(k), Value(k), po).ok());
    ASSERT_TRUE(a->Put(globex, Key(100 + k), Value(100 + k)).ok());
  }
  a.reset();
  std::unique_ptr<Store> c = Open(NodeOptions("node-c", 16, kOnPut));
  ASSERT_TRUE(c);
  Result<DeletionReport> report = c->DeleteSession(acme, 7, "ops");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->shared_blocks, 3u);
  for (uint64_t k = 0; k < 6; ++k) EXPECT_EQ(Has(c.get(), acme, k), k >= 3) << k;
  report = c->DeleteTenant(globex, "ops");
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->shared_blocks, 6u);
  c.reset();
  std::unique_ptr<Store> b = Open(NodeOptions("node-b", 16, kOnPut));
  for (uint64_t k = 0; k < 6; ++k) {
    EXPECT_EQ(Has(b.get(), acme, k), k >= 3) << k;
    EXPECT_FALSE(Has(b.get(), globex, 100 + k)) << k;
  }
}

TEST_F(StoreSharedTierTest, EncryptedG4ObjectsOpenOnlyWithTheTenantsKey) {
  const fs::path key_file = dir_ / "master.key";
  std::ofstream(key_file) << std::string(64, '7') << "\n";
  fs::permissions(key_file, fs::perms::owner_read | fs::perms::owner_write);
  Options o = NodeOptions("node-a", 16, SharedTierOptions::WritePolicy::kOnPut);
  o.shared_data = {.compress = true, .encrypt = true};
  o.security.master_key = "file:" + key_file.string();
  o.security.keystore_dir = (dir_ / "keys").string();
  std::unique_ptr<Store> a = Open(o);
  ASSERT_TRUE(a);
  const TenantId acme = *a->FindTenant("acme");
  ASSERT_TRUE(a->Put(acme, Key(1), Value(1)).ok());
  a.reset();
  // The block's bytes appear in no G4 file.
  const std::vector<std::byte> plain = Value(1);
  const std::string needle(reinterpret_cast<const char*>(plain.data()) + 1000, 48);
  for (const auto& entry : fs::recursive_directory_iterator(dir_ / "g4")) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(content.find(needle), std::string::npos) << entry.path();
  }
  a = Open(o);  // A fresh G2: the read comes from G4 and is decrypted.
  EXPECT_TRUE(Has(a.get(), acme, 1));
  a.reset();
  // The data keys live in G4: another node with the cluster's master key reads it; one with
  // another master key cannot.
  Options same = o;
  same.shared.node_id = "node-y";
  same.security.keystore_dir = (dir_ / "other-keys").string();
  std::unique_ptr<Store> y = Open(same);
  ASSERT_TRUE(y);
  EXPECT_TRUE(Has(y.get(), acme, 1));
  y.reset();
  const fs::path other_key = dir_ / "other.key";
  std::ofstream(other_key) << std::string(64, '8') << "\n";
  fs::permissions(other_key, fs::perms::owner_read | fs::perms::owner_write);
  Options other = same;
  other.shared.node_id = "node-x";
  other.security.master_key = "file:" + other_key.string();
  std::unique_ptr<Store> x = Open(other);
  ASSERT_TRUE(x);
  EXPECT_FALSE(Has(x.get(), acme, 1));
  x.reset();
  // Shredding on one node makes the object unreadable everywhere.
  a = Open(o);
  ASSERT_TRUE(a->ShredTenant(acme, "admin").ok());
  EXPECT_FALSE(Has(a.get(), acme, 1));
  a.reset();
  y = Open(same);
  EXPECT_FALSE(Has(y.get(), acme, 1));
}

}  // namespace
}  // namespace kvtier
