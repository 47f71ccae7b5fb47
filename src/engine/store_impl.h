// StoreImpl: the Store of include/kvtier/store.h. It composes the G2 MemoryTier and, when
// configured, the G3 DiskTier with the Demoter between them; owns the tenant registry,
// validates every request, and expands batch and token forms.
//
// Placement: puts land in G2. G2 evictions that pass admission are demoted to G3 in the
// background. A G2 miss is looked up in G3; a G3 hit is served and, with promote_on_hit,
// copied back into G2. Deletes, TTL purges and stats cover both tiers.
//
// Data services: the G3 tier encodes its records through a BlockCodec (compression, and
// encryption under per-tenant keys from the KeyManager); deletions by session and tenant,
// shreds and retention purges are recorded in the audit log.
//
// Across nodes: with G4, every deletion is also published as a deletion notice, and every
// node applies the other nodes' notices to its own G2 and G3 (deletion_notices.h).

#ifndef KVTIER_ENGINE_STORE_IMPL_H_
#define KVTIER_ENGINE_STORE_IMPL_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kvtier/store.h"
#include "src/common/mutex.h"
#include "src/common/single_flight.h"
#include "src/engine/deletion_notices.h"
#include "src/engine/demoter.h"
#include "src/engine/shared_uploader.h"
#include "src/services/audit/audit_log.h"
#include "src/services/block_codec.h"
#include "src/services/encryption/cluster_keys.h"
#include "src/services/encryption/key_manager.h"
#include "src/tier/disk/disk_tier.h"
#include "src/tier/memory/memory_tier.h"

namespace kvtier {

// Checks and normalises options; InvalidArgument naming the offending field.
Result<Options> SanitizeOptions(const Options& options);

// The data services a store owns; each may be null (not configured).
struct StoreServices {
  std::unique_ptr<audit::AuditLog> audit;
  std::unique_ptr<encryption::KeyService> keys;
  // `keys` when they live in G4 (encrypted G4): attached to it once G4 is open.
  encryption::ClusterKeyManager* cluster_keys = nullptr;
  std::unique_ptr<BlockCodec> disk_codec;    // Used by the DiskTier.
  std::unique_ptr<BlockCodec> shared_codec;  // Used by the SharedTier.
};

// Copies a deletion removed, all tiers together (the audit log's count).
inline uint64_t BlocksRemoved(const DeletionReport& r) {
  return r.memory_blocks + r.disk_blocks + r.shared_blocks;
}

class StoreImpl final : public Store, private BlockAllocation::Owner {
 public:
  // REQUIRES: `options` came from SanitizeOptions. `disk` (G3) and `shared` (G4) may be null;
  // they were opened with services.disk_codec and services.shared_codec.
  StoreImpl(const Options& options, StoreServices services, std::unique_ptr<MemoryTier> memory,
            std::unique_ptr<DiskTier> disk, std::unique_ptr<SharedTier> shared);
  ~StoreImpl() override;

