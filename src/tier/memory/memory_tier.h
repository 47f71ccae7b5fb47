// MemoryTier: G2, host DRAM. Blocks live in a memfd-backed arena with one region per tenant
// (so a same-host client of a tenant can map that tenant's blocks and no other's), allocated
// in whole pages by one ExtentAllocator per region, indexed by an EntryTable. A region spans
// the whole capacity but is sparse, and the capacity is shared across tenants exactly as one
// arena would be: a page takes memory when first written, keeps it while free (the tenant's
// next blocks reuse it without page faults or zeroing), and free pages of any tenant give
// their memory back whenever the regions together would hold more than the capacity.
//
// Eviction, per tenant, is a segmented LRU whose split adapts with ghost lists and whose
// order knows conversation depth (measured against LRU, ARC and Belady's OPT on real traces
// in docs/store.md). A new block enters the probation queue; a block accessed again there
// moves to the reused queue; the reused queue holds a share of the tenant's bytes, and past it
// its victims go back to probation, at its most recent end. Victims come from probation (from
// the reused queue only when probation has nothing evictable) and are remembered in one of two
// ghost filters, with their depth: blocks that had been reused, and blocks that never were. A
// put of a key in either ghost goes straight to the reused queue and moves the share,
// ARC-style: a ghost of a never-reused block says probation was too short (the share shrinks),
// a ghost of a reused one says the reused queue was (it grows), each step weighted by the
// other ghost's size over this one's. One-time scans churn probation and cannot push out
// reused blocks.
// Each queue is one LRU lane per depth class: how many times the block's conversation had
// come back (its chain extended after a read) when it was put or last matched. A ReturnModel
// learns, per tenant, the chance that a block of each class idle for so long is used again. A
// queue's victim is its least recently used lane head, unless another lane's head is less
// likely to return by three standard errors of the estimates.
// Chains are evicted tail first: a block put with a resident parent is queued just ahead of
// it, a prefix lookup makes its blocks recent deepest first, and a block with resident
// children is never chosen while they live. Pinned blocks leave the queues until unpinned;
// blocks under a read lease are skipped.
//
// Budgets: a tenant at its budget evicts only its own blocks. When the arena itself is full,
// the victim is the tenant using the largest share of its budget (capacity when unlimited).
//
// Demotion (when enabled): an evicted block that passes G3 admission is not freed at once. It
// stays indexed and readable, flagged as demoting, until the demoter has written it to G3 and
// calls FinishDemotion; a put that needs its pages waits for that (backpressure), never for
// anything else.
//
// Warm restart (MemoryTierOptions::arena_file, memory_snapshot.cc): the arena is named files,
// one per tenant, that outlive the process. Destruction writes the index beside it: each resident block's
// key, tenant name, extents, queue position, chain, pins and metadata, with an XXH3 checksum
// of its bytes. Open reads the index, deletes it before anything changes the arena (so a
// crash later can never pair a stale index with newer bytes), and adopts in place, in their
// queue order, the blocks whose checksums still match, of tenants still configured, within
// the capacity; a tenant over a lowered budget then evicts its oldest.
//
// Thread safety: all methods are thread-safe. One mutex guards metadata; block bytes are
// copied outside it.

#ifndef KVTIER_TIER_MEMORY_MEMORY_TIER_H_
#define KVTIER_TIER_MEMORY_MEMORY_TIER_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/events.h"
#include "kvtier/options.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/common/arena.h"
#include "src/common/extent_allocator.h"
#include "src/common/mutex.h"
#include "src/common/page_runs.h"
#include "src/policy/frequency_sketch.h"
#include "src/policy/ghost_filter.h"
#include "src/policy/return_model.h"
#include "src/policy/shadow_lru.h"
#include "src/tier/memory/entry_table.h"

namespace kvtier {

// What the tiers keep about a block besides its bytes.
struct BlockMeta {
  SessionId session = 0;
  uint64_t created_us = 0;  // When first stored on any tier; 0 = now.
  std::optional<KvDtype> dtype = std::nullopt;
  // Read from G4, so G4 holds it: evicted, it need not be written back there.
  bool in_shared = false;
  // Told to the event listener when the block is published; not kept.
  std::optional<EngineHash> engine_hash = std::nullopt;
  // Kept by G2 only (its eviction order): lower tiers bring a block back as kKv.
  BlockRole role = BlockRole::kKv;
};

class MemoryTier final : public BlockHandle::Releaser {
 public:
  struct TenantConfig {
    std::string name;
    uint64_t budget_bytes = 0;  // 0 = unlimited.
    uint32_t ttl_s = 0;         // 0 = never expires.
    uint32_t max_age_s = 0;     // 0 = no maximum age.
  };


