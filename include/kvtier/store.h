// Store: the embedded KV-cache store. The daemon, the CLI and embedded users all go through it.
//
// Thread safety: every method of Store may be called concurrently from any number of threads.
// Blocks are immutable: a Put of a key that is already present is a no-op that returns OK.
//
// Lifetime: a BlockHandle must be destroyed before the Store that returned it.

#ifndef KVTIER_STORE_H_
#define KVTIER_STORE_H_

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/events.h"
#include "kvtier/options.h"
#include "kvtier/state.h"
#include "kvtier/status.h"

namespace kvtier {

// A tenant resolved by Store::FindTenant. Cheap to copy; valid for the Store that issued it.
struct TenantId {
  uint32_t value = UINT32_MAX;
  friend bool operator==(TenantId, TenantId) = default;
};

// The memory hierarchy levels kvtier manages. G1 (GPU HBM) belongs to the engine.
enum class TierLevel : uint8_t {
  kG2 = 2,  // Host DRAM on this node.
  kG3 = 3,  // Local NVMe on this node.
  kG4 = 4,  // Storage shared by the cluster.
};

// Session ids group the blocks of one conversation or agent run for Store::DeleteSession.
// Chosen by the caller; 0 means "no session".
using SessionId = uint64_t;

// What a block holds, for eviction (include/kvtier/state.h, docs/state.md).
enum class BlockRole : uint8_t {
  // KV of a model that can resume after any block (full attention only).
  kKv = 0,
  // KV of a model that resumes only where its state values are (hybrid and sliding-window
  // models): a block with no later block and no state value after it serves no resume, and
  // G2 evicts it first.
  kKvNeedsState = 1,
  // A state value, stored under StateKey(block, group) with that block as its parent.
  kState = 2,
};

struct PutOptions {
  // The previous block of the same prompt, when the block is part of a chain. The store keeps
  // a chain's head for as long as any later block of it is resident (it evicts tails first).
  std::optional<BlockKey> parent;
  // The session the block belongs to. A block stored again under another session keeps the
  // session of its first put (blocks are shared by content, not owned by a session).
  SessionId session = 0;
  // Element type of the KV values in the block, which compression uses to split byte planes.
  // nullopt: unknown, compressed as plain bytes.
  std::optional<KvDtype> dtype = std::nullopt;
  // The engine's own hash of the block, for the KV events of this store; not kept otherwise.
  std::optional<EngineHash> engine_hash = std::nullopt;
  BlockRole role = BlockRole::kKv;
};

// One block of a batch put. The value is read during the call only.
struct BlockWrite {
  BlockKey key;
  std::span<const std::byte> value;
  std::optional<BlockKey> parent;
  SessionId session = 0;
  std::optional<KvDtype> dtype = std::nullopt;
  std::optional<EngineHash> engine_hash = std::nullopt;
  BlockRole role = BlockRole::kKv;
};

// What a deletion by session or tenant removed. When the call returns OK, no tier serves any
// of those blocks any more, and no copy comes back after a restart (tombstones are durable);
// the bytes themselves are overwritten as the tiers reclaim space.
struct DeletionReport {
  uint64_t memory_blocks = 0;  // G2 copies removed.
  uint64_t disk_blocks = 0;    // G3 copies removed.
  uint64_t shared_blocks = 0;  // G4 objects removed (put by any node).
};

struct PrefixMatch {
  // Number of leading keys present; lookup stops at the first miss.
  size_t num_blocks = 0;
  // Where each of the first num_blocks blocks was found.
  std::vector<TierLevel> tiers;
};

// The answer of Store::LookupResume (include/kvtier/state.h).
struct ResumeMatch {
  // Leading blocks whose keys are all present (the prefix lookup's answer, in blocks).
  size_t kv_blocks = 0;
  // The longest prefix, in blocks, the engine can resume from: the KV of blocks 0..n-1 and
  // every group's values its window needs at block n-1. 0 when there is none; at most
  // kv_blocks.
  size_t resume_blocks = 0;
  // Where each key of the first kv_blocks blocks was found, in order.
  std::vector<TierLevel> tiers;
  // With all_lengths: every n in [1, kv_blocks] the engine can resume from, ascending. A
  // windowed group may allow 5 and not 4 (a state kept only at some boundaries).
  std::vector<uint32_t> resumable;
  // Per group, in the query's order: the longest prefix within kv_blocks that this group
  // alone allows.
  std::vector<uint32_t> group_blocks;
};

// A read lease on a resident block: the bytes stay valid and unchanged while the handle lives,
// even if the block is deleted or evicted meanwhile (its space is reused only after the last
// handle is gone). Move-only. Not thread-safe itself; the Store it came from is.
class BlockHandle {
 public:
  class Releaser {
   public:
    virtual void ReleaseLease(uint32_t entry) = 0;

