// DiskTierImpl: the DiskTier (see disk_tier.h for the contract, docs/disk_format.md for the
// format). Split by concern:
//   disk_tier_impl.cc  open, reads, lookups, erases, stats;
//   disk_writer.cc     appending records: segments, write rounds, sealing, puts;
//   disk_reclaim.cc    space: segment reclamation, tenant budgets, expiry;
//   disk_recovery.cc   rebuilding the index from the segments at open.
//
// Locking: write_mu_ serialises everything that appends to or deletes segments (puts, erases,
// reclamation, sync); mu_ guards the index and the segment table and is never held across
// I/O. Order: write_mu_, then mu_, then pool_mu_. Readers take only mu_ (and pool_mu_), so a
// get never waits for a write in flight. A segment's File is shared: a reader keeps a deleted
// segment's file open until its read completes.
//
// Data services: puts are encoded by the BlockCodec a window (EncodeWindowEnd) at a time, on
// codec_pool_ with the writer that holds write_mu_; a worker touches only its window's records
// and buffers (and the thread-safe codec). Reads decode as their I/Os complete, on codec_pool_
// with the reader, without any lock.

#ifndef KVTIER_TIER_DISK_DISK_TIER_IMPL_H_
#define KVTIER_TIER_DISK_DISK_TIER_IMPL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "src/common/mutex.h"
#include "src/common/worker_pool.h"
#include "src/env/aligned_buffer.h"
#include "src/services/block_codec.h"
#include "src/tier/disk/disk_format.h"
#include "src/tier/disk/disk_index.h"
#include "src/tier/disk/disk_tier.h"

namespace kvtier::disk {

class DiskTierImpl final : public DiskTier {
 public:
  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options,
                                                std::vector<DiskTenantConfig> tenants, Env* env,
                                                BlockCodec* codec);
  ~DiskTierImpl() override;

  std::vector<Status> PutMany(uint32_t tenant, std::span<const PutRequest> requests) override
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  Result<size_t> BlockSize(uint32_t tenant, const BlockKey& key) override ABSL_LOCKS_EXCLUDED(mu_);
  Result<DiskBlockInfo> Describe(uint32_t tenant, const BlockKey& key) override
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<Result<size_t>> ReadMany(uint32_t tenant, std::span<const BlockKey> keys,
                                       std::span<const std::span<std::byte>> outs) override
      ABSL_LOCKS_EXCLUDED(mu_);
  size_t LookupPrefix(uint32_t tenant, std::span<const BlockKey> keys) override
      ABSL_LOCKS_EXCLUDED(mu_);
  Status Erase(uint32_t tenant, const BlockKey& key) override ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  Result<uint64_t> EraseTenant(uint32_t tenant) override ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  std::vector<BlockKey> ListKeys(uint32_t tenant, uint64_t* cursor, size_t slots) override
      ABSL_LOCKS_EXCLUDED(mu_);
  Result<uint64_t> EraseSession(uint32_t tenant, SessionId session) override
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  size_t PurgeExpired() override ABSL_LOCKS_EXCLUDED(mu_);
  Status Sync() override ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  DiskTierStats Stats() const override ABSL_LOCKS_EXCLUDED(mu_);
  void SetEventListener(BlockEventListener* listener) override { events_ = listener; }

 private:
  struct Segment {
    std::shared_ptr<File> file;
    uint64_t file_bytes = 0;      // Bytes of the file: header, records and footer.
    uint64_t live_bytes = 0;      // Bytes of records the index points at.
    uint64_t min_sequence = UINT64_MAX;
    bool sealed = false;          // No more appends: footer written, or abandoned after a fault.
  };
  // The segment being appended to. Guarded by write_mu_.
  struct OpenSegment {
    uint32_t id = 0;
    std::shared_ptr<File> file;
    uint64_t end = 0;                    // Next record offset.
    std::vector<FooterEntry> entries;    // Records written so far; tenant = our tenant index.
    bool dir_synced = false;             // Its creation survives power loss.
    bool data_synced = true;             // Every acknowledged record survives power loss.
  };
  // A record to append. For a put, `payload` is encoded in at submission (record_bytes is the
  // largest the encoding can need until then, the exact length after); for a relocation,
  // `prebuilt` already holds the whole record.
  struct PendingRecord {
    RecordHeader header;
    uint16_t tenant = 0;
    std::span<const std::byte> payload;
    AlignedBuffer prebuilt;
    uint64_t record_bytes = 0;
    bool consumed_space = false;  // Written or attempted: its bytes of the segment are used.
    // For a relocation: where the block was, and its last access.
    bool relocation = false;
    uint32_t from_segment = 0;
    uint32_t from_offset_pages = 0;
    uint64_t last_access_us = 0;
    // Results.
    Status status;
    uint32_t segment = 0;
    uint32_t offset_pages = 0;
  };
  struct TenantState {
    DiskTenantConfig config;
    uint64_t used_bytes = 0;  // Record bytes of the tenant's indexed blocks.
  };
  // What a reader needs after dropping mu_.
  struct Location {
    std::shared_ptr<File> file;
    uint32_t segment = 0;
    uint32_t offset_pages = 0;
    uint32_t record_pages = 0;
    uint32_t value_bytes = 0;
  };
  // kReplaced: a newer record of the same key takes the entry's place (no event, no count).
  enum class DropReason { kEvicted, kExpired, kDeleted, kCorrupt, kUnreadable, kReadError, kReplaced };
  // Outcome of checking and decoding one block record read from disk.
  struct ReadOutcome {
    Status status;  // OK, or why nothing was returned.
    DropReason drop = DropReason::kCorrupt;
    bool drop_entry = false;  // The record is bad for good: remove it from the index.
  };

