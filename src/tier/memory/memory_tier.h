// MemoryTier: G2, host DRAM. Blocks live in one memfd-backed arena (so a later same-host
// client can map it), allocated in whole pages by an ExtentAllocator, indexed by an EntryTable.
//
// Eviction is S3-FIFO per tenant (Yang et al., SOSP'23): new blocks enter a small
// probationary FIFO; blocks read again while there move to the main FIFO, the rest leave and
// are remembered in a ghost filter so a quick return goes straight to main; main re-queues a
// block while its access counter is positive. One-time scans therefore churn only the small
// queue and never push out the blocks that are re-read. Chains are evicted tail first: a block
// put with a resident parent is queued just ahead of it, and a block with resident children is
// never chosen while they live. Pinned blocks leave the queues until unpinned; blocks under a
// read lease are skipped.
//
// Budgets: a tenant at its budget evicts only its own blocks. When the arena itself is full,
// the victim is the tenant using the largest share of its budget (capacity when unlimited).
//
// Thread safety: all methods are thread-safe. One mutex guards metadata; block bytes are
// copied outside it.

#ifndef KVTIER_TIER_MEMORY_MEMORY_TIER_H_
#define KVTIER_TIER_MEMORY_MEMORY_TIER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/options.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/common/arena.h"
#include "absl/base/thread_annotations.h"
#include "src/common/mutex.h"
#include "src/common/extent_allocator.h"
#include "src/policy/ghost_filter.h"
#include "src/tier/memory/entry_table.h"

namespace kvtier {

class MemoryTier final : public BlockHandle::Releaser {
 public:
  struct TenantConfig {
    std::string name;
    uint64_t budget_bytes = 0;  // 0 = unlimited.
    uint64_t ttl_us = 0;        // 0 = never expires.
  };

  // REQUIRES: options sanitised by the Store (power-of-two page size, capacity >= one page).
  // With `payload_free`, no arena is created and block bytes are never touched.
  static Result<std::unique_ptr<MemoryTier>> Open(const MemoryTierOptions& options,
                                                  bool payload_free,
                                                  std::vector<TenantConfig> tenants, Env* env);
  ~MemoryTier();

  // See Store::Put. `parent` may be null. REQUIRES: valid tenant, 0 < value.size() <= 4 GiB.
  Status Put(uint32_t tenant, const BlockKey& key, std::span<const std::byte> value,
             const BlockKey* parent) ABSL_LOCKS_EXCLUDED(mu_);
  // A read lease on the block; NotFound on a miss.
  Result<BlockHandle> Acquire(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Number of leading keys resident; each found block counts as accessed.
  size_t LookupPrefix(uint32_t tenant, std::span<const BlockKey> keys) ABSL_LOCKS_EXCLUDED(mu_);
  Status Erase(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  Status Pin(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  Status Unpin(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  size_t PurgeExpired() ABSL_LOCKS_EXCLUDED(mu_);

  void ReleaseLease(uint32_t entry) override ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t PageBytes() const { return page_bytes_; }
  uint64_t CapacityBytes() const { return capacity_bytes_; }
  // The arena's memfd; -1 when payload-free.
  int arena_fd() const { return arena_ ? arena_->fd() : -1; }

  void FillStats(StoreStats* stats) const ABSL_LOCKS_EXCLUDED(mu_);
  TenantStats StatsForTenant(uint32_t tenant) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct TenantState {
    TenantConfig config;
    uint64_t budget_pages = 0;  // 0 = unlimited.
    uint64_t used_pages = 0;    // Resident, detached-but-leased and reserved-for-put pages.
    EntryList small;
    EntryList main;
    GhostFilter ghost;
    TenantStats stats;
  };
  enum class DetachReason { kEvicted, kExpired, kDeleted };

  MemoryTier(std::unique_ptr<Arena> arena, uint64_t capacity_bytes, uint32_t page_bytes,
             double small_fraction, std::vector<TenantConfig> tenants, Env* env);

  uint32_t PagesFor(uint64_t bytes) const {
    return static_cast<uint32_t>((bytes + page_bytes_ - 1) / page_bytes_);
  }
  EntryList* QueueOf(const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dequeue(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(uint32_t index, QueueId queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Expired(const Entry& e, uint64_t now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(Entry& e, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resident entry for (tenant, key), expiring it first if its TTL passed; kNil otherwise.
  uint32_t FindLive(uint32_t tenant, const BlockKey& key, uint64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Status MakeRoom(uint32_t tenant, uint32_t pages, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvictOne(uint32_t tenant, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Detach(uint32_t index, DetachReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees what a detached entry no longer needs: its pages once unleased, the entry itself
  // once it has no children either (then its parent is reconsidered).
  void Reclaim(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeExtents(uint32_t tenant, const std::vector<Extent>& extents)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::span<const std::byte>> Spans(uint32_t index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CopyIn(const std::vector<Extent>& extents, std::span<const std::byte> value) const;

  const std::unique_ptr<Arena> arena_;  // Null when payload-free.
  const uint64_t capacity_bytes_;
  const uint64_t page_bytes_;
  const double small_fraction_;
  Env* const env_;

  mutable Mutex mu_;
  ExtentAllocator allocator_ ABSL_GUARDED_BY(mu_);
  EntryTable table_ ABSL_GUARDED_BY(mu_);
  // Pieces after the first of blocks stored in more than one extent.
  std::unordered_map<uint32_t, std::vector<Extent>> more_extents_ ABSL_GUARDED_BY(mu_);
  std::vector<TenantState> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_TIER_MEMORY_MEMORY_TIER_H_
