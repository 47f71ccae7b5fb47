// DiskTier behaviour a user of the tier notices: round trips, reopening, bad input, deletion
// that survives restarts, tenant budgets, TTL, reclamation keeping hot blocks, capacity.

#include "src/tier/disk/disk_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "src/tier/disk/disk_format.h"
#include "src/tier/disk/disk_test_util.h"

namespace kvtier::disk_test {
namespace {

class DiskTierTest : public DiskTierTestBase {};

TEST_F(DiskTierTest, PutThenReadReturnsTheSameBytes) {
  ASSERT_TRUE(Open().ok());
  std::vector<std::vector<std::byte>> values;
  std::vector<DiskTier::PutRequest> reqs;
  for (uint64_t k = 0; k < 10; ++k) values.push_back(Value(k, 1000 + k * 5000));
  for (uint64_t k = 0; k < 10; ++k) reqs.push_back({Key(k), values[k]});
  for (const Status& s : tier_->PutMany(0, reqs)) EXPECT_TRUE(s.ok()) << s.ToString();
  for (uint64_t k = 0; k < 10; ++k) {
    EXPECT_TRUE(Check(k, 1000 + k * 5000).ok());
    EXPECT_EQ(*tier_->BlockSize(0, Key(k)), 1000 + k * 5000);
  }
  EXPECT_EQ(tier_->BlockSize(0, Key(99)).status().code(), StatusCode::kNotFound);
  DiskTierStats s = tier_->Stats();
  EXPECT_EQ(s.blocks, 10u);
  EXPECT_EQ(s.puts, 10u);
  EXPECT_EQ(s.hits, 10u);
}

TEST_F(DiskTierTest, TenantsDoNotSeeEachOthersBlocks) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1, kBlock, 0).ok());
  EXPECT_EQ(Check(1, kBlock, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->LookupPrefix(1, std::vector<BlockKey>{Key(1)}), 0u);
}

TEST_F(DiskTierTest, DuplicatePutIsOkAndStoresOnce) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(1).ok());
  EXPECT_EQ(tier_->Stats().puts, 1u);
}

TEST_F(DiskTierTest, BadInputIsAnError) {
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Put(1, kBlock, 7).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Put(1, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Put(1, options_.segment_bytes).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(Put(2).ok());
  std::vector<std::byte> small(10);
  BlockKey key = Key(2);
  std::span<std::byte> span(small);
  EXPECT_EQ(tier_->ReadMany(0, {&key, 1}, {&span, 1})[0].status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(tier_->ReadMany(0, {&key, 1}, {}).at(0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(tier_->Erase(9, key).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier_->EraseTenant(9).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DiskTierTest, BadOptionsAreRejected) {
  options_.segment_bytes = 5000;
  EXPECT_EQ(Open().code(), StatusCode::kInvalidArgument);
  options_.segment_bytes = 256 * 1024;
  options_.capacity_bytes = options_.segment_bytes;
  EXPECT_EQ(Open().code(), StatusCode::kInvalidArgument);
  options_.capacity_bytes = 8 * options_.segment_bytes;
  tenants_.push_back(DiskTenantConfig{"alpha"});
  EXPECT_EQ(Open().code(), StatusCode::kInvalidArgument);
}

TEST_F(DiskTierTest, LookupPrefixStopsAtTheFirstMiss) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k : {1, 2, 4}) ASSERT_TRUE(Put(k).ok());
  EXPECT_EQ(tier_->LookupPrefix(0, std::vector<BlockKey>{Key(1), Key(2), Key(3), Key(4)}), 2u);
}

TEST_F(DiskTierTest, ReopenServesEverythingAcknowledged) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 40; ++k) ASSERT_TRUE(Put(k).ok());  // Spans several segments.
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(tier_->Stats().recovered_blocks, 40u);
  for (uint64_t k = 0; k < 40; ++k) EXPECT_TRUE(Check(k).ok()) << k;
  ASSERT_TRUE(Put(100).ok());  // And it keeps taking writes.
  EXPECT_TRUE(Check(100).ok());
}

TEST_F(DiskTierTest, ReopenAfterKillServesEverythingAcknowledged) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 25; ++k) ASSERT_TRUE(Put(k).ok());
  Crash();  // No footer for the open segment: recovery scans it.
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 25; ++k) EXPECT_TRUE(Check(k).ok()) << k;
  EXPECT_EQ(tier_->Stats().corrupt_records, 0u);
}

