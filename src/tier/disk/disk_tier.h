// DiskTier: G3, the node's local NVMe. Log-structured segment files under one directory,
// 4 KiB-aligned records written and read with O_DIRECT (io_uring with several I/Os in flight,
// or pread/pwrite where io_uring is unavailable), every record checksummed. The index lives in
// memory and is rebuilt from the segments on open; torn or corrupt records are dropped and
// counted. The on-disk format is specified in docs/disk_format.md.
//
// Data services (compression, encryption) come from an optional BlockCodec decorator
// (src/services/block_codec.h): a put encodes each block straight into its record buffer, a
// read decodes from the record's buffer straight into the caller's output. Without one, values
// are stored as they are.
//
// Thread safety: all methods are thread-safe.

#ifndef KVTIER_TIER_DISK_DISK_TIER_H_
#define KVTIER_TIER_DISK_DISK_TIER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/events.h"
#include "kvtier/options.h"
#include "kvtier/status.h"
#include "kvtier/store.h"

namespace kvtier {

class BlockCodec;

// DiskTierOptions is public: include/kvtier/options.h.

struct DiskTenantConfig {
  std::string name;           // Stored in every record: tenants are matched by name on reopen.
  uint64_t budget_bytes = 0;  // 0 = no per-tenant limit. Over budget, a tenant's own blocks go.
  uint64_t ttl_us = 0;        // Since last access; 0 = never expires.
  // Since the block was first stored (DiskTier::PutRequest::created_us), whatever its
  // accesses; 0 = no limit. An older block is a miss and is removed, also after a restart.
  uint64_t max_age_us = 0;
};

// What the index knows about a block, without reading it.
struct DiskBlockInfo {
  uint64_t value_bytes = 0;          // Length of the block as the user sees it.
  SessionId session = 0;             // 0 = none.
  uint64_t created_us = 0;           // When it was first stored.
  std::optional<KvDtype> dtype;      // nullopt = opaque bytes.
};

struct DiskTierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;         // Bytes of segment files on disk.
  uint64_t live_bytes = 0;         // Bytes of records still indexed.
  uint64_t blocks = 0;
  uint64_t puts = 0;
  uint64_t put_bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t read_bytes = 0;
  uint64_t corrupt_records = 0;    // Found at open or on read; dropped, never served.
  uint64_t unreadable_records = 0; // Intact but undecodable: tenant key shredded or unknown.
  uint64_t evictions = 0;
  uint64_t expirations = 0;
  uint64_t relocated_blocks = 0;   // Live blocks moved by segment reclamation.
  uint64_t reclaimed_segments = 0;
  uint64_t recovered_blocks = 0;   // Indexed by the last open.
  uint64_t read_errors = 0;        // Reads the device failed (EIO): misses, the block dropped.
  uint64_t write_errors = 0;       // Records not written because of an I/O error.
  uint64_t index_memory_bytes = 0; // Heap bytes of the in-memory index.
  uint64_t segments = 0;           // Segment files in the directory.
  uint64_t logical_bytes = 0;      // Sum of the live blocks' lengths as users see them.
  uint64_t stored_bytes = 0;       // Sum of their payloads as stored (after compression).
  bool io_uring = false;           // Whether I/O goes through io_uring.
  // False while writes fail (the last batch had a record the file system failed: full, I/O
  // error, read-only); reads are still served. The next batch that writes restores it.
  bool writable = true;
  std::string write_fault;          // That failure; "" while writable.
  uint64_t write_fault_since_us = 0;
};