   protected:
    ~Releaser() = default;
  };

  BlockHandle() = default;
  // A lease on arena memory, ended through `releaser`.
  BlockHandle(Releaser* releaser, uint32_t entry, size_t size,
              std::vector<std::span<const std::byte>> extents)
      : releaser_(releaser), entry_(entry), size_(size), extents_(std::move(extents)) {}
  // A block the handle owns outright (read from a lower tier and not cached in G2).
  explicit BlockHandle(std::vector<std::byte> owned);
  BlockHandle(BlockHandle&& other) noexcept { *this = std::move(other); }
  BlockHandle& operator=(BlockHandle&& other) noexcept;
  BlockHandle(const BlockHandle&) = delete;
  BlockHandle& operator=(const BlockHandle&) = delete;
  ~BlockHandle() { Release(); }

  bool valid() const { return releaser_ != nullptr || !owned_.empty(); }
  size_t size() const { return size_; }
  // The block's bytes as one or more contiguous pieces in order (usually exactly one).
  const std::vector<std::span<const std::byte>>& extents() const { return extents_; }
  // Copies the block into `out`. REQUIRES: out.size() >= size().
  void CopyTo(std::span<std::byte> out) const;
  // Ends the lease early. The handle becomes invalid.
  void Release();

 private:
  Releaser* releaser_ = nullptr;
  uint32_t entry_ = 0;
  size_t size_ = 0;
  std::vector<std::span<const std::byte>> extents_;
  std::vector<std::byte> owned_;
};

// One tenant's region of the G2 arena, as a same-host client of that tenant maps it (the
// shared-memory fast path): a read-only descriptor of a file of `size` bytes that holds that
// tenant's blocks and no other's, mapped (writable) at `base` in this process. An offset into
// it names the same bytes in every process that maps the fd.
struct SharedArena {
  int fd = -1;
  std::byte* base = nullptr;
  uint64_t size = 0;
};

// Space for one block in the G2 arena, reserved by Store::Allocate, filled in place (through
// extents() in this process; a same-host client writes elsewhere, which its connection copies
// here: docs/protocol.md), then published
// by Store::Commit. Until then no reader sees it. Destroying an allocation that was not
// committed gives the space back. Move-only; not thread-safe itself.
class BlockAllocation {
 public:
  class Owner {
   public:
    virtual void AbortAllocation(uint64_t id) = 0;

   protected:
    ~Owner() = default;
  };

  BlockAllocation() = default;
  BlockAllocation(Owner* owner, uint64_t id, TenantId tenant, const BlockKey& key, size_t size,
                  std::vector<std::span<std::byte>> extents)
      : owner_(owner), id_(id), tenant_(tenant), key_(key), size_(size),
        extents_(std::move(extents)) {}
  BlockAllocation(BlockAllocation&& other) noexcept { *this = std::move(other); }
  BlockAllocation& operator=(BlockAllocation&& other) noexcept {
    if (this != &other) {
      Abort();
      owner_ = std::exchange(other.owner_, nullptr);
      id_ = other.id_;
      tenant_ = other.tenant_;
      key_ = other.key_;
      size_ = std::exchange(other.size_, 0);
      extents_ = std::move(other.extents_);
    }
    return *this;
  }
  BlockAllocation(const BlockAllocation&) = delete;
  BlockAllocation& operator=(const BlockAllocation&) = delete;
  ~BlockAllocation() { Abort(); }

