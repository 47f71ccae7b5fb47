#include <gtest/gtest.h>

#include <fstream>

#include "src/tier/sharedfs/fs_util.h"
#include "src/tier/sharedfs/shared_fs_test_util.h"
#include "src/tier/sharedfs/shared_fs_tier.h"

namespace kvtier {
namespace {

using testing_g4::CountFiles;
using testing_g4::FakeClockEnv;
using testing_g4::MakePut;
using testing_g4::ScratchDir;
using testing_g4::TestKey;
using testing_g4::TestValue;

constexpr uint64_t kStart = 1'700'000'000'000'000;
constexpr uint64_t kSecond = 1'000'000;

class SharedFsJanitorTest : public ::testing::Test {
 protected:
  std::unique_ptr<SharedFsTier> Node(const std::string& id, FakeClockEnv* clock,
                                     SharedJanitorOptions janitor = {}) {
    SharedFsTierOptions o;
    o.root = dir_.path();
    o.node_id = id;
    o.io_threads = 2;
    o.storage_clock = false;
    o.env = clock;
    o.janitor = janitor;
    Result<std::unique_ptr<SharedFsTier>> tier = SharedFsTier::Open(o);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(*tier) : nullptr;
  }
  void Put(SharedFsTier* tier, const std::string& tenant, uint32_t key, size_t bytes,
           SessionId session = 0) {
    const std::vector<std::byte> v = TestValue(bytes, key);
    const SharedPut put = MakePut(TestKey(key), v, session);
    ASSERT_TRUE(tier->PutMany(tenant, {&put, 1})[0].ok());
  }
  bool Present(SharedFsTier* tier, const std::string& tenant, uint32_t key) {
    const BlockKey k = TestKey(key);
    return tier->ExistsMany(tenant, {&k, 1})[0].has_value();
  }
  std::string Root() const { return dir_.path() + "/kvtier-g4/v1"; }

