// DiskTier behaviour a user of the tier notices: round trips, reopening, bad input, deletion
// (by key, tenant and session) that survives restarts, tenant budgets, TTL and max age,
// reclamation keeping hot blocks, capacity, compression and encryption across reopen.

#include "src/tier/disk/disk_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "src/common/checksum.h"
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

TEST_F(DiskTierTest, DirectoryOfVersionOneIsRefusedNamingBothVersions) {
  ASSERT_TRUE(env_.CreateDir(options_.dir).ok());
  // A version-1 segment header, valid in every other respect.
  std::vector<std::byte> page(disk::kSegmentHeaderBytes);
  const uint32_t magic = disk::kSegmentMagic;
  const uint16_t version = 1;
  const uint64_t id = 1;
  const uint64_t created = clock_.now_us.load();
  std::memcpy(page.data(), &magic, 4);
  std::memcpy(page.data() + 4, &version, 2);
  std::memcpy(page.data() + 8, &id, 8);
  std::memcpy(page.data() + 16, &created, 8);
  const uint64_t checksum = Checksum64(std::span<const std::byte>(page).first(24));
  std::memcpy(page.data() + 24, &checksum, 8);
  FileOptions fo;
  fo.create = true;
  Result<std::unique_ptr<File>> f = mem_->OpenFile(options_.dir + "/0000000001.seg", fo);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Write(0, page).ok());
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("version 1"), std::string_view::npos) << s.ToString();
  EXPECT_NE(s.message().find("version 2"), std::string_view::npos) << s.ToString();
  EXPECT_EQ(SegmentFiles().size(), 1u);  // Refused, not removed.
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

TEST_F(DiskTierTest, ReclamationNeverDropsUnreadBlocksYoungerThanTheOldest) {
  ASSERT_TRUE(Open().ok());
  const uint64_t max_segments = options_.capacity_bytes / options_.segment_bytes;
  // Fill the disk up to its second-to-last segment, remembering what went into the last
  // sealed one; nothing is ever read, so no block has its CLOCK bit.
  std::vector<uint64_t> young;
  uint64_t k = 0;
  for (; tier_->Stats().segments < max_segments - 1; ++k) {
    ASSERT_TRUE(Put(k).ok());
    if (tier_->Stats().segments == max_segments - 2) young.push_back(k);
  }
  ASSERT_GE(young.size(), 4u);
  // Most of the young segment is deleted: it now has the most dead bytes of all.
  for (size_t i = 1; i < young.size(); ++i) ASSERT_TRUE(tier_->Erase(0, Key(young[i])).ok());
  // Writing on makes the directory full: a segment must go.
  while (tier_->Stats().reclaimed_segments == 0) ASSERT_TRUE(Put(k++).ok());
  DiskTierStats s = tier_->Stats();
  EXPECT_EQ(s.evictions, 0u);  // The young segment was compacted: its survivor moved.
  EXPECT_EQ(s.relocated_blocks, 1u);
  EXPECT_TRUE(Check(young[0]).ok());
  // Writing on, the oldest segment goes next, and its unread blocks with it.
  while (tier_->Stats().reclaimed_segments == 1) ASSERT_TRUE(Put(k++).ok());
  EXPECT_GT(tier_->Stats().evictions, 0u);
  EXPECT_EQ(Check(0).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Check(young[0]).ok());
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

TEST_F(DiskTierTest, EraseSessionRemovesOnlyThatSessionOfThatTenantAndSurvivesReopen) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 6; ++k) ASSERT_TRUE(PutBf16(k, k < 4 ? 7 : 8).ok());
  ASSERT_TRUE(PutBf16(100, 7, kBlock, 1).ok());  // The same session number, another tenant.
  EXPECT_EQ(tier_->EraseSession(0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier_->EraseSession(9, 7).status().code(), StatusCode::kInvalidArgument);
  Result<uint64_t> n = tier_->EraseSession(0, 7);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 4u);
  ASSERT_TRUE(PutBf16(50, 7).ok());  // A put after the erase belongs to the session anew.
  auto expect_state = [&] {
    for (uint64_t k = 0; k < 4; ++k) EXPECT_EQ(CheckBf16(k).code(), StatusCode::kNotFound) << k;
    for (uint64_t k = 4; k < 6; ++k) EXPECT_TRUE(CheckBf16(k).ok()) << k;
    EXPECT_TRUE(CheckBf16(50).ok());
    EXPECT_TRUE(CheckBf16(100, kBlock, 1).ok());
  };
  expect_state();
  Crash();  // Recovery scans the open segment.
  ASSERT_TRUE(Open().ok());
  expect_state();
  tier_.reset();  // Recovery from the footer alone.
  ASSERT_TRUE(Open().ok());
  expect_state();
  Result<DiskBlockInfo> info = tier_->Describe(0, Key(4));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->session, 8u);
}