  bool valid() const { return owner_ != nullptr; }
  TenantId tenant() const { return tenant_; }
  const BlockKey& key() const { return key_; }
  size_t size() const { return size_; }
  // The pieces to fill, in order; their sizes add up to size().
  const std::vector<std::span<std::byte>>& extents() const { return extents_; }
  uint64_t id() const { return id_; }

  // Gives the space back (what destruction does). Afterwards valid() is false.
  void Abort() {
    if (owner_ != nullptr) std::exchange(owner_, nullptr)->AbortAllocation(id_);
    extents_.clear();
    size_ = 0;
  }
  // Store::Commit calls this once it has taken the allocation over.
  void Release() {
    owner_ = nullptr;
    extents_.clear();
  }

 private:
  Owner* owner_ = nullptr;
  uint64_t id_ = 0;
  TenantId tenant_;
  BlockKey key_;
  size_t size_ = 0;
  std::vector<std::span<std::byte>> extents_;
};

struct TenantStats {
  std::string name;
  uint64_t memory_budget_bytes = 0;  // 0 = unlimited.
  uint64_t blocks = 0;               // Resident blocks.
  uint64_t bytes = 0;                // Bytes held, in whole pages, including released-but-leased.
  uint64_t pinned_blocks = 0;
  uint64_t hits = 0;                 // Gets and prefix-lookup blocks found.
  uint64_t misses = 0;               // Gets not found, and lookups that stopped at a miss.
  uint64_t puts = 0;                 // Blocks stored.
  uint64_t duplicate_puts = 0;       // Puts of a key already present.
  uint64_t put_bytes = 0;
  uint64_t get_bytes = 0;            // Bytes handed to readers.
  uint64_t evictions = 0;            // Blocks evicted for space.
  uint64_t expirations = 0;          // Blocks removed by TTL.
  uint64_t deletes = 0;
  uint64_t rejected_puts = 0;        // Puts that failed for lack of evictable space.
  uint64_t session_hints = 0;        // Session hints taken (Store::HintSession).
  // Times G2 eviction found plain LRU serving more of this tenant's prefix lookups than its
  // policy, and followed LRU for a trial (docs/store.md, "The LRU check"). Tenants without
  // budgets are checked together, as one cache: a trial counts on the tenant whose lookup
  // started it.
  uint64_t lru_trials = 0;

  // Every counter above with its name on the wire, in JSON and in Python, in wire order.
  struct Counter {
    const char* name;
    uint64_t TenantStats::*field;
  };
  static const Counter kCounters[];
};
inline constexpr TenantStats::Counter TenantStats::kCounters[] = {
    {"memory_budget_bytes", &TenantStats::memory_budget_bytes},
    {"blocks", &TenantStats::blocks},
    {"bytes", &TenantStats::bytes},
    {"pinned_blocks", &TenantStats::pinned_blocks},
    {"hits", &TenantStats::hits},
    {"misses", &TenantStats::misses},
    {"puts", &TenantStats::puts},
    {"duplicate_puts", &TenantStats::duplicate_puts},
    {"put_bytes", &TenantStats::put_bytes},
    {"get_bytes", &TenantStats::get_bytes},
    {"evictions", &TenantStats::evictions},
    {"expirations", &TenantStats::expirations},
    {"deletes", &TenantStats::deletes},
    {"rejected_puts", &TenantStats::rejected_puts},
    {"session_hints", &TenantStats::session_hints},
    {"lru_trials", &TenantStats::lru_trials},
};

struct StoreStats {
  uint64_t memory_capacity_bytes = 0;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_free_bytes = 0;
  uint64_t memory_largest_free_extent_bytes = 0;
  uint64_t blocks = 0;
  uint64_t multi_extent_blocks = 0;  // Blocks stored in more than one piece.
  uint64_t index_bytes = 0;          // Memory of the block index and eviction metadata.
  // Warm restart (MemoryTierOptions::arena_file): blocks adopted from the previous run's
  // arena at open, blocks of it dropped (checksum mismatch, tenant gone, past the capacity or
  // budget), and how long adopting took.
  uint64_t memory_restored_blocks = 0;
  uint64_t memory_restore_dropped_blocks = 0;
  uint64_t memory_restore_micros = 0;