  Result<TenantId> FindTenant(std::string_view name) const override;
  Status RecordAuthFailure(std::string_view tenant, std::string_view peer,
                           std::string_view protocol, bool lockout) override;
  Status Put(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
             const PutOptions& options) override;
  std::vector<Status> PutMany(TenantId tenant, std::span<const BlockWrite> writes) override;
  Result<BlockHandle> Get(TenantId tenant, const BlockKey& key) override;
  std::vector<Result<BlockHandle>> GetMany(TenantId tenant,
                                           std::span<const BlockKey> keys) override;
  Result<size_t> Read(TenantId tenant, const BlockKey& key, std::span<std::byte> out) override;
  std::vector<Result<size_t>> ReadMany(TenantId tenant, std::span<const BlockKey> keys,
                                       std::span<const std::span<std::byte>> outs) override;
  Result<PrefixMatch> LookupPrefix(TenantId tenant, std::span<const BlockKey> keys) override;
  Result<PrefixMatch> LookupPrefix(const Namespace& ns,
                                   std::span<const uint32_t> tokens) override;
  std::vector<Result<PrefixMatch>> LookupPrefixMany(
      TenantId tenant, std::span<const std::span<const BlockKey>> prompts) override;
  Result<ResumeMatch> LookupResume(TenantId tenant, std::span<const BlockKey> keys,
                                   const ResumeQuery& query) override;
  Status PutAtomic(TenantId tenant, std::span<const BlockWrite> writes) override;
  Status Replace(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
                 const PutOptions& options) override;
  Status Delete(TenantId tenant, const BlockKey& key) override;
  std::vector<Status> DeleteMany(TenantId tenant, std::span<const BlockKey> keys) override;
  Status Pin(TenantId tenant, const BlockKey& key) override;
  std::vector<Status> PinMany(TenantId tenant, std::span<const BlockKey> keys) override;
  Status Unpin(TenantId tenant, const BlockKey& key) override;
  std::vector<Status> UnpinMany(TenantId tenant, std::span<const BlockKey> keys) override;
  size_t PurgeExpired() override;
  Result<uint64_t> Flush(TenantId tenant) override;
  Result<uint64_t> ApplyDeletionNotices() override ABSL_LOCKS_EXCLUDED(notice_mu_);
  Result<FleetView> Fleet() override ABSL_LOCKS_EXCLUDED(fleet_mu_);
  StoreStats Stats() const override;
  bool WaitMemoryProvisioned(std::chrono::milliseconds timeout) override {
    return memory_->WaitProvisioned(timeout);
  }
  Result<TenantStats> StatsForTenant(TenantId tenant) const override;
  Result<std::vector<HeldBlock>> ListHeld(TenantId tenant, uint64_t* cursor,
                                          size_t slots) const override;
  Status HintSession(TenantId tenant, SessionId session, const SessionHint& hint) override;
  Result<DeletionReport> DeleteSession(TenantId tenant, SessionId session,
                                       std::string_view actor) override;
  Result<DeletionReport> DeleteTenant(TenantId tenant, std::string_view actor) override;
  // DeleteTenant; with `shred`, its notice says the tenant's keys were destroyed.
  Result<DeletionReport> EraseTenant(TenantId tenant, std::string_view actor, bool shred);
  Result<DeletionReport> ShredTenant(TenantId tenant, std::string_view actor) override;
  std::optional<SharedArena> shared_arena(TenantId tenant) const override;
  using Store::Allocate;
  Result<BlockAllocation> Allocate(TenantId tenant, const BlockKey& key, size_t size,
                                   const std::optional<BlockKey>& parent) override;
  Status Commit(BlockAllocation allocation, const PutOptions& options) override;
  Status CommitReplace(BlockAllocation allocation, const PutOptions& options) override;

 private:
  Status CheckTenant(TenantId tenant) const;
  Status CheckValue(std::span<const std::byte> value) const;
  // CheckValue, a known role, and a parent for a state value.
  Status CheckWrite(const BlockWrite& w) const;
  // Whether each key is stored on any tier (store_resume.cc); with `access`, counts as an
  // access of those found in G2 and G3.
  std::vector<bool> PresentAnywhere(TenantId tenant, std::span<const BlockKey> keys, bool access);
  // Reads a block from G3 into a new buffer, and what G3 knows about it into *meta; NotFound
  // without G3 or on a miss.
  Result<std::vector<std::byte>> ReadFromDisk(TenantId tenant, const BlockKey& key,
                                              BlockMeta* meta);
  // For each key, what G4 holds of it (nullopt: nothing): a check of the last
  // shared.exists_cache_ms that found it, or one round of existence checks for the rest,
  // shared with concurrent callers' (single flight).
  std::vector<std::optional<SharedObjectInfo>> InfoInShared(TenantId tenant,
                                                            std::span<const BlockKey> keys,
                                                            uint64_t now_us);
  // For each key, when its block was first stored if G4 holds it or it is on its way there
  // (staged for upload); nullopt otherwise. One round of existence checks (InfoInShared).
  std::vector<std::optional<uint64_t>> CreatedInShared(TenantId tenant,
                                                       std::span<const BlockKey> keys);
  // Reads a block from G4 (a miss when older than the tenant's maximum age), one read per
  // node for concurrent requests, and promotes it into G2 (as shared.promote_on_hit says)
  // before any of them is answered, so that a request after the read finds it there.
  Result<std::vector<std::byte>> ReadFromShared(TenantId tenant, const BlockKey& key,
                                                BlockMeta* meta);
  // G3, then G4.
  Result<std::vector<std::byte>> ReadFromLowerTiers(TenantId tenant, const BlockKey& key,
                                                    BlockMeta* meta, TierLevel* from);
  // Copies a lower-tier hit into G2 when that tier promotes; failures only cost the promotion.
  void Promote(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
               const BlockMeta& meta, TierLevel from);
  const std::string& TenantName(TenantId tenant) const { return tenant_names_[tenant.value]; }
  // G4 is written on put: each put queues its block's upload.
  bool shared_on_put() const {
    return shared_ && options_.shared.write_policy == SharedTierOptions::WritePolicy::kOnPut;
  }
  // G2, G3, then G4 (G2 first: it waits for demotions in flight, so the lower tiers see their
  // copies); records `event` in the audit log with the outcome and the blocks removed.
  // Then, with G4, tells the other nodes through a deletion notice of `scope`.
  template <typename EraseMemory, typename EraseDisk, typename EraseShared>
  Result<DeletionReport> EraseEverywhere(TenantId tenant, audit::AuditEvent event,
                                         DeletionNotice notice,
                                         EraseMemory erase_memory, EraseDisk erase_disk,
                                         EraseShared erase_shared);
  // One key from G2, G3 and G4 (Delete without the notice).
  Status DeleteHere(TenantId tenant, const BlockKey& key);