TEST_F(DiskTierTest, ErasedSessionStaysErasedAfterItsTombstoneIsRelocated) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(PutBf16(1, 3).ok());
  ASSERT_TRUE(PutBf16(2, 4).ok());
  ASSERT_TRUE(CheckBf16(1).ok());
  ASSERT_TRUE(tier_->EraseSession(0, 4).ok());
  for (uint64_t k = 1000; k < 1200; ++k) {
    ASSERT_TRUE(Put(k).ok());
    ASSERT_TRUE(CheckBf16(1).ok());
  }
  EXPECT_GT(tier_->Stats().reclaimed_segments, 0u);
  Crash();
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(CheckBf16(2).code(), StatusCode::kNotFound);
  EXPECT_TRUE(CheckBf16(1).ok());
}

TEST_F(DiskTierTest, DescribeReportsSessionCreationTimeAndDtype) {
  ASSERT_TRUE(Open().ok());
  const uint64_t stored_at = clock_.now_us.load();
  ASSERT_TRUE(PutBf16(1, 42).ok());
  std::vector<std::byte> v = Value(2, 100);
  DiskTier::PutRequest old{Key(2), v, 0, stored_at - 5000};  // Promoted, then demoted again.
  ASSERT_TRUE(tier_->PutMany(0, {&old, 1})[0].ok());
  auto expect_info = [&] {
    Result<DiskBlockInfo> a = tier_->Describe(0, Key(1));
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->value_bytes, kBlock);
    EXPECT_EQ(a->session, 42u);
    EXPECT_EQ(a->created_us, stored_at);
    EXPECT_EQ(a->dtype, KvDtype::kBf16);
    Result<DiskBlockInfo> b = tier_->Describe(0, Key(2));
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->created_us, stored_at - 5000);
    EXPECT_EQ(b->session, 0u);
    EXPECT_FALSE(b->dtype.has_value());
  };
  expect_info();
  clock_.now_us += 100;
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  expect_info();
  EXPECT_EQ(tier_->Describe(0, Key(3)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->Describe(1, Key(1)).status().code(), StatusCode::kNotFound);
}

TEST_F(DiskTierTest, BlocksExpireAtMaxAgeWhateverTheirAccessesAlsoAfterReopen) {
  tenants_[0].max_age_us = 1000;
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(2, kBlock, 1).ok());  // beta has no max age.
  std::vector<std::byte> v = Value(3, kBlock);
  DiskTier::PutRequest born_old{Key(3), v, 0, clock_.now_us.load() - 2000};
  ASSERT_TRUE(tier_->PutMany(0, {&born_old, 1})[0].ok());
  EXPECT_EQ(Check(3).code(), StatusCode::kNotFound);  // Older than max age when stored.
  clock_.now_us += 600;
  ASSERT_TRUE(Check(1).ok());  // Reads do not make a block younger.
  ASSERT_TRUE(Put(4).ok());
  tier_.reset();
  clock_.now_us += 600;
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Check(1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Check(4).ok());
  EXPECT_TRUE(Check(2, kBlock, 1).ok());
  EXPECT_EQ(tier_->Stats().expirations, 1u);
  clock_.now_us += 1000;
  EXPECT_EQ(tier_->PurgeExpired(), 2u);  // 3 (recovered, born old) and now 4.
  EXPECT_TRUE(Check(2, kBlock, 1).ok());
}

TEST_F(DiskTierTest, CompressedBlocksTakeLessRoomAndRoundTripAcrossReopen) {
  ASSERT_NO_FATAL_FAILURE(UseDataServices(/*compress=*/true, /*encrypt=*/false));
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 20; ++k) ASSERT_TRUE(PutBf16(k, 1).ok());
  ASSERT_TRUE(Put(100).ok());  // Opaque bytes without a dtype still round-trip.
  DiskTierStats s = tier_->Stats();
  EXPECT_EQ(s.logical_bytes, 21 * kBlock);
  EXPECT_LT(s.stored_bytes, s.logical_bytes * 9 / 10);
  for (uint64_t k = 0; k < 20; ++k) EXPECT_TRUE(CheckBf16(k).ok()) << k;
  Crash();
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 20; ++k) EXPECT_TRUE(CheckBf16(k).ok()) << k;
  EXPECT_TRUE(Check(100).ok());
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  DiskTierStats reopened = tier_->Stats();
  EXPECT_EQ(reopened.logical_bytes, s.logical_bytes);
  EXPECT_EQ(reopened.stored_bytes, s.stored_bytes);  // Footers carry the stored lengths.
  EXPECT_TRUE(CheckBf16(7).ok());
}