  // G3 (all zero without a disk tier).
  uint64_t disk_capacity_bytes = 0;
  uint64_t disk_used_bytes = 0;      // Segment files on disk, including dead records.
  uint64_t disk_blocks = 0;
  uint64_t disk_hits = 0;
  uint64_t disk_misses = 0;
  uint64_t disk_corrupt_records = 0; // Failed their checksum or tag: dropped, never served.
  uint64_t disk_read_errors = 0;     // Reads the device failed: misses.
  uint64_t disk_write_errors = 0;    // Records the device failed to write.
  uint64_t disk_unreadable_records = 0;  // Sealed under a shredded key: dropped.
  uint64_t disk_logical_bytes = 0;   // Live G3 blocks as users see them...
  uint64_t disk_stored_bytes = 0;    // ...and as stored (compressed): the ratio is the saving.
  uint64_t disk_evictions = 0;
  bool disk_io_uring = false;
  // False while G3's writes fail (full, I/O errors, read-only): G3 still serves reads, G2 and
  // G4 go on; true again once a write succeeds. disk_write_fault says what failed.
  bool disk_writable = true;
  std::string disk_write_fault;
  uint64_t disk_write_fault_since_us = 0;

  // G4 (all zero without a shared tier).
  uint64_t shared_hits = 0;
  uint64_t shared_misses = 0;
  // Reads that joined another request's read of the same block in flight instead of reading
  // G4 again (a burst of requests for one block reads it once per node).
  uint64_t shared_reads_coalesced = 0;
  // The same for existence checks (a prefix lookup's G4 part), counted per block.
  uint64_t shared_checks_coalesced = 0;
  uint64_t shared_checks_cached = 0;   // Answered by a check of the last exists_cache_ms.
  uint64_t shared_puts = 0;            // Objects this node published.
  uint64_t shared_read_bytes = 0;      // Block bytes this node read from G4 (decoded).
  uint64_t shared_written_bytes = 0;   // Object bytes it published (encoded, with headers).
  uint64_t shared_corrupt = 0;         // Failed verification: never served.
  uint64_t shared_errors = 0;          // Storage errors (I/O, network, service).
  uint64_t shared_uploads_dropped = 0; // Uploads dropped: a full queue or upload buffer.
  uint64_t shared_upload_buffer_bytes = 0;  // Copies of demoted blocks awaiting upload.
  uint64_t deletion_notices_published = 0;  // Deletions announced to the other nodes.
  uint64_t deletion_notices_applied = 0;    // Other nodes' deletions applied here.
  // Other nodes' deletions whose apply failed here (a G3 or G4 error), retried at each poll.
  uint64_t deletion_notices_pending = 0;
  // Times this node emptied its G2 and G3 because it may have missed deletion notices (read
  // none for longer than G4 keeps them, or lost its record of them).
  uint64_t notice_gap_resets = 0;
  bool shared_janitor_lease = false;   // This node runs G4 housekeeping.
  // This node and the others whose deletion notices it has read since it started.
  uint64_t shared_nodes_seen = 0;