class DiskTier {
 public:
  // InvalidArgument for bad options; FailedPrecondition when another process holds the
  // directory or it was written by another format version; IOError-class statuses (Internal /
  // Unavailable) for I/O failures. `codec` (not owned, must outlive the tier) encodes and
  // decodes payloads; nullptr stores values as they are (and records written with a codec are
  // then unreadable: counted misses).
  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options,
                                                std::vector<DiskTenantConfig> tenants, Env* env,
                                                BlockCodec* codec = nullptr);
  virtual ~DiskTier() = default;

  struct PutRequest {
    BlockKey key;
    std::span<const std::byte> value;  // Read during the call only.
    SessionId session = 0;             // 0 = none; EraseSession removes a session's blocks.
    // When the block was first stored (max_age_us counts from it); 0 = now. A block promoted
    // and demoted again passes its original time so that its age is kept.
    uint64_t created_us = 0;
    std::optional<KvDtype> dtype = std::nullopt;  // Element type for compression; nullopt = bytes.
  };
  // Writes the blocks (batched, several in flight) and returns when each is acknowledged per
  // options.durability. One status per request: OK (also when the key was already present),
  // InvalidArgument for an unknown tenant, an empty block or one larger than a segment holds,
  // ResourceExhausted when nothing evictable frees room (a tenant's budget is smaller than the
  // block, or the file system is full), or an I/O error. A failed put leaves nothing behind
  // that could be served. Budgets: a tenant over its budget_bytes evicts its own blocks only.
  // Space: when the directory reaches capacity the emptiest segment is reclaimed; its blocks
  // read since they were written move along, the others are dropped (docs/disk_format.md).
  virtual std::vector<Status> PutMany(uint32_t tenant, std::span<const PutRequest> requests) = 0;

  // Size of the block; NotFound when absent or expired.
  virtual Result<size_t> BlockSize(uint32_t tenant, const BlockKey& key) = 0;
  // Size, session, creation time and dtype of the block; NotFound when absent or expired.
  virtual Result<DiskBlockInfo> Describe(uint32_t tenant, const BlockKey& key) = 0;

  // Reads blocks into `outs` (each at least BlockSize bytes) and returns their sizes. A block
  // whose checksum, authentication tag or compressed form fails is removed, counted in
  // corrupt_records and reported as NotFound; one that cannot be decrypted because its
  // tenant's key was shredded (or its key version is unknown) likewise, counted in
  // unreadable_records. Other codec errors (out of memory, a keystore I/O error) fail the read
  // with their status and keep the block. A failing record never leaves plaintext in `outs`.
  virtual std::vector<Result<size_t>> ReadMany(uint32_t tenant, std::span<const BlockKey> keys,
                                               std::span<const std::span<std::byte>> outs) = 0;

  // Number of leading keys present (not expired). Counts as an access of each.
  virtual size_t LookupPrefix(uint32_t tenant, std::span<const BlockKey> keys) = 0;

  // Deletes the block. The deletion is recorded on disk (a tombstone, acknowledged per
  // options.durability), so no older copy comes back after a restart. NotFound when the tier
  // held no such block (the tombstone is written anyway: an evicted copy may remain on disk);
  // an I/O error when the tombstone could not be written (the block is no longer served by this
  // process, but may return after a restart).
  virtual Status Erase(uint32_t tenant, const BlockKey& key) = 0;
  // Removes every block of the tenant, recorded on disk like Erase; returns how many.
  virtual Result<uint64_t> EraseTenant(uint32_t tenant) = 0;
  // Removes every block of the tenant put with `session`, recorded on disk like Erase (a
  // session tombstone: no older record of that tenant and session comes back after a
  // restart); returns how many. InvalidArgument for session 0 or an unknown tenant.
  virtual Result<uint64_t> EraseSession(uint32_t tenant, SessionId session) = 0;
  virtual size_t PurgeExpired() = 0;
  // The keys of the tenant's blocks in index slots [*cursor, *cursor + slots), and *cursor
  // moved past them; *cursor is kEndOfKeys when no slot is left. A listing spread over calls
  // sees blocks that are stored or removed meanwhile, or not.
  static constexpr uint64_t kEndOfKeys = UINT64_MAX;
  virtual std::vector<BlockKey> ListKeys(uint32_t tenant, uint64_t* cursor, size_t slots) = 0;

  // Makes every acknowledged write durable against power loss.
  virtual Status Sync() = 0;

  virtual DiskTierStats Stats() const = 0;

  // Tells `listener` (not owned; nullptr = nobody) of every block written and dropped from now
  // on (not what Open recovered). Call once, before use.
  virtual void SetEventListener(BlockEventListener* listener) = 0;
};

}  // namespace kvtier

#endif  // KVTIER_TIER_DISK_DISK_TIER_H_
