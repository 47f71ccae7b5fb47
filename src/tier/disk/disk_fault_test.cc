// The DiskTier under faults: torn and corrupt records, garbage segments, full disk, EIO on
// write, read and fsync, power loss, tampered ciphertexts and shredded keys. Each must be a
// clear error or a counted miss, never a crash and never wrong bytes.

#include <gtest/gtest.h>

#include <functional>

#include "src/common/checksum.h"
#include "src/tier/disk/disk_format.h"
#include "src/tier/disk/disk_test_util.h"

namespace kvtier::disk_test {
namespace {

class DiskFaultTest : public DiskTierTestBase {
 protected:
  // Overwrites `n` bytes at `offset` of a segment file with a pattern.
  void Scribble(const std::string& path, uint64_t offset, size_t n) {
    Result<std::unique_ptr<File>> f = mem_->OpenFile(path, FileOptions{});
    ASSERT_TRUE(f.ok());
    std::vector<std::byte> junk(n, std::byte{0x5a});
    ASSERT_TRUE((*f)->Write(offset, junk).ok());
  }
  void Truncate(const std::string& path, uint64_t size) {
    Result<std::unique_ptr<File>> f = mem_->OpenFile(path, FileOptions{});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Truncate(size).ok());
  }
  uint64_t FileSize(const std::string& path) {
    return *(*mem_->OpenFile(path, FileOptions{}))->Size();
  }
  // Rewrites the record at `offset` of a segment with `edit` applied to its stored payload,
  // and a payload checksum (and header checksum) that match the edited bytes: damage that only
  // the codec (the GCM tag) can catch.
  void TamperWithValidChecksum(const std::string& path, uint64_t offset,
                               const std::function<void(std::span<std::byte>)>& edit) {
    Result<std::unique_ptr<File>> f = mem_->OpenFile(path, FileOptions{});
    ASSERT_TRUE(f.ok());
    std::vector<std::byte> record(64 * 1024);
    size_t got = 0;
    ASSERT_TRUE((*f)->Read(offset, record, &got).ok());
    size_t header_bytes = 0;
    Result<disk::RecordHeader> h = disk::DecodeRecordHeader(record, &header_bytes);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_LE(header_bytes + h->stored_bytes, got);
    std::span<std::byte> payload = std::span(record).subspan(header_bytes, h->stored_bytes);
    edit(payload);
    h->payload_checksum = Checksum64(payload);
    disk::EncodeRecordHeader(*h, record);
    ASSERT_TRUE((*f)->Write(offset, std::span(record).first(header_bytes + h->stored_bytes)).ok());
  }
  // Offset of the record of `key` in the only segment, by scanning its record headers.
  uint64_t RecordOffset(const std::string& path, uint64_t key) {
    const std::vector<std::byte> bytes = ReadFile(path);
    for (uint64_t pos = disk::kSegmentHeaderBytes; pos + disk::kPageBytes <= bytes.size();) {
      size_t header_bytes = 0;
      Result<disk::RecordHeader> h =
          disk::DecodeRecordHeader(std::span(bytes).subspan(pos), &header_bytes);
      if (!h.ok()) break;
      if (h->key == Key(key)) return pos;
      pos += disk::RecordBytes(h->tenant.size(), h->stored_bytes);
    }
    ADD_FAILURE() << "no record of key " << key;
    return 0;
  }
  // Every key in [0, n) either reads back exactly or misses; returns how many read back.
  size_t CountIntact(uint64_t n) {
    size_t intact = 0;
    for (uint64_t k = 0; k < n; ++k) {
      Status s = Check(k);
      EXPECT_TRUE(s.ok() || s.code() == StatusCode::kNotFound) << s.ToString();
      intact += s.ok() ? 1 : 0;
    }
    return intact;
  }
};

TEST_F(DiskFaultTest, TornTailRecordIsDroppedAndCounted) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 5; ++k) ASSERT_TRUE(Put(k).ok());
  Crash();
  const uint64_t record = disk::RecordBytes(5, kBlock);
  // The last record loses its end (the file was preallocated: cut at the records' end).
  Truncate(SegmentFiles().back(), disk::kSegmentHeaderBytes + 5 * record - 3 * disk::kPageBytes);
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(CountIntact(5), 4u);
  EXPECT_EQ(Check(4).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->Stats().corrupt_records, 1u);
}

