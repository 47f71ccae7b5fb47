#include "src/tier/disk/disk_fsck.h"

#include <gtest/gtest.h>

#include "src/tier/disk/disk_format.h"
#include "src/tier/disk/disk_test_util.h"

namespace kvtier::disk {
namespace {

using disk_test::DiskTierTestBase;
using disk_test::Key;

class DiskFsckTest : public DiskTierTestBase {
 protected:
  Result<DiskCheckReport> Fsck(bool repair) { return CheckDiskDirectory(mem_.get(), "/disk", repair); }

  void Overwrite(const std::string& path, uint64_t offset, std::span<const std::byte> bytes) {
    Result<std::unique_ptr<File>> f = mem_->OpenFile(path, FileOptions{});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Write(offset, bytes).ok());
  }
  void FlipByte(const std::string& path, uint64_t offset) {
    std::vector<std::byte> bytes = ReadFile(path);
    ASSERT_LT(offset, bytes.size());
    std::byte b = bytes[offset] ^ std::byte{0x40};
    Overwrite(path, offset, {&b, 1});
  }
};

TEST_F(DiskFsckTest, ACleanDirectoryIsCountedAsAnOpenWouldServeItAndRepairChangesNothing) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 30; ++k) ASSERT_TRUE(Put(k, kBlock, k % 2).ok());
  ASSERT_TRUE(Put(4, kBlock, 1).ok());  // The same key under the other tenant: two blocks.
  ASSERT_TRUE(tier_->Erase(0, Key(2)).ok());
  // While the tier has the directory open, fsck refuses.
  Result<DiskCheckReport> busy = Fsck(false);
  ASSERT_EQ(busy.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.status().message().find("stop the kvtierd"), std::string::npos);
  tier_.reset();

  const std::vector<std::string> before = SegmentFiles();
  Result<DiskCheckReport> r = Fsck(false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->clean()) << (r->problems.empty() ? "" : r->problems[0]);
  EXPECT_EQ(r->segments, before.size());
  EXPECT_EQ(r->unsealed_segments, 0u);  // A clean close seals.
  EXPECT_EQ(r->blocks, 31u);
  EXPECT_EQ(r->tombstones, 1u);
  EXPECT_EQ(r->live_blocks, 30u);       // 31 puts, one erased.
  EXPECT_EQ(r->tenants["alpha"].live_blocks, 14u);
  EXPECT_EQ(r->tenants["beta"].live_blocks, 16u);
  EXPECT_EQ(r->tenants["alpha"].live_value_bytes, 14 * kBlock);

  Result<DiskCheckReport> repaired = Fsck(true);
  ASSERT_TRUE(repaired.ok());
  EXPECT_EQ(repaired->removed_segments + repaired->rewritten_segments, 0u);
  EXPECT_EQ(SegmentFiles(), before);
}

TEST_F(DiskFsckTest, ACorruptPayloadIsFoundAndRepairDropsOnlyThatRecord) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put(k).ok());
  tier_.reset();
  ASSERT_EQ(SegmentFiles().size(), 1u);
  // The second record's payload: the first record takes its header page plus kBlock bytes.
  const uint64_t second = kSegmentHeaderBytes + AlignUp(RecordHeaderBytes(5) + kBlock);
  FlipByte(SegmentFiles()[0], second + kPageBytes + 100);

  Result<DiskCheckReport> r = Fsck(false);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->clean());
  EXPECT_EQ(r->corrupt_records, 1u);
  EXPECT_EQ(r->live_blocks, 7u);
  ASSERT_EQ(r->problems.size(), 1u);
  EXPECT_EQ(r->problems[0], "0000000001.seg: record at page " +
                                std::to_string(second / kPageBytes) + ": payload checksum mismatch");

  Result<DiskCheckReport> repaired = Fsck(true);
  ASSERT_TRUE(repaired.ok());
  EXPECT_EQ(repaired->rewritten_segments, 1u);
  EXPECT_EQ(repaired->dropped_records, 1u);
  Result<DiskCheckReport> after = Fsck(false);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->clean());
  EXPECT_EQ(after->live_blocks, 7u);
  EXPECT_EQ(after->segments, 1u);
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 8; ++k) {
    Status s = Check(k);
    if (k == 1) {
      EXPECT_EQ(s.code(), StatusCode::kNotFound);
    } else {
      EXPECT_TRUE(s.ok()) << k << ": " << s.ToString();
    }
  }
}

TEST_F(DiskFsckTest, ATornTailAfterACrashIsFoundAndRepairSealsWhatWasAcknowledged) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 5; ++k) ASSERT_TRUE(Put(k).ok());
  Crash();  // Unsealed.
  const std::string seg = SegmentFiles()[0];
  // A record header that reached the disk without its payload, right after the last record.
  std::vector<std::byte> file = ReadFile(seg);
  uint64_t end = kSegmentHeaderBytes + 5 * AlignUp(RecordHeaderBytes(5) + kBlock);
  std::vector<std::byte> header(file.begin() + kSegmentHeaderBytes,
                                file.begin() + kSegmentHeaderBytes + kPageBytes);
  header[20] ^= std::byte{1};  // Its checksum no longer holds: a torn write.
  Overwrite(seg, end, header);

  Result<DiskCheckReport> r = Fsck(false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->unsealed_segments, 1u);
  EXPECT_EQ(r->torn_records, 1u);
  EXPECT_EQ(r->live_blocks, 5u);
  ASSERT_TRUE(Fsck(true).ok());
  Result<DiskCheckReport> after = Fsck(false);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->clean());
  EXPECT_EQ(after->unsealed_segments, 0u);
  EXPECT_EQ(after->sealed_segments, 1u);
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 5; ++k) EXPECT_TRUE(Check(k).ok()) << k;
}

TEST_F(DiskFsckTest, ABadSegmentHeaderAndOrphanSegmentsAreRemovedByRepair) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 3; ++k) ASSERT_TRUE(Put(k).ok());
  tier_.reset();
  ASSERT_TRUE(Open().ok());  // A new segment: erase the first one's blocks, keep one more.
  for (uint64_t k = 0; k < 3; ++k) ASSERT_TRUE(tier_->Erase(0, Key(k)).ok());
  ASSERT_TRUE(Put(10).ok());
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(11).ok());
  tier_.reset();
  std::vector<std::string> segs = SegmentFiles();
  ASSERT_EQ(segs.size(), 3u);
  FlipByte(segs[2], 3);  // The third segment's header magic.

  Result<DiskCheckReport> r = Fsck(false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bad_segments, 1u);
  EXPECT_EQ(r->orphan_segments, 1u);  // The first: its three blocks are deleted.
  EXPECT_EQ(r->live_blocks, 1u);      // 10; 11 was in the bad segment.
  EXPECT_EQ(r->dead_records, 3u);
  Result<DiskCheckReport> repaired = Fsck(true);
  ASSERT_TRUE(repaired.ok());
  EXPECT_EQ(repaired->removed_segments, 2u);
  EXPECT_EQ(SegmentFiles(), std::vector<std::string>{segs[1]});
  // The tombstones left have nothing older to delete: dead, but the segment holds block 10.
  Result<DiskCheckReport> after = Fsck(false);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->clean());
  EXPECT_EQ(after->orphan_segments, 0u);
  ASSERT_TRUE(Open().ok());
  EXPECT_TRUE(Check(10).ok());
  for (uint64_t k = 0; k < 3; ++k) EXPECT_EQ(Check(k).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvtier::disk