  // Movement between tiers.
  uint64_t demoted_blocks = 0;        // G2 evictions written to G3.
  uint64_t demotion_failures = 0;     // Admitted but not written (G3 full or failing).
  uint64_t demotion_shared_skips = 0; // Evictions not written back to G4: read from there.
  uint64_t demotion_disk_skips = 0;   // Evictions not written to G3: G3 holds them already.
  // G3 writes that carried the demotions, several blocks each while G2 is under put pressure
  // (MemoryTier::EnableDemotion): each write keeps that many I/Os in flight.
  uint64_t demotion_writes = 0;
  uint64_t promoted_blocks = 0;       // G3 hits copied back into G2.
  uint64_t admitted_blocks = 0;       // G2 evictions admitted to G3.
  uint64_t skipped_short_prefix = 0;  // Not admitted: chain shorter than min_prefix_blocks.
  uint64_t skipped_infrequent = 0;    // Not admitted: accessed fewer than min_accesses times.

  std::vector<TenantStats> tenants;
};

// A node's G4 traffic as it last reported it to the cluster (Store::Fleet): the StoreStats
// counters of the same names, counted since that node started.
struct NodeReport {
  std::string node;      // Its shared.node_id.
  uint64_t time_us = 0;  // When it reported, on its own clock.
  uint64_t shared_hits = 0;
  uint64_t shared_misses = 0;
  uint64_t shared_read_bytes = 0;
  uint64_t shared_written_bytes = 0;
  uint64_t shared_puts = 0;
  uint64_t shared_errors = 0;
  uint64_t shared_reads_coalesced = 0;
  uint64_t shared_checks_coalesced = 0;

  // Every counter above with its name in JSON (G4's record, kvtierd's /fleet).
  struct Counter {
    const char* name;
    uint64_t NodeReport::*field;
  };
  static const Counter kCounters[];
};
inline constexpr NodeReport::Counter NodeReport::kCounters[] = {
    {"shared_hits", &NodeReport::shared_hits},
    {"shared_misses", &NodeReport::shared_misses},
    {"shared_read_bytes", &NodeReport::shared_read_bytes},
    {"shared_written_bytes", &NodeReport::shared_written_bytes},
    {"shared_puts", &NodeReport::shared_puts},
    {"shared_errors", &NodeReport::shared_errors},
    {"shared_reads_coalesced", &NodeReport::shared_reads_coalesced},
    {"shared_checks_coalesced", &NodeReport::shared_checks_coalesced},
};

struct FleetView {
  std::vector<NodeReport> nodes;  // This node's, current, then the others' by node id.
  uint64_t read_us = 0;           // When the others' were read from G4; 0 = not yet.
};

// A block this node holds (Store::ListHeld).
struct HeldBlock {
  BlockKey key;
  std::optional<BlockKey> parent;  // G2: the previous block of its chain, when it was named.
  uint16_t depth = 0;              // G2: its position in the chain (0 = head; saturating).
  BlockMedium medium = BlockMedium::kCpu;  // kCpu (G2) or kDisk (G3).
};

class Store {
 public:
  // Opens an in-process store. InvalidArgument for inconsistent options; ResourceExhausted
  // or Internal when the arena cannot be created.
  static Result<std::unique_ptr<Store>> Open(const Options& options);

  virtual ~Store() = default;

  // NotFound for a tenant not in Options::tenants.
  virtual Result<TenantId> FindTenant(std::string_view name) const = 0;

  // Stores a copy of `value`. InvalidArgument for an empty value, one over max_block_bytes or
  // over the tenant's budget; ResourceExhausted when nothing evictable makes room (all pinned
  // or leased). OK without storing when the key is already present.
  virtual Status Put(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
                     const PutOptions& options = {}) = 0;
  // One status per write, in order.
  virtual std::vector<Status> PutMany(TenantId tenant, std::span<const BlockWrite> writes) = 0;