  // --- Deletion notices (store_notices.cc) ---
  // Publishes `notice` (tenant, scope, keys or session filled in) to G4 for the other nodes.
  Status Announce(DeletionNotice notice);
  // Tells the event listener that G4 no longer holds `keys` of `tenant`.
  void AnnounceSharedRemovals(uint32_t tenant, const std::vector<BlockKey>& keys);
  // Removes what a notice of another node names from G2 and G3 (and G4 again), and audits
  // it. Not OK when a tier failed: the notice is then applied again later.
  Status ApplyNotice(const DeletionNotice& notice);
  // At open, before the store serves: resumes reading notices where this node stopped (kept
  // beside G3), and empties G2 and G3 when it cannot know what it missed (no record with a
  // non-empty G3, or no read for longer than G4 keeps notices). Then one round, unless
  // notices are read only on request.
  void CatchUpOnNotices() ABSL_LOCKS_EXCLUDED(notice_mu_);
  // Empties G2 and G3 of every tenant (logged with `why`).
  void DropLocalCopies(const std::string& why);
  // Writes where this node stands in reading notices beside G3 (with G3).
  void SaveNoticeState(uint64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(notice_mu_);
  // Whether a block first stored at `created_us` is past the tenant's maximum age at `now_us`.
  bool PastMaxAge(TenantId tenant, uint64_t created_us, uint64_t now_us) const;
  void AbortAllocation(uint64_t id) override { memory_->AbortReserved(id); }
  // Records an act in the audit log, when there is one; a failed append is logged, not fatal.
  void Audit(const audit::AuditEvent& event);
  // Fleet reports (fleet_reports.h): writes this node's and deletes its previous one; reads
  // the others' while Fleet() is being called. Run every shared.report_ms.
  void ReportToFleet() ABSL_LOCKS_EXCLUDED(fleet_mu_);
  // This node's G4 counters now.
  NodeReport OwnReport(uint64_t now_us) const;
  // Runs `work` every `interval` on a thread of its own until the store closes.
  void StartLoop(std::chrono::milliseconds interval, std::function<void()> work);

  const Options options_;
  // Services first: destroyed after the tiers that use them.
  const StoreServices services_;
  const std::unique_ptr<MemoryTier> memory_;
  const std::unique_ptr<DiskTier> disk_;
  const std::unique_ptr<SharedTier> shared_;
  const std::vector<std::string> tenant_names_;
  // Declared after the tiers so they stop (and drain) before the tiers are destroyed; the
  // demoter before the uploader it hands blocks to.
  std::unique_ptr<SharedUploader> uploader_;
  std::unique_ptr<Demoter> demoter_;
  std::atomic<uint64_t> promoted_{0};
  // G4 reads and existence checks in flight, by tenant, key and deletion epoch: concurrent
  // requests for a block share one. The epoch moves when a deletion has finished, so that a
  // request that starts after a deletion returned never takes the answer of a read that
  // started before it.
  struct SharedRead {
    Result<std::vector<std::byte>> block = Status::NotFound("block not stored");
    BlockMeta meta;
  };
  struct TenantKey {
    uint32_t tenant;
    BlockKey key;
    uint64_t epoch;
    bool operator==(const TenantKey&) const = default;
  };
  struct TenantKeyHasher {
    size_t operator()(const TenantKey& k) const {
      return BlockKeyHasher()(k.key) ^ k.tenant ^ (k.epoch << 32);
    }
  };
  TenantKey InFlightKey(TenantId tenant, const BlockKey& key) const {
    return {tenant.value, key, deletion_epoch_.load(std::memory_order_acquire)};
  }
  void DeletionDone() { deletion_epoch_.fetch_add(1, std::memory_order_acq_rel); }
  std::atomic<uint64_t> deletion_epoch_{0};
  SingleFlight<TenantKey, SharedRead, TenantKeyHasher> shared_reads_;
  SingleFlight<TenantKey, std::optional<SharedObjectInfo>, TenantKeyHasher> shared_checks_;
  std::atomic<uint64_t> shared_reads_coalesced_{0};
  std::atomic<uint64_t> shared_checks_coalesced_{0};
  // Existence checks that found a block, reused for shared.exists_cache_ms, by in-flight key
  // (a deletion moves the epoch, so they are not found after it). Bounded: past
  // kMaxKnownInShared entries, the expired go, then all.
  struct KnownInShared {
    SharedObjectInfo info;
    uint64_t until_us;
  };
  static constexpr size_t kMaxKnownInShared = 1 << 16;
  std::optional<SharedObjectInfo> KnownInSharedNow(const TenantKey& key, uint64_t now_us)
      ABSL_LOCKS_EXCLUDED(known_mu_);
  void RememberInShared(const TenantKey& key, const SharedObjectInfo& info, uint64_t now_us)
      ABSL_LOCKS_EXCLUDED(known_mu_);
  void ForgetInShared(const TenantKey& key) ABSL_LOCKS_EXCLUDED(known_mu_);
  Mutex known_mu_;
  std::unordered_map<TenantKey, KnownInShared, TenantKeyHasher> known_in_shared_
      ABSL_GUARDED_BY(known_mu_);
  std::atomic<uint64_t> shared_checks_cached_{0};
  std::unordered_map<std::string, uint32_t> tenant_ids_;  // Immutable after construction.

  // This node's id in G4 (names its deletion notices).
  std::string node_id_;
  std::atomic<uint64_t> notice_sequence_{0};
  std::atomic<uint64_t> notices_published_{0};
  std::atomic<uint64_t> notices_applied_{0};
  std::atomic<uint64_t> notices_pending_{0};  // notice_retries_.size(), for Stats().
  std::atomic<uint64_t> notice_gap_resets_{0};
  std::atomic<uint64_t> other_nodes_seen_{0};  // other_nodes_.size(), for Stats().
  // Fleet reports: the name of this node's last one in G4, the others' as last read (and
  // when), whether writing failed last time (logged when it starts and stops failing), and
  // until when (this node's clock) someone is asking for them.
  Mutex fleet_mu_;
  std::string fleet_report_name_ ABSL_GUARDED_BY(fleet_mu_);
  std::vector<NodeReport> fleet_others_ ABSL_GUARDED_BY(fleet_mu_);
  uint64_t fleet_read_us_ ABSL_GUARDED_BY(fleet_mu_) = 0;
  bool fleet_report_failing_ ABSL_GUARDED_BY(fleet_mu_) = false;
  std::atomic<uint64_t> fleet_wanted_until_us_{0};
  Mutex notice_mu_;
  // The other nodes whose deletion notices this node has read.
  std::unordered_set<std::string> other_nodes_ ABSL_GUARDED_BY(notice_mu_);
  std::unique_ptr<NoticeFollower> follower_ ABSL_GUARDED_BY(notice_mu_);
  // Notices whose apply failed (a G3 or G4 error), applied again at each round until they
  // succeed; oldest first, at most kMaxNoticeRetries.
  std::deque<DeletionNotice> notice_retries_ ABSL_GUARDED_BY(notice_mu_);
  // This node's clock at its last successful read of the notices, and at the last save of
  // that state beside G3.
  uint64_t last_notice_read_us_ ABSL_GUARDED_BY(notice_mu_) = 0;
  uint64_t notice_state_saved_us_ ABSL_GUARDED_BY(notice_mu_) = 0;

  Mutex loop_mu_;
  CondVar loop_cv_;
  bool stopping_ ABSL_GUARDED_BY(loop_mu_) = false;
  std::vector<std::thread> loops_;  // Last: started once everything they use exists.
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_STORE_IMPL_H_