TEST_F(DiskTierTest, LargeBatchesAreEncodedInParallelAndRoundTrip) {
  // Blocks large enough for the tier to encode them on several threads, with small ones
  // between them, so that the windows encoded at once differ in length.
  options_.segment_bytes = 4 * kMiB;
  options_.capacity_bytes = 8 * options_.segment_bytes;
  options_.io_depth = 8;
  ASSERT_NO_FATAL_FAILURE(UseDataServices(/*compress=*/true, /*encrypt=*/true));
  ASSERT_TRUE(Open().ok());
  std::vector<std::vector<std::byte>> values;
  std::vector<DiskTier::PutRequest> reqs;
  for (uint64_t k = 0; k < 40; ++k) {
    const size_t bytes = k % 7 < 3 ? 4096 : 128 * 1024;
    values.push_back(k % 3 == 0 ? Value(k, bytes) : Bf16Value(k, bytes));
  }
  for (uint64_t k = 0; k < 40; ++k) {
    reqs.push_back({Key(k), values[k], 5, 0,
                    k % 3 == 0 ? std::nullopt : std::optional<KvDtype>(KvDtype::kBf16)});
  }
  for (const Status& s : tier_->PutMany(0, reqs)) ASSERT_TRUE(s.ok()) << s.ToString();
  auto check_all = [&] {
    for (uint64_t k = 0; k < 40; ++k) {
      std::vector<std::byte> out(values[k].size());
      BlockKey key = Key(k);
      std::span<std::byte> span(out);
      Result<size_t> r = tier_->ReadMany(0, {&key, 1}, {&span, 1})[0];
      ASSERT_TRUE(r.ok()) << k << " " << r.status().ToString();
      EXPECT_EQ(*r, values[k].size()) << k;
      EXPECT_EQ(out, values[k]) << k;
    }
  };
  check_all();
  EXPECT_LT(tier_->Stats().stored_bytes, tier_->Stats().logical_bytes);
  Crash();
  ASSERT_TRUE(Open().ok());
  check_all();
}

TEST_F(DiskTierTest, EncryptedBlocksRoundTripAcrossReopenAndNoPlaintextReachesTheDisk) {
  ASSERT_NO_FATAL_FAILURE(UseDataServices(/*compress=*/true, /*encrypt=*/true));
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(PutBf16(k, 1).ok());
  for (uint64_t k = 10; k < 14; ++k) ASSERT_TRUE(Put(k, 5000).ok());  // Incompressible.
  ASSERT_TRUE(PutBf16(20, 2, kBlock, 1).ok());
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 8; ++k) EXPECT_TRUE(CheckBf16(k).ok()) << k;
  for (uint64_t k = 10; k < 14; ++k) EXPECT_TRUE(Check(k, 5000).ok()) << k;
  EXPECT_TRUE(CheckBf16(20, kBlock, 1).ok());
  tier_.reset();
  for (const std::string& seg : SegmentFiles()) {
    const std::vector<std::byte> bytes = ReadFile(seg);
    const std::vector<std::byte> plain = Value(11, 5000);
    const std::span<const std::byte> needle = std::span(plain).subspan(1000, 64);
    EXPECT_EQ(std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end()), bytes.end())
        << seg << " holds plaintext";
  }
  // Without the codec (no keys), the records are unreadable: counted misses, never bytes.
  codec_.reset();
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Check(10, 5000).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->Stats().unreadable_records, 1u);
}

TEST_F(DiskTierTest, ReclamationMovesEncodedRecordsAsTheyAre) {
  ASSERT_NO_FATAL_FAILURE(UseDataServices(/*compress=*/true, /*encrypt=*/true));
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(PutBf16(1, 9).ok());  // Hot: read again and again.
  const uint64_t created = tier_->Describe(0, Key(1))->created_us;
  for (uint64_t k = 1000; k < 1300; ++k) {
    clock_.now_us += 10;
    ASSERT_TRUE(PutBf16(k).ok()) << k;
    ASSERT_TRUE(CheckBf16(1).ok()) << "hot block lost after put " << k;
  }
  DiskTierStats s = tier_->Stats();
  EXPECT_GT(s.relocated_blocks, 0u);
  EXPECT_EQ(s.corrupt_records + s.unreadable_records, 0u);
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  EXPECT_TRUE(CheckBf16(1).ok());
  Result<DiskBlockInfo> info = tier_->Describe(0, Key(1));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->created_us, created);  // Relocation keeps the creation time.
  EXPECT_EQ(info->session, 9u);
}

TEST_F(DiskTierTest, StatsReportIndexMemory) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(Put(k, 100).ok());
  DiskTierStats s = tier_->Stats();
  EXPECT_GT(s.index_memory_bytes, 0u);
  EXPECT_EQ(s.live_bytes, 10 * disk::RecordBytes(5, 100));
  EXPECT_EQ(s.logical_bytes, 1000u);
  EXPECT_EQ(s.stored_bytes, 1000u);  // No codec: stored as they are.
}

}  // namespace
}  // namespace kvtier::disk_test