  // Stores `value` under a key that names a mutable value (RESP's SET) rather than content: a
  // key this node does not hold is put as Put does (nothing deleted, nothing announced); a key
  // it holds (G2 or G3) with the same bytes is left as it is; with other bytes the old value
  // is deleted as Delete does (every tier, with its deletion notice), then the new one put.
  // Not atomic with concurrent writers of the key. A value that only G4 holds (put by another
  // node) is not replaced there: G4 keeps the first value of a key.
  virtual Status Replace(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
                         const PutOptions& options = {}) = 0;

  // Zero-copy read: a lease on the block's bytes in the arena. NotFound on a miss.
  virtual Result<BlockHandle> Get(TenantId tenant, const BlockKey& key) = 0;
  virtual std::vector<Result<BlockHandle>> GetMany(TenantId tenant,
                                                   std::span<const BlockKey> keys) = 0;

  // Copying read into `out`; returns the block size. OutOfRange (nothing copied) when `out` is
  // smaller than the block.
  virtual Result<size_t> Read(TenantId tenant, const BlockKey& key, std::span<std::byte> out) = 0;
  // REQUIRES: outs.size() == keys.size().
  virtual std::vector<Result<size_t>> ReadMany(TenantId tenant, std::span<const BlockKey> keys,
                                               std::span<const std::span<std::byte>> outs) = 0;

  // How many leading `keys` are present, and where. Counts as an access of each found block.
  virtual Result<PrefixMatch> LookupPrefix(TenantId tenant, std::span<const BlockKey> keys) = 0;
  // The same from tokens: keys are derived with ns (ns.tenant names the tenant).
  virtual Result<PrefixMatch> LookupPrefix(const Namespace& ns,
                                           std::span<const uint32_t> tokens) = 0;
  virtual std::vector<Result<PrefixMatch>> LookupPrefixMany(
      TenantId tenant, std::span<const std::span<const BlockKey>> prompts) = 0;

  // The longest prefix of `keys` (query.keys_per_block keys per block) that an engine can
  // resume from with the state groups of `query`, and optionally every such length
  // (include/kvtier/state.h). Counts as an access of each block and state value found.
  // InvalidArgument for a key count that is not a multiple of keys_per_block, a group name
  // StateKey refuses, a group named twice or more than kMaxStateGroups groups. A group that
  // was never stored is no error: nothing can be resumed with it.
  virtual Result<ResumeMatch> LookupResume(TenantId tenant, std::span<const BlockKey> keys,
                                           const ResumeQuery& query) = 0;

  // Stores every write or none, and readers see all of them or none: a boundary's state
  // values with its KV block (docs/state.md). Keys already present count as stored. Put's
  // errors for a bad value (the first one found); ResourceExhausted when G2 cannot hold them
  // all at once; InvalidArgument for a kState write without a parent; FailedPrecondition for
  // one whose parent is neither in the batch nor stored.
  virtual Status PutAtomic(TenantId tenant, std::span<const BlockWrite> writes) = 0;

  // NotFound when absent here. Outstanding BlockHandles stay readable until released. With
  // G4, the other nodes are told (one deletion notice per call) and remove their copies too;
  // Unavailable when that notice could not be published (repeat the call).
  virtual Status Delete(TenantId tenant, const BlockKey& key) = 0;
  virtual std::vector<Status> DeleteMany(TenantId tenant, std::span<const BlockKey> keys) = 0;

  // Records a failed authentication in the audit log (OK, and nothing written, without one):
  // `tenant` the configured tenant the client named, or ""; `peer` who it was ("tcp:10.0.0.5",
  // "unix:uid=1000"); `protocol` ("native", "resp", "http"); `lockout` whether it locked the
  // peer out. Tokens are never passed, so none can reach the log.
  virtual Status RecordAuthFailure(std::string_view tenant, std::string_view peer,
                                   std::string_view protocol, bool lockout) = 0;