  ScratchDir dir_;
  FakeClockEnv clock_{kStart};
};

TEST_F(SharedFsJanitorTest, OneHolderAndTakeoverWhenTheHolderStopsRenewing) {
  SharedJanitorOptions j;
  j.lease_us = 60 * kSecond;
  j.clock_margin_us = 10 * kSecond;
  // Two nodes whose clocks are 5 s apart (within the margin).
  FakeClockEnv clock_b(kStart + 5 * kSecond);
  auto a = Node("a", &clock_, j);
  auto b = Node("b", &clock_b, j);

  ASSERT_TRUE(a->RunJanitorOnce()->lease_held);
  EXPECT_FALSE(b->RunJanitorOnce()->lease_held);
  // The holder renews; the other keeps out however often it tries.
  clock_.Advance(40 * kSecond);
  clock_b.Advance(40 * kSecond);
  EXPECT_TRUE(a->RunJanitorOnce()->lease_held);
  clock_.Advance(40 * kSecond);
  clock_b.Advance(40 * kSecond);
  EXPECT_TRUE(a->RunJanitorOnce()->lease_held);
  EXPECT_FALSE(b->RunJanitorOnce()->lease_held);
  EXPECT_EQ(a->Stats().janitor_runs, 3u);
  EXPECT_EQ(b->Stats().janitor_runs, 0u);

  // `a` stops renewing (dies). Just before lease + margin, `b` still waits...
  clock_b.Advance(60 * kSecond);  // b is 5 s ahead: 65 s after a's renewal.
  EXPECT_FALSE(b->RunJanitorOnce()->lease_held);
  // ...and after it, takes over.
  clock_b.Advance(15 * kSecond);
  Result<JanitorReport> taken = b->RunJanitorOnce();
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_TRUE(taken->lease_held);
  EXPECT_TRUE(b->Stats().lease_held);
  // The old holder comes back: it sees the lease is no longer its own.
  clock_.Advance(80 * kSecond);
  EXPECT_FALSE(a->RunJanitorOnce()->lease_held);
  EXPECT_FALSE(a->Stats().lease_held);
  EXPECT_TRUE(b->RunJanitorOnce()->lease_held);
  // No stale lease files are left behind.
  EXPECT_EQ(CountFiles(Root() + "/tmp"), 0u);
  Result<std::vector<std::string>> names = sharedfs::ListDir(Root() + "/lease");
  ASSERT_TRUE(names.ok());
  for (const std::string& n : *names) EXPECT_EQ(n.find("stale"), std::string::npos) << n;
}

TEST_F(SharedFsJanitorTest, GarbageLeaseFileExpiresLikeAnyOther) {
  SharedJanitorOptions j;
  j.lease_us = 60 * kSecond;
  j.clock_margin_us = 10 * kSecond;
  auto a = Node("a", &clock_, j);
  {
    std::ofstream f(Root() + "/lease/janitor", std::ios::binary);
    f << "\x01garbage";
  }
  ASSERT_TRUE(sharedfs::Touch(Root() + "/lease/janitor", kStart).ok());
  EXPECT_FALSE(a->RunJanitorOnce()->lease_held);
  clock_.Advance(71 * kSecond);
  EXPECT_TRUE(a->RunJanitorOnce()->lease_held);
}

TEST_F(SharedFsJanitorTest, AbandonedTempFilesRemovedAfterGrace) {
  SharedJanitorOptions j;
  j.temp_grace_us = 600 * kSecond;
  auto a = Node("a", &clock_, j);
  // A writer killed mid-write left this.
  const std::string temp = Root() + "/tmp/dead-node.1.1.tmp";
  {
    std::ofstream f(temp, std::ios::binary);
    f << "half a block";
  }
  ASSERT_TRUE(sharedfs::Touch(temp, kStart).ok());
  clock_.Advance(599 * kSecond);
  Result<JanitorReport> r = a->RunJanitorOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->temp_removed, 0u);
  EXPECT_TRUE(std::filesystem::exists(temp));
  clock_.Advance(2 * kSecond);
  r = a->RunJanitorOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->temp_removed, 1u);
  EXPECT_FALSE(std::filesystem::exists(temp));
}

TEST_F(SharedFsJanitorTest, NoticesRemovedAfterTheirRetention) {
  SharedJanitorOptions j;
  j.notice_retention_us = 600 * kSecond;
  auto a = Node("a", &clock_, j);
  ASSERT_TRUE(a->PublishNotice("0001-a-1", {}).ok());
  clock_.Advance(599 * kSecond);
  Result<JanitorReport> r = a->RunJanitorOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->notices_removed, 0u);
  EXPECT_EQ(a->NoticesAfter("", nullptr)->size(), 1u);
  clock_.Advance(2 * kSecond);
  r = a->RunJanitorOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->notices_removed, 1u);
  EXPECT_TRUE(a->NoticesAfter("", nullptr)->empty());
}

TEST_F(SharedFsJanitorTest, TtlSinceLastAccess) {
  SharedJanitorOptions j;
  j.ttl_us = 3600 * kSecond;
  j.touch_interval_us = 60 * kSecond;
  auto a = Node("a", &clock_, j);
  Put(a.get(), "t", 1, 100);
  Put(a.get(), "t", 2, 100);
  clock_.Advance(3000 * kSecond);
  const BlockKey k2 = TestKey(2);
  ASSERT_TRUE(a->GetMany("t", {&k2, 1})[0].ok());  // Refreshes block 2's access time.
  EXPECT_EQ(a->Stats().touches, 1u);
  clock_.Advance(601 * kSecond);  // Block 1 idle for 3601 s, block 2 for 601 s.
  Result<JanitorReport> r = a->RunJanitorOnce();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->objects_seen, 2u);
  EXPECT_EQ(r->expired, 1u);
  EXPECT_FALSE(Present(a.get(), "t", 1));
  EXPECT_TRUE(Present(a.get(), "t", 2));
}

