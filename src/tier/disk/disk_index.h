// DiskIndex: the DiskTier's in-memory index, (tenant, key) -> record location, built compactly
// because a tier holds millions of blocks: entries live in one slab (96 bytes each) and the
// hash set stores only 4-byte slab indices. Each tenant's entries also form a FIFO list that
// the budget's CLOCK hand walks (second chance for entries accessed since it last passed).
//
// Thread safety: none; the DiskTier guards it with its mutex.

#ifndef KVTIER_TIER_DISK_DISK_INDEX_H_
#define KVTIER_TIER_DISK_DISK_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "kvtier/block_key.h"

namespace kvtier::disk {

inline constexpr uint32_t kNoEntry = UINT32_MAX;

struct DiskEntry {
  BlockKey key;
  uint64_t last_access_us = 0;
  uint64_t created_us = 0;     // When the block was first stored (max age).
  uint64_t session = 0;
  uint32_t segment = 0;        // Segment id.
  uint32_t offset_pages = 0;   // Record offset within the segment, in pages.
  uint32_t record_pages = 0;   // Record length, in pages.
  uint32_t value_bytes = 0;
  uint32_t stored_bytes = 0;   // Payload length on disk.
  uint32_t prev = kNoEntry;    // Tenant FIFO list.
  uint32_t next = kNoEntry;
  uint16_t tenant = 0;
  uint8_t dtype = 0;           // RecordHeader::dtype.
  bool accessed = false;       // Read or looked up since written, relocated or last passed over.
  bool in_use = false;
};

class DiskIndex {
 public:
  explicit DiskIndex(size_t tenants);
  DiskIndex(const DiskIndex&) = delete;
  DiskIndex& operator=(const DiskIndex&) = delete;

  // Slab index of the entry for (tenant, key), or kNoEntry.
  uint32_t Find(uint16_t tenant, const BlockKey& key) const;
  // Adds `entry` at the back of its tenant's list. REQUIRES: no entry for its (tenant, key).
  uint32_t Insert(const DiskEntry& entry);
  void Remove(uint32_t index);
  // Moves the entry to the back of its tenant's list.
  void MoveToBack(uint32_t index);
  // First entry of the tenant's list, or kNoEntry.
  uint32_t Front(uint16_t tenant) const { return lists_[tenant].head; }

  DiskEntry& at(uint32_t index) { return slab_[index]; }
  const DiskEntry& at(uint32_t index) const { return slab_[index]; }
  size_t size() const { return set_.size(); }
  // Slab length: entries with index < SlabSize() may be in use (check DiskEntry::in_use).
  uint32_t SlabSize() const { return static_cast<uint32_t>(slab_.size()); }
  void Reserve(size_t entries);
  // Heap bytes held by the index.
  size_t MemoryBytes() const;

 private:
  struct Probe {
    uint16_t tenant;
    const BlockKey* key;
  };
  struct SlotHash {
    using is_transparent = void;
    const std::vector<DiskEntry>* slab;
    size_t operator()(uint32_t i) const { return Mix((*slab)[i].tenant, (*slab)[i].key); }
    size_t operator()(const Probe& p) const { return Mix(p.tenant, *p.key); }
    static size_t Mix(uint16_t tenant, const BlockKey& key) {
      return static_cast<size_t>(key.Hash64() ^ (uint64_t{tenant} * 0x9e3779b97f4a7c15ULL));
    }
  };
  struct SlotEq {
    using is_transparent = void;
    const std::vector<DiskEntry>* slab;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, const Probe& p) const {
      return (*slab)[a].tenant == p.tenant && (*slab)[a].key == *p.key;
    }
    bool operator()(const Probe& p, uint32_t a) const { return (*this)(a, p); }
  };
  struct List {
    uint32_t head = kNoEntry;
    uint32_t tail = kNoEntry;
  };

  void Link(uint32_t index);
  void Unlink(uint32_t index);

  std::vector<DiskEntry> slab_;
  std::vector<uint32_t> free_;
  std::vector<List> lists_;
  absl::flat_hash_set<uint32_t, SlotHash, SlotEq> set_;
};

}  // namespace kvtier::disk

#endif  // KVTIER_TIER_DISK_DISK_INDEX_H_