  // What an engine, a router or an agent framework knows of a session that the Store cannot
  // see. A hint orders G2's evictions and nothing else: it never keeps a block past the
  // tenant's budget, a pin, a TTL, a deletion or the capacity (a put always finds room as
  // without hints). With budgets it orders the tenant's own evictions; tenants without budgets
  // share G2 as one cache, where a protected block goes after every other tenant's unprotected
  // ones too (budgets are what isolates tenants from each other's hints). A hint is forgotten
  // when the session has no block left in G2.
  enum class SessionPriority : uint8_t { kNormal = 0, kLow = 1, kHigh = 2 };
  struct SessionHint {
    // The session comes back within this many seconds (the agent waits on a tool call): its G2
    // blocks are evicted only when no other block of the tenant can be, the session due back
    // last first; past that time it is overdue (due any moment, so kept over the others) for
    // as long again. A put into the session ends the retention. 0 = none; at most
    // MemoryTierOptions::max_hint_retain_seconds.
    uint32_t retain_seconds = 0;
    // The session is over: its G2 blocks are the tenant's next victims.
    bool finished = false;
    // How much the session's KV is worth keeping, from the sender's request priority. It holds
    // until another priority hint, for the blocks the session puts or reads later too.
    //   kLow: its blocks are the tenant's first victims after finished sessions' (a batch job,
    //     a background summariser), and still serve hits while they are resident.
    //   kHigh: evicted only when no other block of the tenant can be, as a retained session's,
    //     and before those (a retained session is due back soon; a high one at no known time).
    //   kNormal: back to the default order.
    std::optional<SessionPriority> priority;
  };
  static std::optional<SessionPriority> ParseSessionPriority(std::string_view name) {
    if (name == "low") return SessionPriority::kLow;
    if (name == "normal") return SessionPriority::kNormal;
    if (name == "high") return SessionPriority::kHigh;
    return std::nullopt;
  }
  // InvalidArgument for session 0, a hint with nothing in it, finished with anything else, or a
  // retention past the limit; NotFound when the session has no block in G2.
  virtual Status HintSession(TenantId tenant, SessionId session, const SessionHint& hint) = 0;

  // Deletes every block put with `session`, on every tier. `actor` (an identifier: letters,
  // digits and ._-@:) names who asked, for the audit log. Pinned blocks are deleted too.
  virtual Result<DeletionReport> DeleteSession(TenantId tenant, SessionId session,
                                               std::string_view actor) = 0;
  // Deletes every block of the tenant, on every tier.
  virtual Result<DeletionReport> DeleteTenant(TenantId tenant, std::string_view actor) = 0;
  // Crypto-shredding: destroys every data key of the tenant, so that each of its encrypted
  // records on every tier becomes unreadable at once, wherever it is, then deletes its blocks
  // as DeleteTenant does. FailedPrecondition when the store has no master key. Later puts of the
  // tenant are sealed under a fresh key.
  virtual Result<DeletionReport> ShredTenant(TenantId tenant, std::string_view actor) = 0;

  // A pinned block is never evicted or expired. Pins nest: each Pin needs its Unpin.
  // Unpin of a block that is not pinned is FailedPrecondition.
  virtual Status Pin(TenantId tenant, const BlockKey& key) = 0;
  virtual std::vector<Status> PinMany(TenantId tenant, std::span<const BlockKey> keys) = 0;
  virtual Status Unpin(TenantId tenant, const BlockKey& key) = 0;
  virtual std::vector<Status> UnpinMany(TenantId tenant, std::span<const BlockKey> keys) = 0;