TEST_F(DiskFaultTest, CorruptPayloadFoundAtOpenIsDroppedAndCounted) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 5; ++k) ASSERT_TRUE(Put(k).ok());
  Crash();
  const uint64_t record = disk::RecordBytes(5, kBlock);
  Scribble(SegmentFiles().back(), disk::kSegmentHeaderBytes + 2 * record + 1000, 100);
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Check(2).code(), StatusCode::kNotFound);
  EXPECT_EQ(CountIntact(5), 4u);  // A bad payload does not hide the records after it.
  EXPECT_EQ(tier_->Stats().corrupt_records, 1u);
}

TEST_F(DiskFaultTest, CorruptionFoundOnReadIsAMissAndTheBlockIsRemoved) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 5; ++k) ASSERT_TRUE(Put(k).ok());
  const uint64_t record = disk::RecordBytes(5, kBlock);
  Scribble(SegmentFiles().back(), disk::kSegmentHeaderBytes + record + 500, 8);
  EXPECT_EQ(Check(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->BlockSize(0, Key(1)).status().code(), StatusCode::kNotFound);
  DiskTierStats s = tier_->Stats();
  EXPECT_EQ(s.corrupt_records, 1u);
  EXPECT_EQ(s.blocks, 4u);
  EXPECT_EQ(CountIntact(5), 4u);
}

TEST_F(DiskFaultTest, SegmentOverwrittenWithGarbageServesNothingWrong) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 40; ++k) ASSERT_TRUE(Put(k).ok());
  tier_.reset();
  std::vector<std::string> segs = SegmentFiles();
  ASSERT_GE(segs.size(), 3u);
  // A sealed segment: garbage over its records and its footer.
  Scribble(segs[0], disk::kSegmentHeaderBytes, FileSize(segs[0]) - disk::kSegmentHeaderBytes);
  // Another: the header itself.
  Scribble(segs[1], 0, 64);
  // Another: cut in the middle of its footer.
  Truncate(segs[2], FileSize(segs[2]) - disk::kPageBytes - 10);
  ASSERT_TRUE(Open().ok());
  const size_t intact = CountIntact(40);
  EXPECT_LT(intact, 40u);
  EXPECT_GT(intact, 0u);
  EXPECT_GT(tier_->Stats().corrupt_records, 0u);
}

TEST_F(DiskFaultTest, GarbageFilesNeverCrashRecovery) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 20; ++k) ASSERT_TRUE(Put(k).ok());
  tier_.reset();
  // Deterministic pseudo-random garbage at many places in every segment.
  uint64_t x = 88172645463325252ULL;
  for (int round = 0; round < 20; ++round) {
    for (const std::string& seg : SegmentFiles()) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const uint64_t size = FileSize(seg);
      Scribble(seg, x % size, 1 + x % 300);
    }
    ASSERT_TRUE(Open().ok());
    CountIntact(20);
    tier_.reset();
  }
}

TEST_F(DiskFaultTest, FullDiskFailsThePutClearlyAndLeavesNothingBehind) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  env_.SetFilesystemFull(true);
  Status s = Put(2);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(Check(2).code(), StatusCode::kNotFound);
  env_.SetFilesystemFull(false);
  ASSERT_TRUE(Put(3).ok());
  EXPECT_TRUE(Check(1).ok());
  EXPECT_TRUE(Check(3).ok());
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(Check(2).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Check(1).ok());
  EXPECT_TRUE(Check(3).ok());
}

TEST_F(DiskFaultTest, WriteErrorInABatchFailsOnlyThoseRecordsAndReopenAgrees) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(100).ok());
  FaultInjectionEnv::Fault f;
  f.op = FaultInjectionEnv::Op::kWrite;
  f.skip = 2;
  f.count = 1;
  env_.AddFault(f);
  std::vector<std::vector<std::byte>> values;
  std::vector<DiskTier::PutRequest> reqs;
  for (uint64_t k = 0; k < 6; ++k) values.push_back(Value(k, kBlock));
  for (uint64_t k = 0; k < 6; ++k) reqs.push_back({Key(k), values[k]});
  std::vector<Status> st = tier_->PutMany(0, reqs);
  EXPECT_EQ(st[2].code(), StatusCode::kUnavailable) << st[2].ToString();
  for (uint64_t k = 0; k < 6; ++k) {
    if (k != 2) {
      EXPECT_TRUE(st[k].ok()) << k << " " << st[k].ToString();
    }
    EXPECT_EQ(Check(k).ok(), st[k].ok()) << k;
  }
  EXPECT_EQ(tier_->Stats().write_errors, 1u);
  Crash();
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 6; ++k) EXPECT_EQ(Check(k).ok(), st[k].ok()) << k;
  EXPECT_TRUE(Check(100).ok());
}