TEST_F(SharedFsJanitorTest, TenantQuotaEvictsOnlyThatTenantLeastRecentlyUsedFirst) {
  SharedJanitorOptions j;
  auto writer = Node("w", &clock_, j);
  for (uint32_t k = 1; k <= 4; ++k) {
    Put(writer.get(), "big", k, 1000);
    Put(writer.get(), "small", 100 + k, 1000);
    clock_.Advance(kSecond);
  }
  const BlockKey k1 = TestKey(1);
  clock_.Advance(j.touch_interval_us + 1);
  ASSERT_TRUE(writer->GetMany("big", {&k1, 1})[0].ok());  // Block 1 is now the most recent.
  j.tenant_quota_bytes = 2 * 1000 + 2 * 400;  // Two objects of ~1.2 KB fit, three do not.
  auto janitor = Node("j", &clock_, j);
  Result<JanitorReport> r = janitor->RunJanitorOnce();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->evicted_quota, 4u);  // Two of each tenant.
  EXPECT_TRUE(Present(janitor.get(), "big", 1));
  EXPECT_FALSE(Present(janitor.get(), "big", 2));
  EXPECT_FALSE(Present(janitor.get(), "big", 3));
  EXPECT_TRUE(Present(janitor.get(), "big", 4));
  EXPECT_FALSE(Present(janitor.get(), "small", 101));
  EXPECT_TRUE(Present(janitor.get(), "small", 104));
}

TEST_F(SharedFsJanitorTest, CapacityEvictsGloballyLeastRecentlyUsed) {
  SharedJanitorOptions j;
  auto writer = Node("w", &clock_, j);
  for (uint32_t k = 1; k <= 6; ++k) {
    Put(writer.get(), k % 2 ? "t" : "u", k, 1000);
    clock_.Advance(kSecond);
  }
  j.capacity_bytes = 3 * 1200;
  auto janitor = Node("j", &clock_, j);
  Result<JanitorReport> r = janitor->RunJanitorOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->evicted_capacity, 3u);
  for (uint32_t k = 1; k <= 6; ++k) {
    EXPECT_EQ(Present(janitor.get(), k % 2 ? "t" : "u", k), k > 3) << k;
  }
  EXPECT_EQ(janitor->Stats().janitor_evicted, 3u);
}

TEST_F(SharedFsJanitorTest, OrphanSessionMarkersRemovedAfterGrace) {
  SharedJanitorOptions j;
  j.capacity_bytes = 1;  // Evicts everything.
  j.temp_grace_us = 60 * kSecond;
  auto a = Node("a", &clock_, j);
  Put(a.get(), "t", 1, 100, 5);
  ASSERT_TRUE(a->RunJanitorOnce().ok());
  EXPECT_EQ(CountFiles(Root() + "/sessions"), 1u);  // Young: may be a put in flight.
  clock_.Advance(61 * kSecond);
  Result<JanitorReport> r = a->RunJanitorOnce();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->markers_removed, 1u);
  EXPECT_EQ(CountFiles(Root() + "/sessions"), 0u);
}

TEST_F(SharedFsJanitorTest, StorageClockIsTheFileSystemClock) {
  SharedFsTierOptions o;
  o.root = dir_.path();
  o.node_id = "real";
  o.janitor.ttl_us = 3600 * kSecond;
  auto tier = SharedFsTier::Open(o);
  ASSERT_TRUE(tier.ok());
  Put(tier->get(), "t", 1, 100);
  Result<JanitorReport> r = (*tier)->RunJanitorOnce();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->lease_held);
  EXPECT_EQ(r->expired, 0u);  // Just written: young by the file system's own clock.
  EXPECT_TRUE(Present(tier->get(), "t", 1));
}

}  // namespace
}  // namespace kvtier