  // ---- Shared-memory fast path (same-host clients; docs/protocol.md) ----
  // The G2 region of `tenant`; nullopt for a payload-free store or an unknown tenant.
  virtual std::optional<SharedArena> shared_arena(TenantId tenant) const = 0;
  // Reserves G2 space for a block of `size` bytes, evicting as Put does (keeping `parent`, the
  // block's chain predecessor, while anything else can go). AlreadyExists when the key is
  // present (nothing to write); Put's errors otherwise.
  virtual Result<BlockAllocation> Allocate(TenantId tenant, const BlockKey& key, size_t size,
                                           const std::optional<BlockKey>& parent) = 0;
  Result<BlockAllocation> Allocate(TenantId tenant, const BlockKey& key, size_t size) {
    return Allocate(tenant, key, size, std::nullopt);
  }
  // Publishes a filled allocation as the block `allocation.key()`. OK also when a concurrent
  // put of the same key won (blocks are immutable; the allocation's bytes are dropped).
  // InvalidArgument for an allocation that is not valid.
  virtual Status Commit(BlockAllocation allocation, const PutOptions& options = {}) = 0;
  // Commit as Replace stores: for a key that names a mutable value, whose bytes were written
  // into an allocation (which Allocate grants only while G2 does not hold the key). A value G3
  // holds under the key with the same bytes is kept (the allocation dropped); with other bytes
  // it is deleted as Delete does, then the allocation published.
  virtual Status CommitReplace(BlockAllocation allocation, const PutOptions& options = {}) = 0;

  // Removes every expired block now (expiry is otherwise found lazily). Returns how many.
  virtual size_t PurgeExpired() = 0;

  // Makes the tenant's blocks durable: writes every block of the tenant that G2 holds when the
  // call starts and G3 does not to G3, bypassing admission, and returns once G3 has them as
  // its durability says (kWritten: they survive kill -9; kSynced: power loss too). Returns how
  // many blocks it wrote. FailedPrecondition without G3; G3's errors (ResourceExhausted when
  // full) otherwise, after writing what it could. Blocks stay in G2.
  virtual Result<uint64_t> Flush(TenantId tenant) = 0;

  // With G4: reads the deletion notices other nodes published since the last call and
  // removes the blocks they name from this node's G2 and G3 (each recorded in the audit log,
  // the other node as actor). Notices that failed to apply before (a G3 or G4 error) are
  // applied again first. Returns how many notices were applied. Runs in the background every
  // shared.notice_poll_ms. FailedPrecondition without G4.
  virtual Result<uint64_t> ApplyDeletionNotices() = 0;

  virtual StoreStats Stats() const = 0;
  virtual Result<TenantStats> StatsForTenant(TenantId tenant) const = 0;

  // With MemoryTierOptions::prefault, G2 takes its memory up front on a thread of its own
  // while the Store serves. Waits up to `timeout` for that to end (done, or given up and
  // logged); true once it has, or when nothing was to be taken.
  virtual bool WaitMemoryProvisioned(std::chrono::milliseconds timeout) = 0;

  // With G4: the G4 traffic of every node sharing it, from the reports each node writes to
  // G4 every shared.report_ms. This node's is current. The others' are read in the
  // background, every report_ms while Fleet is being called (until 3 report_ms after the
  // last call), so the first call after a pause has this node's alone. A node that stops
  // cleanly removes its report; one that vanished stays listed, with its report's time, for a
  // day. FailedPrecondition without G4 or with report_ms 0.
  virtual Result<FleetView> Fleet() = 0;

  // What this node holds of `tenant` in G2, then in G3 (a block in both is listed twice),
  // a part at a time for a caller that must not hold the tiers long: each call looks at up to
  // `slots` index slots from *cursor (start at 0) and moves it on; *cursor is kHeldEnd when
  // the listing is complete. Blocks stored or removed while a listing is under way may be in
  // it or not; their events tell which (KV events: src/server/kv_events.h). G4 is shared by
  // the cluster and not listed. InvalidArgument for an unknown tenant.
  static constexpr uint64_t kHeldEnd = UINT64_MAX;
  virtual Result<std::vector<HeldBlock>> ListHeld(TenantId tenant, uint64_t* cursor,
                                                  size_t slots) const = 0;
};

}  // namespace kvtier

#endif  // KVTIER_STORE_H_