TEST_F(DiskFaultTest, ReadErrorIsAMiss) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(2).ok());
  FaultInjectionEnv::Fault f;
  f.op = FaultInjectionEnv::Op::kRead;
  f.count = 1;
  env_.AddFault(f);
  EXPECT_EQ(Check(1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Check(2).ok());
  DiskTierStats s = tier_->Stats();
  EXPECT_EQ(s.read_errors, 1u);
  EXPECT_EQ(s.misses, 1u);
}

TEST_F(DiskFaultTest, FsyncFailureMeansNotAcknowledgedAsSynced) {
  options_.durability = DiskTierOptions::Durability::kSynced;
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  FaultInjectionEnv::Fault f;
  f.op = FaultInjectionEnv::Op::kSync;
  f.count = 1;
  env_.AddFault(f);
  Status s = Put(2);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not acknowledged as synced"), std::string_view::npos)
      << s.ToString();
  EXPECT_EQ(Check(2).code(), StatusCode::kNotFound);
  ASSERT_TRUE(Put(3).ok());  // A new segment takes the writes.
  PowerLoss();
  ASSERT_TRUE(Open().ok());
  EXPECT_TRUE(Check(1).ok());
  EXPECT_TRUE(Check(3).ok());
  Status two = Check(2);
  EXPECT_TRUE(two.ok() || two.code() == StatusCode::kNotFound) << two.ToString();
}

TEST_F(DiskFaultTest, PowerLossWithSyncedDurabilityLosesNothingAcknowledged) {
  options_.durability = DiskTierOptions::Durability::kSynced;
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 30; ++k) ASSERT_TRUE(Put(k).ok());
  ASSERT_TRUE(tier_->Erase(0, Key(7)).ok());
  PowerLoss();
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 30; ++k) {
    if (k == 7) {
      EXPECT_EQ(Check(k).code(), StatusCode::kNotFound);
    } else {
      EXPECT_TRUE(Check(k).ok()) << k;
    }
  }
}

TEST_F(DiskFaultTest, PowerLossWithWrittenDurabilityKeepsWhatSyncCovered) {
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(Put(k).ok());
  ASSERT_TRUE(tier_->Sync().ok());
  for (uint64_t k = 10; k < 20; ++k) ASSERT_TRUE(Put(k).ok());
  PowerLoss();
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 10; ++k) EXPECT_TRUE(Check(k).ok()) << k;
  CountIntact(20);  // The rest may be gone, but nothing is wrong.
}