TEST_F(DiskTierTest, SecondOpenerIsRefused) {
  ASSERT_TRUE(Open().ok());
  Result<std::unique_ptr<DiskTier>> second = DiskTier::Open(options_, tenants_, &env_);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("locked"), std::string_view::npos);
  tier_.reset();
  EXPECT_TRUE(Open().ok());  // The lock goes with the holder.
}

TEST_F(DiskTierTest, DirectoryOfANewerFormatIsRefused) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  tier_.reset();
  // Version field of the first segment's header (bytes 4-5), set to a future version.
  Result<std::unique_ptr<File>> f = mem_->OpenFile(SegmentFiles()[0], FileOptions{});
  ASSERT_TRUE(f.ok());
  const std::byte v[2] = {std::byte{9}, std::byte{0}};
  ASSERT_TRUE((*f)->Write(4, v).ok());
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("version 9"), std::string_view::npos) << s.ToString();
}

TEST_F(DiskTierTest, EraseSurvivesReopen) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(2).ok());
  ASSERT_TRUE(tier_->Erase(0, Key(1)).ok());
  EXPECT_EQ(tier_->Erase(0, Key(1)).code(), StatusCode::kNotFound);
  EXPECT_EQ(Check(1).code(), StatusCode::kNotFound);
  Crash();
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Check(1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Check(2).ok());
  ASSERT_TRUE(Put(1).ok());  // A put after the erase is a new block.
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  EXPECT_TRUE(Check(1).ok());
}

TEST_F(DiskTierTest, EraseTenantRemovesOnlyThatTenantAndSurvivesReopen) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 5; ++k) {
    ASSERT_TRUE(Put(k, kBlock, 0).ok());
    ASSERT_TRUE(Put(k, kBlock, 1).ok());
  }
  Result<uint64_t> n = tier_->EraseTenant(0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5u);
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 5; ++k) {
    EXPECT_EQ(Check(k, kBlock, 0).code(), StatusCode::kNotFound);
    EXPECT_TRUE(Check(k, kBlock, 1).ok());
  }
}

TEST_F(DiskTierTest, TenantOverBudgetLosesOnlyItsOwnBlocks) {
  const uint64_t record = disk::RecordBytes(5, kBlock);
  tenants_[0].budget_bytes = 4 * record;
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 3; ++k) ASSERT_TRUE(Put(100 + k, kBlock, 1).ok());
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(Put(k, kBlock, 0).ok());
  size_t alpha = 0;
  for (uint64_t k = 0; k < 10; ++k) alpha += Check(k).ok() ? 1 : 0;
  EXPECT_EQ(alpha, 4u);
  EXPECT_TRUE(Check(9).ok());  // The newest survive.
  for (uint64_t k = 0; k < 3; ++k) EXPECT_TRUE(Check(100 + k, kBlock, 1).ok());
  EXPECT_EQ(Put(50, 5 * kBlock).code(), StatusCode::kResourceExhausted);
}

TEST_F(DiskTierTest, BudgetKeepsBlocksThatWereRead) {
  const uint64_t record = disk::RecordBytes(5, kBlock);
  tenants_[0].budget_bytes = 4 * record;
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(Put(k).ok());
  ASSERT_TRUE(Check(0).ok());  // Read: second chance.
  ASSERT_TRUE(Put(10).ok());
  EXPECT_TRUE(Check(0).ok());
  EXPECT_EQ(Check(1).code(), StatusCode::kNotFound);
}

