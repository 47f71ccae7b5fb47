// EntryTable: the compact metadata of the G2 tier. Entries live in a chunked pool addressed
// by 32-bit index (no per-entry allocation, stable addresses); a linear-probing hash table of
// indices finds them by (tenant, key); intrusive index-linked lists form the eviction queues.
// 104 bytes per entry plus 5 to 11 bytes of hash slots.
//
// Not thread-safe: the owner serialises calls.

#ifndef KVTIER_TIER_MEMORY_ENTRY_TABLE_H_
#define KVTIER_TIER_MEMORY_ENTRY_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvtier/block_key.h"
#include "src/common/extent_allocator.h"

namespace kvtier {

inline constexpr uint32_t kNil = UINT32_MAX;

enum class EntryState : uint8_t {
  kFree,      // In the pool's free list.
  kResident,  // In the hash index; readable.
  kDetached,  // Deleted or evicted; kept until its readers and children are gone.
};

// kSession: the queue of a session protected by a hint (MemoryTier::SessionSlot::queue).
enum class QueueId : uint8_t { kNone, kProbation, kReused, kSession };

struct Entry {
  BlockKey key;
  uint32_t tenant = 0;
  uint32_t size = 0;          // Bytes of the block.
  Extent extent;              // The first (usually only) piece.
  uint32_t prev = kNil;       // Queue links; `next` doubles as the free-list link.
  uint32_t next = kNil;
  uint32_t parent = kNil;     // Previous block of the chain, kept while this one lives.
  uint32_t children = 0;      // Entries whose parent is this one.
  uint32_t last_access_s = 0;  // Wall-clock seconds; TTLs are whole seconds.
  uint32_t created_s = 0;      // When the block was first stored (any tier); for max age.
  uint32_t session = 0;        // Slot in MemoryTier's session table; 0 = no session.
  // The tenant's recency list (MemoryTier::TenantState::recency): every resident block, least
  // recently used first, whatever its queue.
  uint32_t recency_prev = kNil;
  uint32_t recency_next = kNil;

  uint16_t depth = 0;          // Position in its chain (0 = head), saturating.
  uint16_t readers = 0;        // Outstanding read leases, the demotion's included.
  uint16_t pins = 0;
  EntryState state = EntryState::kFree;
  QueueId queue = QueueId::kNone;
  uint8_t flags = 0;           // kEntry* bits below.
  uint8_t dtype = 0;           // KvDtype of the values; 0 = unknown.
  // Times its conversation had come back (its chain was extended after being read) when this
  // block was put or last matched as part of it; saturating. With turn_place, its eviction
  // lane (MemoryTier::LaneOf).
  uint8_t turn = 0;
  uint8_t policy : 4 = 0;      // kPolicy* bits below.
  // Its place among the blocks the turn that put it added (0: the turn's first), up to
  // kTurnTail; 0 again once a later turn extends its chain.
  uint8_t turn_place : 4 = 0;
  // Position in eviction order across a tenant's lanes (MemoryTier::next_stamp_): a block
  // queued at the back takes the next stamp, one queued just ahead of its parent the one below
  // the parent's.
  uint64_t stamp = 0;
};

// Every G2 block pays for each byte here (`kvtier bench`, "Index memory").
static_assert(sizeof(Entry) == 104,
              "Entry grew: say why in docs/store.md, \"What the Store costs\"");

inline constexpr uint8_t kEntryMultiExtent = 1;  // More pieces in MemoryTier's side table.
inline constexpr uint8_t kEntryDataFreed = 2;    // Extents already returned to the allocator.
inline constexpr uint8_t kEntryLongChain = 4;    // A chain of min_prefix_blocks passes through.
inline constexpr uint8_t kEntryDemoting = 8;     // Evicted, being written to G3; still readable.
inline constexpr uint8_t kEntryInShared = 16;    // Read from G4 (BlockMeta::in_shared).
inline constexpr uint8_t kEntryWasReused = 32;   // Has been in the reused queue.
inline constexpr uint8_t kEntryNeedsState = 64;  // BlockRole::kKvNeedsState.
inline constexpr uint8_t kEntryStateValue = 128; // BlockRole::kState.

inline constexpr uint8_t kPolicyRevisited = 1;     // Read or matched since it was put.
inline constexpr uint8_t kPolicyNoResume = 2;      // KV needing state that lost its state.
inline constexpr uint8_t kPolicyBranched = 4;      // Has had two children at once.
inline constexpr uint8_t kPolicyFinished = 8;      // Its session was hinted finished.
inline constexpr uint8_t kPolicyBits = 15;         // Every kPolicy* bit: Entry::policy's 4.
// Entry::turn_place of a turn's 16th block and later: the tail of a long turn.
inline constexpr uint8_t kTurnTail = 15;

// An intrusive list of entries, oldest first.
struct EntryList {
  uint32_t head = kNil;
  uint32_t tail = kNil;
  uint32_t count = 0;
  uint64_t pages = 0;  // Sum of the pages of the entries in the list.
};

class EntryTable {
 public:
  EntryTable();