  DiskTierImpl(const DiskTierOptions& options, std::vector<DiskTenantConfig> tenants, Env* env,
               BlockCodec* codec);

  std::string SegmentPath(uint32_t id) const;
  static Status CheckOptions(const DiskTierOptions& o, const std::vector<DiskTenantConfig>& t);
  bool ValidTenant(uint32_t tenant) const { return tenant < tenant_names_.size(); }

  // --- Index (disk_tier_impl.cc / disk_reclaim.cc) ---
  bool Expired(const DiskEntry& e, uint64_t now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live entry for (tenant, key), dropping it first if its TTL passed; kNoEntry if none.
  uint32_t FindLive(uint32_t tenant, const BlockKey& key, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t AddEntry(const DiskEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(uint32_t index, DropReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the entry if it still points at (segment, offset_pages).
  void DropIfAt(uint32_t tenant, const BlockKey& key, uint32_t segment, uint32_t offset_pages,
                DropReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts the tenant's own blocks (CLOCK order) until `incoming` more bytes fit its budget.
  Status MakeTenantRoom(uint32_t tenant, uint64_t incoming) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Checks a block record read from disk against its index entry and its checksum, then
  // decodes the payload into `out` (REQUIRES: out.size() >= value_bytes); `record` may be
  // overwritten (decrypted in place). On failure nothing of the record is left in `out`.
  ReadOutcome DecodeBlock(std::span<std::byte> record, uint32_t tenant, const BlockKey& key,
                          uint32_t value_bytes, std::span<std::byte> out) const;
  // Largest payload a value of `value_bytes` may be stored as.
  uint64_t MaxStoredBytes(uint64_t value_bytes) const;

  // --- Appending (disk_writer.cc) ---
  // Appends the records, opening segments as needed; sets each one's status and location.
  void AppendRecords(std::vector<PendingRecord>& records) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // After a batch: G3 is not writable while its last batch had a record the file system
  // failed (ENOSPC, EIO, EROFS...), and writable again once one is written.
  void NoteWriteOutcome(const std::vector<PendingRecord>& records)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes records[begin, end) into the open segment, which must have room for all of them.
  void WriteRound(std::vector<PendingRecord>& records, size_t begin, size_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Takes write buffers for records[from, to) (bufs[k - base] for record k) and encodes them,
  // the blocks in parallel on codec_pool_; a record that fails gets its status and no
  // buffer. Prebuilt records are left as they are.
  void PrepareRecords(std::vector<PendingRecord>& records, std::vector<AlignedBuffer>& bufs,
                      size_t base, size_t from, size_t to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // The end of the window of records[from, end) that WriteRound encodes before submitting
  // them: one queue depth without a codec; with one, as soon as the window keeps every thread
  // of codec_pool_ busy (a record each, kParallelCodecBytes of values), so that the writes of
  // one window are in flight while the next is encoded and the last window's writes, which
  // nothing overlaps, are few.
  size_t EncodeWindowEnd(const std::vector<PendingRecord>& records, size_t from,
                         size_t end) const;
  // Whether a record of `record_bytes` (and its footer entry) fits in a segment whose next
  // record would go at `end` and which already lists `entries` records.
  bool FitsAfter(uint64_t end, size_t entries, uint64_t record_bytes) const;
  // After a round: indexes what was written (puts, relocations) and counts failures.
  void IndexRound(std::vector<PendingRecord>& records, size_t begin, size_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Gives up on the open segment after a fault: no more appends, recovery scans it.
  void AbandonOpenSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Makes an open segment with room for `record_bytes`: seals the current one, reclaims a
  // segment when the directory is at capacity, creates the next one.
  Status PrepareSegment(uint64_t record_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  Status CreateSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Writes the footer and retires the open segment; after a failure the segment is abandoned
  // (recovery scans it). Returns the footer write's status.
  Status SealOpenSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Makes the open segment's acknowledged records survive power loss.
  Status SyncOpenSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Encodes a put's record into `buf` (REQUIRES: buf.size() >= r.record_bytes, the bound) and
  // sets r.record_bytes to its exact length. The codec's errors (a key manager failure).
  Status EncodeRecord(PendingRecord& r, std::span<std::byte> buf) const;
  PendingRecord Tombstone(RecordKind kind, uint32_t tenant, const BlockKey& key,
                          SessionId session = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Appends one tombstone; the status says whether it was acknowledged. `what` names the
  // deletion for the error message.
  Status WriteTombstone(PendingRecord tombstone, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // --- Space (disk_reclaim.cc) ---
  // Frees one sealed segment: compacts the emptiest when all its live blocks fit in the open
  // segment, else relocates the oldest one's hot blocks and drops the rest; deletes the file.
  // Relocations leave `reserve_bytes` of the open segment free for the write that asked.
  Status ReclaimOneSegment(uint64_t reserve_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Every valid record a segment holds (tenant = our tenant index; records of tenants no
  // longer configured are left out): from its footer, else by scanning the records. Records
  // found torn or corrupt while scanning are added to *corrupt.
  Result<std::vector<FooterEntry>> ReadSegmentEntries(uint32_t id, File* file, uint64_t* corrupt)
      ABSL_LOCKS_EXCLUDED(mu_);
  Result<std::vector<FooterEntry>> ScanSegment(File* file, uint64_t file_bytes, uint64_t* corrupt)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Our index of a tenant name; -1 when not configured.
  int TenantIndex(const std::string& name) const;
  // Removes a segment file and its table entry; drops whatever index entries still point in.
  Status DeleteSegment(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // --- Recovery (disk_recovery.cc) ---
  Status Recover() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // --- Pools ---
  std::unique_ptr<IoQueue> TakeQueue() ABSL_LOCKS_EXCLUDED(pool_mu_);
  void ReturnQueue(std::unique_ptr<IoQueue> q) ABSL_LOCKS_EXCLUDED(pool_mu_);
  AlignedBuffer TakeBuffer(size_t bytes) ABSL_LOCKS_EXCLUDED(pool_mu_);
  void ReturnBuffer(AlignedBuffer buf) ABSL_LOCKS_EXCLUDED(pool_mu_);

  const DiskTierOptions options_;
  Env* const env_;
  BlockCodec* const codec_;  // Not owned; null: values stored as they are.
  // Threads that encode a window of puts and decode the blocks of a read (compression,
  // encryption, checksums) in parallel: the codec costs far more CPU per byte than the device
  // does, so one core cannot keep up with an NVMe. Without a codec, none.
  WorkerPool codec_pool_;
  // Below this many value bytes in a batch, coding on one thread beats waking others.
  static constexpr uint64_t kParallelCodecBytes = 256 * kKiB;
  const uint64_t max_segments_;
  const size_t tenant_table_bytes_;  // Of every configured tenant name, for footer sizing.
  const std::vector<std::string> tenant_names_;
  std::unique_ptr<FileLock> lock_;

  Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  OpenSegment open_ ABSL_GUARDED_BY(write_mu_);
  bool has_open_ ABSL_GUARDED_BY(write_mu_) = false;
  uint32_t next_segment_id_ ABSL_GUARDED_BY(write_mu_) = 1;
  uint64_t next_sequence_ ABSL_GUARDED_BY(write_mu_) = 1;
  bool dir_synced_ ABSL_GUARDED_BY(write_mu_) = true;  // Removals are durable.

  BlockEventListener* events_ = nullptr;  // Set before use.
  mutable Mutex mu_ ABSL_ACQUIRED_BEFORE(pool_mu_);
  DiskIndex index_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, Segment> segments_ ABSL_GUARDED_BY(mu_);
  std::vector<TenantState> tenants_ ABSL_GUARDED_BY(mu_);
  DiskTierStats stats_ ABSL_GUARDED_BY(mu_);

  Mutex pool_mu_;
  std::vector<std::unique_ptr<IoQueue>> queues_ ABSL_GUARDED_BY(pool_mu_);
  std::vector<AlignedBuffer> buffers_ ABSL_GUARDED_BY(pool_mu_);
  size_t pooled_bytes_ ABSL_GUARDED_BY(pool_mu_) = 0;
  bool io_uring_ = false;
};

}  // namespace kvtier::disk

#endif  // KVTIER_TIER_DISK_DISK_TIER_IMPL_H_