TEST_F(DiskFaultTest, FlippedBitsInAnEncryptedPayloadAreACountedMiss) {
  ASSERT_NO_FATAL_FAILURE(UseDataServices(/*compress=*/true, /*encrypt=*/true));
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 3; ++k) ASSERT_TRUE(PutBf16(k).ok());
  const std::string seg = SegmentFiles().back();
  Scribble(seg, RecordOffset(seg, 1) + disk::kPageBytes, 4);  // Payload bytes, not the header.
  EXPECT_EQ(CheckBf16(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(CheckBf16(1).code(), StatusCode::kNotFound);  // Removed: a plain miss now.
  DiskTierStats s = tier_->Stats();
  EXPECT_EQ(s.corrupt_records, 1u);
  EXPECT_EQ(s.blocks, 2u);
  EXPECT_TRUE(CheckBf16(0).ok());
  EXPECT_TRUE(CheckBf16(2).ok());
}

TEST_F(DiskFaultTest, TamperedCiphertextWithAValidChecksumIsACountedMissNeverServed) {
  ASSERT_NO_FATAL_FAILURE(UseDataServices(/*compress=*/true, /*encrypt=*/true));
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 3; ++k) ASSERT_TRUE(PutBf16(k).ok());
  ASSERT_TRUE(Put(7, 5000).ok());  // Stored uncompressed, still sealed.
  Crash();
  const std::string seg = SegmentFiles().back();
  ASSERT_NO_FATAL_FAILURE(TamperWithValidChecksum(
      seg, RecordOffset(seg, 1), [](std::span<std::byte> p) { p[p.size() / 2] ^= std::byte{1}; }));
  ASSERT_NO_FATAL_FAILURE(TamperWithValidChecksum(
      seg, RecordOffset(seg, 7), [](std::span<std::byte> p) { p[0] ^= std::byte{0x80}; }));
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(tier_->Stats().corrupt_records, 0u);  // Checksums hold: recovery indexes them.
  EXPECT_EQ(CheckBf16(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(Check(7, 5000).code(), StatusCode::kNotFound);
  DiskTierStats s = tier_->Stats();
  EXPECT_EQ(s.corrupt_records, 2u);
  EXPECT_EQ(s.unreadable_records, 0u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_TRUE(CheckBf16(0).ok());
  EXPECT_TRUE(CheckBf16(2).ok());
}

TEST_F(DiskFaultTest, BlocksOfAShreddedTenantAreCountedUnreadableMisses) {
  ASSERT_NO_FATAL_FAILURE(UseDataServices(/*compress=*/true, /*encrypt=*/true));
  ASSERT_TRUE(Open().ok());
  for (uint64_t k = 0; k < 3; ++k) ASSERT_TRUE(PutBf16(k).ok());
  ASSERT_TRUE(PutBf16(5, 0, kBlock, 1).ok());
  ASSERT_TRUE(keys_->ShredTenant("alpha", "test").ok());
  for (uint64_t k = 0; k < 3; ++k) EXPECT_EQ(CheckBf16(k).code(), StatusCode::kNotFound) << k;
  DiskTierStats s = tier_->Stats();
  EXPECT_EQ(s.unreadable_records, 3u);
  EXPECT_EQ(s.corrupt_records, 0u);
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_TRUE(CheckBf16(5, kBlock, 1).ok());  // Another tenant's key is untouched.
  // After a restart the records are still on disk, and still unreadable.
  tier_.reset();
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(CheckBf16(0).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->Stats().unreadable_records, 1u);
  // New puts of the tenant are sealed under a fresh key and read back.
  ASSERT_TRUE(PutBf16(9).ok());
  EXPECT_TRUE(CheckBf16(9).ok());
}

// EIO on every write, then a read-only file system (EROFS as PermissionDenied): G3 says it
// is not writable and why, still serves what it holds, and is writable again after the first
// write that works.
TEST_F(DiskFaultTest, WhileWritesFailTheTierSaysSoServesReadsAndRecoversOnTheNextWrite) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  EXPECT_TRUE(tier_->Stats().writable);
  FaultInjectionEnv::Fault eio;
  eio.op = FaultInjectionEnv::Op::kWrite;
  env_.AddFault(eio);
  EXPECT_EQ(Put(2).code(), StatusCode::kUnavailable);
  DiskTierStats s = tier_->Stats();
  EXPECT_FALSE(s.writable);
  EXPECT_NE(s.write_fault.find("injected EIO"), std::string::npos) << s.write_fault;
  EXPECT_GT(s.write_fault_since_us, 0u);
  EXPECT_TRUE(Check(1).ok()) << "reads go on";
  env_.ClearFaults();
  FaultInjectionEnv::Fault read_only;
  read_only.op = FaultInjectionEnv::Op::kWrite;
  read_only.error = Status::PermissionDenied("injected EROFS: read-only file system");
  env_.AddFault(read_only);
  EXPECT_EQ(Put(3).code(), StatusCode::kPermissionDenied);
  s = tier_->Stats();
  EXPECT_FALSE(s.writable);
  EXPECT_NE(s.write_fault.find("EROFS"), std::string::npos) << s.write_fault;
  EXPECT_TRUE(Check(1).ok());
  env_.ClearFaults();
  ASSERT_TRUE(Put(4).ok());
  s = tier_->Stats();
  EXPECT_TRUE(s.writable);
  EXPECT_EQ(s.write_fault, "");
  EXPECT_TRUE(Check(4).ok());
}

TEST_F(DiskFaultTest, FailedTombstoneIsReported) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(Put(1).ok());
  env_.SetFilesystemFull(true);
  Status s = tier_->Erase(0, Key(1));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("may return after a restart"), std::string_view::npos);
  EXPECT_EQ(Check(1).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvtier::disk_test