  // A default-initialised entry, not indexed and in no list.
  uint32_t NewEntry();
  // Returns the entry to the pool. REQUIRES: not indexed, not in a list.
  void FreeEntry(uint32_t index);

  Entry& at(uint32_t index) { return chunks_[index >> kChunkShift][index & kChunkMask]; }
  const Entry& at(uint32_t index) const {
    return chunks_[index >> kChunkShift][index & kChunkMask];
  }

  // kNil when absent.
  uint32_t Find(uint32_t tenant, const BlockKey& key) const;
  // REQUIRES: no indexed entry has the same (tenant, key).
  void Index(uint32_t index);
  // REQUIRES: the entry is indexed.
  void Unindex(uint32_t index);
  size_t indexed() const { return indexed_; }

  // A list threads entries through one pair of links: the queue's (prev, next) by default.
  template <uint32_t Entry::*kPrev = &Entry::prev, uint32_t Entry::*kNext = &Entry::next>
  void PushBack(EntryList* list, uint32_t index, uint32_t pages);
  // Links `index` just ahead of `before`, which must be in `list`.
  template <uint32_t Entry::*kPrev = &Entry::prev, uint32_t Entry::*kNext = &Entry::next>
  void InsertBefore(EntryList* list, uint32_t before, uint32_t index, uint32_t pages);
  template <uint32_t Entry::*kPrev = &Entry::prev, uint32_t Entry::*kNext = &Entry::next>
  void Remove(EntryList* list, uint32_t index, uint32_t pages);

  // Entries ever handed out: indices [0, high_water()) may be passed to at() (check state).
  uint32_t high_water() const { return next_unused_; }

  // Heap bytes held by the pool and the hash table.
  size_t MemoryUsage() const;

 private:
  static constexpr uint32_t kChunkShift = 12;
  static constexpr uint32_t kChunkSize = 1u << kChunkShift;
  static constexpr uint32_t kChunkMask = kChunkSize - 1;

  size_t Home(uint32_t tenant, const BlockKey& key) const;
  void Grow();

  std::vector<std::unique_ptr<Entry[]>> chunks_;
  uint32_t next_unused_ = 0;     // Entries [0, next_unused_) have been handed out at least once.
  uint32_t free_head_ = kNil;
  std::vector<uint32_t> slots_;  // Entry indices; kNil = empty. Size is a power of two.
  size_t indexed_ = 0;
};

template <uint32_t Entry::*kPrev, uint32_t Entry::*kNext>
void EntryTable::PushBack(EntryList* list, uint32_t index, uint32_t pages) {
  Entry& e = at(index);
  e.*kPrev = list->tail;
  e.*kNext = kNil;
  if (list->tail != kNil) {
    at(list->tail).*kNext = index;
  } else {
    list->head = index;
  }
  list->tail = index;
  ++list->count;
  list->pages += pages;
}

template <uint32_t Entry::*kPrev, uint32_t Entry::*kNext>
void EntryTable::InsertBefore(EntryList* list, uint32_t before, uint32_t index,
                              uint32_t pages) {
  Entry& e = at(index);
  Entry& b = at(before);
  e.*kPrev = b.*kPrev;
  e.*kNext = before;
  if (b.*kPrev != kNil) {
    at(b.*kPrev).*kNext = index;
  } else {
    list->head = index;
  }
  b.*kPrev = index;
  ++list->count;
  list->pages += pages;
}

template <uint32_t Entry::*kPrev, uint32_t Entry::*kNext>
void EntryTable::Remove(EntryList* list, uint32_t index, uint32_t pages) {
  Entry& e = at(index);
  if (e.*kPrev != kNil) {
    at(e.*kPrev).*kNext = e.*kNext;
  } else {
    list->head = e.*kNext;
  }
  if (e.*kNext != kNil) {
    at(e.*kNext).*kPrev = e.*kPrev;
  } else {
    list->tail = e.*kPrev;
  }
  e.*kPrev = e.*kNext = kNil;
  --list->count;
  list->pages -= pages;
}

}  // namespace kvtier

#endif  // KVTIER_TIER_MEMORY_ENTRY_TABLE_H_