TEST_F(DiskTierTest, BlocksExpireAfterTtlSinceLastAccess) {
  tenants_[0].ttl_us = 1000;
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(2).ok());
  ASSERT_TRUE(Put(3, kBlock, 1).ok());  // beta has no TTL.
  clock_.now_us += 600;
  ASSERT_TRUE(Check(1).ok());  // Refreshes 1's last access.
  clock_.now_us += 600;
  EXPECT_TRUE(Check(1).ok());
  EXPECT_EQ(tier_->BlockSize(0, Key(2)).status().code(), StatusCode::kNotFound);
  clock_.now_us += 5000;
  EXPECT_EQ(tier_->PurgeExpired(), 1u);
  EXPECT_TRUE(Check(3, kBlock, 1).ok());
  EXPECT_EQ(tier_->Stats().expirations, 2u);
}

TEST_F(DiskTierTest, ExpiryHoldsAcrossReopen) {
  tenants_[0].ttl_us = 1000;
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  tier_.reset();
  clock_.now_us += 2000;
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Check(1).code(), StatusCode::kNotFound);
}

TEST_F(DiskTierTest, CapacityIsNeverExceededAndHotBlocksSurviveReclamation) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());  // Hot: read again and again.
  for (uint64_t k = 1000; k < 1300; ++k) {
    ASSERT_TRUE(Put(k).ok()) << k;
    ASSERT_TRUE(Check(1).ok()) << "hot block lost after put " << k;
    DiskTierStats s = tier_->Stats();
    ASSERT_LE(s.used_bytes, options_.capacity_bytes);
    ASSERT_LE(s.segments, options_.capacity_bytes / options_.segment_bytes);
  }
  DiskTierStats s = tier_->Stats();
  EXPECT_GT(s.reclaimed_segments, 0u);
  EXPECT_GT(s.relocated_blocks, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(Check(1000).code(), StatusCode::kNotFound);  // Cold and old: dropped.
  EXPECT_TRUE(Check(1299).ok());
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  EXPECT_TRUE(Check(1).ok());
  EXPECT_TRUE(Check(1299).ok());
}

TEST_F(DiskTierTest, ErasedBlockStaysErasedAfterItsTombstoneIsRelocated) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(2).ok());
  ASSERT_TRUE(Check(1).ok());
  ASSERT_TRUE(tier_->Erase(0, Key(2)).ok());
  // Churn through the disk while keeping block 1 hot, so segments get reclaimed.
  for (uint64_t k = 1000; k < 1200; ++k) {
    ASSERT_TRUE(Put(k).ok());
    ASSERT_TRUE(Check(1).ok());
  }
  Crash();
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Check(2).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Check(1).ok());
}

TEST_F(DiskTierTest, ConcurrentPutsReadsAndErasesNeverServeWrongBytes) {
  ASSERT_TRUE(Open().ok());
  constexpr uint64_t kBlocks = 400;  // Several trips around the disk: reclamation runs.
  std::atomic<uint64_t> written{0};
  std::atomic<bool> wrong{false};
  std::thread writer([&] {
    for (uint64_t k = 0; k < kBlocks; ++k) {
      ASSERT_TRUE(Put(k).ok());
      written.store(k + 1);
      if (k % 10 == 9) static_cast<void>(tier_->Erase(0, Key(k - 5)));
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      uint64_t x = 12345 + r;
      while (written.load() < kBlocks) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const uint64_t hi = written.load();
        if (hi == 0) continue;
        const uint64_t k = (x >> 33) % hi;
        Status s = Check(k);
        if (!s.ok() && s.code() != StatusCode::kNotFound) wrong = true;
        tier_->LookupPrefix(0, std::vector<BlockKey>{Key(k)});
      }
    });
  }
  writer.join();
  for (std::thread& t : readers) t.join();
  EXPECT_FALSE(wrong.load());
  EXPECT_GT(tier_->Stats().reclaimed_segments, 0u);
  EXPECT_TRUE(Check(kBlocks - 1).ok());
}

TEST_F(DiskTierTest, StatsReportIndexMemory) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(Put(k, 100).ok());
  DiskTierStats s = tier_->Stats();
  EXPECT_GT(s.index_memory_bytes, 0u);
  EXPECT_EQ(s.live_bytes, 10 * disk::RecordBytes(5, 100));
}

}  // namespace
}  // namespace kvtier::disk_test