  // An evicted block on its way to G3. `spans` stay valid until FinishDemotion(entry).
  struct Demotion {
    uint32_t entry;
    uint32_t tenant;
    BlockKey key;
    BlockMeta meta;
    std::vector<std::span<const std::byte>> spans;
  };

  struct AdmissionStats {
    uint64_t admitted = 0;
    uint64_t skipped_short_prefix = 0;
    uint64_t skipped_infrequent = 0;
  };

  // REQUIRES: options sanitised by the Store (power-of-two page size, capacity >= one page).
  // With `payload_free`, no arena is created and block bytes are never touched.
  static Result<std::unique_ptr<MemoryTier>> Open(const MemoryTierOptions& options,
                                                  bool payload_free,
                                                  std::vector<TenantConfig> tenants, Env* env);
  ~MemoryTier();

  // See Store::Put. `parent` may be null. REQUIRES: valid tenant, 0 < value.size() <= 4 GiB.
  Status Put(uint32_t tenant, const BlockKey& key, std::span<const std::byte> value,
             const BlockKey* parent, const BlockMeta& meta = {}) ABSL_LOCKS_EXCLUDED(mu_);
  // The shared-memory fast path's two-step put: Reserve takes room for `size` bytes (evicting
  // as Put does) and returns an id and the spans to fill; AlreadyExists when the key is
  // resident. `parent` (may be null) is kept while making room, as Put keeps it.
  // CommitReserved publishes the bytes as Put would (OK without storing when the key appeared
  // meanwhile); AbortReserved gives the room back. REQUIRES: a payload arena.
  Result<uint64_t> Reserve(uint32_t tenant, const BlockKey& key, size_t size,
                           const BlockKey* parent, std::vector<std::span<std::byte>>* spans)
      ABSL_LOCKS_EXCLUDED(mu_);
  Status CommitReserved(uint64_t id, const BlockKey* parent, const BlockMeta& meta)
      ABSL_LOCKS_EXCLUDED(mu_);
  void AbortReserved(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Stores every write or none (memory_tier_batch.cc): room for all of them is taken first,
  // their bytes copied, then all are published at once, so a reader sees all or none. Keys
  // already resident count as stored (and are held while the others are placed). Put's
  // errors otherwise, with nothing stored. REQUIRES: valid tenant, each value 1 byte to 4 GiB.
  Status PutAll(uint32_t tenant, std::span<const BlockWrite> writes) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether each key is resident. With `access`, the found ones count as accessed, the last
  // first (as a prefix lookup makes the head of a prefix the most recent).
  std::vector<bool> Present(uint32_t tenant, std::span<const BlockKey> keys, bool access)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Null when payload-free. Region i holds the blocks of tenant i.
  const Arena* arena() const { return arena_.get(); }

  // A read lease on the block; NotFound on a miss.
  Result<BlockHandle> Acquire(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // A read lease for copying the block to another tier, with what the tier keeps about it;
  // unlike Acquire it is not an access (no hit, no recency). Such a lease ends on its own (the
  // copy is the Store's own work, not a client's), so a put that finds nothing else to evict
  // waits for it, as for a demotion.
  Result<BlockHandle> LeaseForCopy(uint32_t tenant, const BlockKey& key, BlockMeta* meta)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Number of leading keys resident; each found block counts as accessed. `whole`: the keys
  // are a whole prompt, not its rest after blocks found in G3 (only whole prompts are
  // compared with LRU: CheckAgainstLru).
  size_t LookupPrefix(uint32_t tenant, std::span<const BlockKey> keys, bool whole = true)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for a demotion of the same block in flight to finish first.
  Status Erase(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes every block of the tenant put with `session` (REQUIRES: session != 0), pinned ones
  // included; waits for their demotions in flight first. Returns how many.
  uint64_t EraseSession(uint32_t tenant, SessionId session) ABSL_LOCKS_EXCLUDED(mu_);
  // Store::HintSession for G2, where hints act: retained and high-priority sessions' blocks are
  // chosen only when nothing else of the tenant is evictable, finished sessions' blocks first,
  // then low-priority ones'.
  Status HintSession(uint32_t tenant, SessionId session, const Store::SessionHint& hint)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Removes every block of the tenant, likewise.
  uint64_t EraseTenant(uint32_t tenant) ABSL_LOCKS_EXCLUDED(mu_);
  Status Pin(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  Status Unpin(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  size_t PurgeExpired() ABSL_LOCKS_EXCLUDED(mu_);
  // Keys of the tenant's resident blocks, in no particular order.
  std::vector<BlockKey> ResidentKeys(uint32_t tenant) const ABSL_LOCKS_EXCLUDED(mu_);
  // The tenant's resident blocks in entry slots [*cursor, *cursor + slots), with their
  // parents and depths, and *cursor moved past them; *cursor is kEndOfKeys when no slot is
  // left. A listing spread over calls sees blocks stored or removed meanwhile, or not.
  static constexpr uint64_t kEndOfKeys = UINT64_MAX;
  struct Listed {
    BlockKey key;
    std::optional<BlockKey> parent;
    uint16_t depth;
  };
  std::vector<Listed> ListResident(uint32_t tenant, uint64_t* cursor, size_t slots) const
      ABSL_LOCKS_EXCLUDED(mu_);

  void ReleaseLease(uint32_t entry) override ABSL_LOCKS_EXCLUDED(mu_);

  // Tells `listener` (not owned; nullptr = nobody) of every block published and detached.
  // Call once, before use.
  void set_event_listener(BlockEventListener* listener) { events_ = listener; }

  // From now on, evictions that pass `admission` become demotions. Call once, before use.
  // A put that has to demote to find room also demotes ahead of its need, until demotions in
  // flight or free pages reach kDemotionHeadroomBytes (at most an eighth of the tier): freeing
  // only what each put needs would hand G3 one block at a time, a write at queue depth 1.
  void EnableDemotion(const AdmissionOptions& admission) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr uint64_t kDemotionHeadroomBytes = 64 * kMiB;
  // Instead (payload-free simulation): every eviction is reported to `observer` (not owned)
  // with the decision of `admission`, and the block leaves at once. Call once, before use.
  void ObserveEvictions(const AdmissionOptions& admission, EvictionObserver* observer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until demotions are queued, then takes up to `max` of them. Empty once
  // StopDemotion was called and the queue is drained.
  std::vector<Demotion> TakeDemotions(size_t max) ABSL_LOCKS_EXCLUDED(mu_);
  // The demoter is done with `entry` (written to G3 or not): the block leaves G2 unless it
  // was pinned meanwhile.
  void FinishDemotion(uint32_t entry) ABSL_LOCKS_EXCLUDED(mu_);
  // Evictions free blocks directly again; TakeDemotions returns what is left, then empty.
  void StopDemotion() ABSL_LOCKS_EXCLUDED(mu_);
  AdmissionStats admission_stats() const ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t PageBytes() const { return page_bytes_; }
  uint64_t CapacityBytes() const { return capacity_bytes_; }

  void FillStats(StoreStats* stats) const ABSL_LOCKS_EXCLUDED(mu_);
  // Store::WaitMemoryProvisioned.
  bool WaitProvisioned(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);
  TenantStats StatsForTenant(uint32_t tenant) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Standard errors by which the ReturnModel must find a block less likely to return than
  // LRU's victim for eviction to take it instead (docs/store.md measures 1, 2 and 3).
  static constexpr double kSignificance = 3;
  // The window of the chances compared, in multiples of LRU's choice's idle time
  // (ChooseVictim; docs/store.md, "The window, measured", measures 0.5 to 16).
  static constexpr uint32_t kWindowEvictionAges = 2;
  // One LRU list per class (LaneOf).
  using Lanes = std::array<EntryList, ReturnModel::kClasses>;
  // Whether eviction follows the policy (queues, lanes, the ReturnModel) or plain LRU (the
  // least recently used evictable block, tail first). A ShadowLru measures, on the tenant's
  // prefix lookups, what LRU would have served against what G2 served. Eviction follows LRU
  // once LRU is ahead by kLruCheckSignificance standard errors of the per-lookup differences,
  // for a trial of kLruTrialFills sampled cache-fulls, then the policy again. A trial is twice
  // the last one (up to kMaxLruTrials times the first) unless the policy was clearly ahead of
  // LRU for a window since. So the policy cannot lose to LRU for long on traffic where its
  // signals mislead (docs/store.md, "The LRU check").
  struct LruCheck {
    ShadowLru shadow;
    bool follows_lru = false;
    double ahead = 0;     // Sum over lookups of LRU's served minus G2's, decayed.
    double squares = 0;   // Sum of the squares of the same differences, decayed.
    double sampled = 0;   // Sampled references since the current mode began.
    double trial = 0;     // The current or next LRU trial's length, in cache-fulls.
  };
  // Lookups differ by whole chains, so the differences are heavy-tailed and a test at 1.5
  // standard errors is what catches a policy that loses within a few cache-fulls; one that
  // does not lose never switches on the Mooncake traces, which the first false trials reach
  // at 0.75 (docs/store.md, "The LRU check").
  static constexpr double kLruCheckSignificance = 1.5;
  static constexpr double kLruTrialFills = 8;
  static constexpr double kMaxLruTrials = 64;
  // The evidence halves every this many sampled cache-fulls, so the check follows traffic
  // that changes.
  static constexpr double kLruCheckWindowFills = 16;
  // How far down the recency list LRU's victim is looked for (past pinned, leased and parent
  // blocks); none within it: the policy's victim.
  static constexpr int kMaxRecencySkips = 64;
  struct TenantState {
    TenantConfig config;
    uint64_t budget_pages = 0;    // 0 = unlimited.
    uint64_t used_pages = 0;      // Resident, leased, demoting and reserved-for-put pages.
    uint64_t demoting_pages = 0;  // Of used_pages, those freed when demotions finish.
    Lanes probation;
    Lanes reused;
    ReturnModel returns;       // Which blocks come back, by depth class and idle time.
    GhostFilter ghost_once;    // Evicted without having been reused.
    GhostFilter ghost_reused;  // Evicted after having been in the reused queue.
    double reused_share = 0;   // Target share of the queued pages held by `reused`.
    EntryList recency;         // Every resident block, least recently used first.
    // Sessions a hint protects, as (ProtectedUntil, session slot): eviction takes from the one
    // due back last. Their blocks wait in their sessions' queues, outside the lanes.
    std::set<std::pair<uint32_t, uint32_t>> protected_sessions;
    std::set<std::pair<uint32_t, uint32_t>> protection_ends;  // (ProtectionEnd, session slot).
    uint32_t session_queued = 0;  // Blocks in those queues.
    LruCheck lru_check;        // Whose victim eviction takes: the policy's or LRU's.
    TenantStats stats;
  };
  enum class DetachReason { kEvicted, kExpired, kDeleted };
  // Sessions of resident blocks, interned so that an entry stores a 32-bit slot.
  struct SessionSlot {
    uint32_t tenant = 0;
    SessionId id = 0;
    uint32_t refs = 0;  // Resident entries naming this slot; 0 = free.
    uint32_t retain_until_s = 0;  // SessionHint::retain_seconds: due back by then.
    uint32_t retain_seconds = 0;  // The retention's length: it ends as long again after that.
    bool finished = false;  // SessionHint::finished, until the session puts again.
    // When a retained session last came back; 0 = not since, or a priority hint since.
    uint32_t came_back_s = 0;
    Store::SessionPriority priority = Store::SessionPriority::kNormal;
    // While a hint protects the session: its keys in the tenant's protected_sessions and
    // protection_ends, and its queued blocks, in eviction order as in a lane (a chain's tail
    // first). 0 = not protected.
    uint32_t protected_until = 0;
    uint32_t protected_end = 0;
    EntryList queue;
  };
  // When a session a hint protects is due back, its blocks' order among protected ones (the one
  // due back last goes first): its retention's time, or never (UINT32_MAX) for a high-priority
  // session. A retained session past its time is overdue: due back any moment, so it goes last,
  // until its retention ends, as long again after its time. 0 = not protected (a finished
  // session is not).
  static uint32_t ProtectedUntil(const SessionSlot& slot, uint32_t now);
  // When that protection ends (UINT32_MAX: with a new hint only); 0 = not protected.
  static uint32_t ProtectionEnd(const SessionSlot& slot, uint32_t now);
  uint32_t ProtectedUntil(const Entry& e, uint32_t now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ProtectedUntil(session_slots_[e.session], now);
  }
  // Files the session in its tenant's protected_sessions under ProtectedUntil, after a hint or
  // when a retention ends. A session no longer protected gives its queued blocks back to their
  // lanes: those read or put since it last came back to the recent ends, and the rest to the
  // cold ends of the probation lanes.
  void UpdateProtection(uint32_t session_slot, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A put into the session: a finished session goes on, and a retained one has come back, so
  // its retention ends a second later (its own blocks are not its victims meanwhile).
  void SessionCameBack(uint32_t session_slot, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UpdateProtection for each of the tenant's sessions whose retention has ended.
  void EndPassedProtections(TenantState& t, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The protected block to evict when nothing else is evictable: the first evictable block of
  // the queue of the session due back last (Belady's choice, on the senders' word); kNil when
  // no protected block is evictable.
  uint32_t ProtectedVictim(const TenantState& t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lanes' queue of a block: reused once it has been read again (or a ghost knew it).
  static QueueId LaneQueueOf(const Entry& e) {
    return (e.flags & kEntryWasReused) ? QueueId::kReused : QueueId::kProbation;
  }
  // The queue a block enqueued for `queue` goes to: its session's while a hint protects it
  // (kSession for a session no longer protected: LaneQueueOf).
  QueueId QueueFor(const Entry& e, QueueId queue) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves each resident block of `session_slot` to the cold end of its lane; `mark` is or-ed
  // into their policy bits.
  void QueueSessionFirst(uint32_t tenant, uint32_t session_slot, uint8_t mark)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // `named_files`: the arena is files of OpenFromFile.
  MemoryTier(std::unique_ptr<Arena> arena, bool named_files, const MemoryTierOptions& options,
             std::vector<TenantConfig> tenants, Env* env);

  uint32_t PagesFor(uint64_t bytes) const {
    return static_cast<uint32_t>((bytes + page_bytes_ - 1) / page_bytes_);
  }
  uint32_t NowSeconds() const { return static_cast<uint32_t>(env_->NowMicros() / 1000000); }
  static uint64_t SketchHash(uint32_t tenant, const BlockKey& key) {
    return key.Hash64() ^ (uint64_t{tenant} * 0xc2b2ae3d27d4eb4fULL);
  }
  EntryList* QueueOf(const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dequeue(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends to the back of `queue` (a low-priority session's block: QueueFirstIfLow).
  void Enqueue(uint32_t index, QueueId queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a newly put block: just ahead of its parent when they share the queue (a
  // low-priority session's block: QueueFirstIfLow).
  void EnqueueNew(uint32_t index, QueueId queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a block of a low-priority session to the cold end of probation (QueueFirst).
  void QueueFirstIfLow(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Expired(const Entry& e, uint32_t now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An access: recency, TTL, the admission sketch; promotes a block on probation.
  void Touch(uint32_t index, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the reused queue's victims to probation while it is over its share.
  void RebalanceQueues(uint32_t tenant, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The queue for a new block of `tenant`: reused when a ghost remembers the key (which adapts
  // the share; *remembered_turn is then the depth it had), probation otherwise.
  QueueId QueueForNewBlock(uint32_t tenant, const BlockKey& key,
                           std::optional<uint8_t>* remembered_turn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resident entry for (tenant, key), expiring it first if its TTL passed; kNil otherwise.
  uint32_t FindLive(uint32_t tenant, const BlockKey& key, uint32_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LinkIntoChain(uint32_t index, const BlockKey* parent, uint32_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new block's depth class: its parent's, plus one when the parent had been read since it
  // was put (the conversation came back and goes on); `remembered_turn` is what a ghost
  // remembers of the key (an evicted block put again). A new turn raises the chain behind it,
  // up to a branch point, to the same depth, moving its blocks (all just matched) to that lane.
  void SetTurn(uint32_t index, std::optional<uint8_t> remembered_turn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the tenant's ReturnModel of an access of the block.
  void NoteAccess(const Entry& e, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The victim among the lanes' first blocks (with `evictable`, each lane's first evictable
  // block, or an expired block at once): the least recently used, unless another is less likely
  // to return by kSignificance standard errors within kWindowEvictionAges times the least
  // recently used one's idle time (how long the cache now keeps a block). kNil when the lanes
  // hold none.
  // *decided (may be null) tells a victim taken on a hint, its expiry or its uselessness, not
  // by the policy's order: LRU takes it too. With `evictable`, a block of a protected session
  // (queued before its hint) met on the way moves to its session's queue.
  uint32_t ChooseVictim(const Lanes& lanes, uint32_t now, bool evictable,
                        bool* decided = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LRU's candidate: the least recently used queued block with no reader, no child and no
  // retention (a hint that its session comes back soon); kNil when none is within
  // kMaxRecencySkips.
  uint32_t LruCandidate(const TenantState& t, uint32_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The LRU check on a prefix lookup of `keys` of which G2 served `found`.
  void CheckAgainstLru(uint32_t tenant, std::span<const BlockKey> keys, size_t found)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The LRU check that decides the tenant's victims: its own when tenants have budgets (each
  // evicts its own blocks), the tier's when they share G2 as one cache (no budgets), which one
  // LRU over all their blocks is measured against.
  LruCheck& LruCheckOf(TenantState& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shared_cache_ ? lru_check_ : t.lru_check;
  }
  // Decides shared_cache_ and which checks hold a sampled LRU (at construction).
  void SetUpLruChecks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // XORed into a key's hash in that check's sampled LRU: 0 in a tenant's own check; in the
  // tier's, the tenant's own, so that tenants' equal keys are apart.
  uint64_t LruSaltOf(uint32_t tenant) const;
  // Starts following LRU (`lru`) or the policy, with fresh evidence.
  static void FollowLru(LruCheck& check, bool lru, double trial);
  // Links a block into the tenant's recency list: at the recent end, or just ahead of
  // `parent` (kNil: none); and out of it.
  void RecencyLink(TenantState& t, uint32_t index, uint32_t parent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecencyUnlink(TenantState& t, uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static uint32_t CountOf(const Lanes& lanes);
  static uint64_t PagesOf(const Lanes& lanes);
  // A block's class, its lane and the ReturnModel's: its conversation's depth (Entry::turn, up
  // to kDepthClasses - 1) and whether it is the tail of a long turn (Entry::turn_place: the
  // 16th block the turn added or later). A turn that pastes in a long document is followed far
  // less often than a short one (docs/store.md); the model learns by how much from the tips of
  // such turns, and eviction trims their tails first.
  static constexpr int kDepthClasses = 8;
  static_assert(2 * kDepthClasses == ReturnModel::kClasses);
  static int LaneOf(int turn, int turn_place) {
    return 2 * std::min(turn, kDepthClasses - 1) + (turn_place == kTurnTail ? 1 : 0);
  }
  static int LaneOf(const Entry& e) { return LaneOf(e.turn, e.turn_place); }
  // Put's first step: room for `pages`, allocated into *extents, never by evicting `parent`
  // (may be null). AlreadyExists (counted as a duplicate put) when the key is resident.
  // *to_back receives the extents whose memory is to be taken before they are written
  // (BackOrFree, outside the lock).
  Status AllocateFor(uint32_t tenant, const BlockKey& key, uint32_t pages,
                     std::vector<Extent>* extents, std::vector<Extent>* to_back,
                     const BlockKey* parent = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the memory of `to_back` (Arena::Back); on failure frees `extents`, the allocation
  // they belong to, and returns the error.
  Status BackOrFree(uint32_t tenant, const std::vector<Extent>& to_back,
                    const std::vector<Extent>& extents) ABSL_LOCKS_EXCLUDED(mu_);
  // Put's last step: indexes the filled extents as the block, or frees them when the key
  // became resident meanwhile.
  void Publish(uint32_t tenant, const BlockKey& key, size_t size, std::vector<Extent> extents,
               const BlockKey* parent, const BlockMeta& meta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::span<std::byte>> MutableSpans(uint32_t tenant,
                                                 const std::vector<Extent>& extents,
                                                 size_t size) const;
  uint32_t AcquireSessionSlot(uint32_t tenant, SessionId session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSessionSlot(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  BlockMeta MetaOf(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes every resident block of `tenant` for which `match` holds, waiting for demotions
  // in flight; returns how many.
  template <typename Match>
  uint64_t EraseWhere(uint32_t tenant, Match match) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Evicts until `pages` can be allocated for the tenant, waiting for demotions in flight
  // when only they hold the pages needed.
  Status MakeRoom(uint32_t tenant, uint32_t pages, uint32_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when the pages are free now; false when demotions in flight must finish first.
  Result<bool> TryMakeRoom(uint32_t tenant, uint32_t pages, uint32_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvictAcrossTenants(uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvictOne(uint32_t tenant, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenant's next victim, not yet evicted (kNil: none); `protected_too`: a block a hint
  // protects when no other can go. *decided: taken for a reason (expiry, a hint, uselessness),
  // not by the policy's order.
  uint32_t NextVictim(uint32_t tenant, uint32_t now, bool protected_too, bool* decided)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Remembers the victim in its ghost, then Evict.
  void EvictVictim(uint32_t index, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a chosen victim: expired, demoted to G3 if admitted, or dropped.
  void Evict(uint32_t index, uint32_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Admit(const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // G3 admission from now on: `admission` and a fresh access sketch.
  void SetAdmission(const AdmissionOptions& admission) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Items the admission sketch is sized for now (memory_tier_eviction.cc).
  size_t SketchItems() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartDemotion(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Detach(uint32_t index, DetachReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees what a detached entry no longer needs: its pages once unleased, the entry itself
  // once it has no children either (then its parent is reconsidered).
  void Reclaim(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PutAll's end: frees the extents left in *extents (those not published) and ends the
  // leases of *held.
  void EndBatch(uint32_t tenant, std::vector<std::vector<Extent>>* extents,
                std::vector<uint32_t>* held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A resident block lost its last child: KV that needs state and now has none after it
  // serves no resume, and moves to the old end of probation, to be evicted first.
  void OnLastChildGone(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a queued block to the old end of its probation lane, to be evicted next.
  void QueueFirst(uint32_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeExtents(uint32_t tenant, const std::vector<Extent>& extents)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts the pages of newly allocated `extents` of `tenant` as holding memory, then sheds
  // memory while over the capacity. With back_on_allocate_, the extents holding pages that
  // had none are appended to *to_back (when not null) for the caller to back.
  void TakeMemory(uint32_t tenant, std::span<const Extent> extents, std::vector<Extent>* to_back)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes memory for the capacity up front (prefault, named files), on a thread of its own
  // while the tier serves: free pages of the regions, in configuration order, each tenant up to
  // its budget, a step at a time. Later allocations then find their pages resident (those
  // allocated first back their own pages), and pages move to another tenant only when shed.
  // A failure is logged and ends it.
  void StartProvisioning();
  // Backs one step's pages; returns how many it counted as resident (nullopt: done).
  Result<std::optional<uint64_t>> ProvisionStep() ABSL_LOCKS_EXCLUDED(mu_);
  // The next free pages without memory that provisioning backs, and their tenant; advances
  // provision_ past tenants that need no more.
  std::optional<Extent> NextToProvision(uint32_t* tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back the memory of free pages, of any tenant, until the regions hold at most the
  // capacity.
  void ShedMemory() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::span<const std::byte>> Spans(uint32_t index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CopyIn(uint32_t tenant, const std::vector<Extent>& extents,
              std::span<const std::byte> value) const;

  const std::unique_ptr<Arena> arena_;  // Null when payload-free.
  const uint64_t capacity_bytes_;
  const uint64_t page_bytes_;
  const uint32_t total_pages_;
  // Take each block's memory when it is allocated (Arena::Back): with prefault, and always
  // for named files, where a full file system would otherwise fault a write.
  const bool back_on_allocate_;
  const double max_reused_share_;
  const uint32_t max_hint_retain_seconds_;
  Env* const env_;

  // Ends the leases LeaseForCopy gives.
  class CopyReleaser final : public BlockHandle::Releaser {
   public:
    explicit CopyReleaser(MemoryTier* tier) : tier_(tier) {}
    void ReleaseLease(uint32_t entry) override { tier_->EndCopyLease(entry); }

   private:
    MemoryTier* const tier_;
  };
  void EndCopyLease(uint32_t entry) ABSL_LOCKS_EXCLUDED(mu_);
  CopyReleaser copy_releaser_{this};

  mutable Mutex mu_;
  CondVar space_freed_;      // A demotion or a copy lease ended: pages may be free.
  CondVar provision_done_;   // provisioned_ became true.
  bool provisioned_ ABSL_GUARDED_BY(mu_) = true;  // No provisioning thread is running.
  uint32_t copy_leases_ ABSL_GUARDED_BY(mu_) = 0;  // LeaseForCopy's, not yet ended.
  CondVar demotion_queued_;  // pending_demotions_ grew, or demotion stopped.
  std::vector<ExtentAllocator> pages_ ABSL_GUARDED_BY(mu_);  // Per tenant region.
  uint32_t free_pages_ ABSL_GUARDED_BY(mu_);  // total_pages_ less every tenant's used pages.
  // Which pages of each region hold memory (a bit per page), and how many in all.
  std::vector<PageRuns> resident_ ABSL_GUARDED_BY(mu_);
  uint64_t resident_pages_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t discards_ ABSL_GUARDED_BY(mu_) = 0;  // Times ShedMemory gave memory back.
  struct ProvisionCursor {
    uint32_t tenant = 0;    // The tenant being provisioned.
    bool started = false;   // `left` is set for it.
    uint64_t left = 0;      // Pages it still wants.
  };
  ProvisionCursor provision_ ABSL_GUARDED_BY(mu_);
  std::thread provisioner_;
  std::atomic<bool> stop_provisioning_{false};
  EntryTable table_ ABSL_GUARDED_BY(mu_);
  // Entry::stamp of the last block queued at the back. Stamps step by kStampStep, so that a
  // chain's blocks, each queued just ahead of its parent, stay between the parent and the
  // block queued before it (chains are shorter than the step: depth is 16 bits).
  static constexpr uint64_t kStampStep = uint64_t{1} << 20;
  uint64_t next_stamp_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> lookup_hashes_ ABSL_GUARDED_BY(mu_);  // CheckAgainstLru's scratch.
  // Pieces after the first of blocks stored in more than one extent.
  std::unordered_map<uint32_t, std::vector<Extent>> more_extents_ ABSL_GUARDED_BY(mu_);
  std::vector<TenantState> tenants_ ABSL_GUARDED_BY(mu_);
  // No tenant has a budget: the tenants share G2 as one cache (EvictAcrossTenants), and
  // lru_check_ is their LRU check.
  bool shared_cache_ = false;
  LruCheck lru_check_ ABSL_GUARDED_BY(mu_);
  std::vector<SessionSlot> session_slots_ ABSL_GUARDED_BY(mu_);  // [0] is "no session".
  std::vector<uint32_t> free_session_slots_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<uint32_t, SessionId>, uint32_t> session_index_ ABSL_GUARDED_BY(mu_);
  // --- Warm restart (memory_snapshot.cc) ---
  struct Snapshot;
  // Open with options.arena_file: locks the file, reads and deletes the previous run's index,
  // maps the arena (kept only when the index was valid) and adopts its blocks.
  static Result<std::unique_ptr<MemoryTier>> OpenFromFile(const MemoryTierOptions& options,
                                                          std::vector<TenantConfig> tenants,
                                                          Env* env);
  // DataLoss naming what is wrong when the index is damaged, foreign, or for another page size.
  static Result<Snapshot> ParseSnapshot(std::span<const std::byte> bytes, uint64_t page_bytes);
  // Adopts the blocks of `snapshot` that pass their checks; logs what came back.
  void Adopt(const Snapshot& snapshot, uint64_t start_us) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the index of every resident block beside the arena file (at destruction).
  Status SaveSnapshot() ABSL_LOCKS_EXCLUDED(mu_);

  std::string arena_file_;                // Empty: an anonymous arena.
  std::unique_ptr<FileLock> arena_lock_;  // Held while this process owns arena_file_.
  uint64_t restored_blocks_ ABSL_GUARDED_BY(mu_) = 0;  // Set once by Adopt.
  uint64_t restore_dropped_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t restore_micros_ ABSL_GUARDED_BY(mu_) = 0;

  struct Reservation {
    uint32_t tenant;
    BlockKey key;
    size_t size;
    std::vector<Extent> extents;
  };
  std::unordered_map<uint64_t, Reservation> reservations_ ABSL_GUARDED_BY(mu_);
  uint64_t next_reservation_ ABSL_GUARDED_BY(mu_) = 1;

  bool demotion_enabled_ ABSL_GUARDED_BY(mu_) = false;
  bool demotion_stopped_ ABSL_GUARDED_BY(mu_) = false;
  AdmissionOptions admission_ ABSL_GUARDED_BY(mu_);
  std::optional<FrequencySketch> sketch_ ABSL_GUARDED_BY(mu_);
  AdmissionStats admission_stats_ ABSL_GUARDED_BY(mu_);
  std::deque<uint32_t> pending_demotions_ ABSL_GUARDED_BY(mu_);
  uint64_t demoting_pages_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t demotion_headroom_pages_ ABSL_GUARDED_BY(mu_) = 0;  // Set by EnableDemotion.
  BlockEventListener* events_ = nullptr;  // Set before use.
  EvictionObserver* eviction_observer_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace kvtier

#endif  // KVTIER_TIER_MEMORY_MEMORY_TIER_H_
