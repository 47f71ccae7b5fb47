#include "src/tier/memory/memory_tier.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace kvtier {
namespace {
constexpr uint8_t kMaxFreq = 3;
}  // namespace

Result<std::unique_ptr<MemoryTier>> MemoryTier::Open(const MemoryTierOptions& options,
                                                     bool payload_free,
                                                     std::vector<TenantConfig> tenants,
                                                     Env* env) {
  std::unique_ptr<Arena> arena;
  if (!payload_free) {
    Result<std::unique_ptr<Arena>> created =
        Arena::Create(options.capacity_bytes, options.prefault);
    if (!created.ok()) return created.status();
    arena = std::move(created).value();
  }
  return std::unique_ptr<MemoryTier>(new MemoryTier(std::move(arena), options.capacity_bytes,
                                                    options.page_bytes,
                                                    options.small_queue_fraction,
                                                    std::move(tenants), env));
}

MemoryTier::MemoryTier(std::unique_ptr<Arena> arena, uint64_t capacity_bytes,
                       uint32_t page_bytes, double small_fraction,
                       std::vector<TenantConfig> tenants, Env* env)
    : arena_(std::move(arena)),
      capacity_bytes_(capacity_bytes),
      page_bytes_(page_bytes),
      small_fraction_(small_fraction),
      env_(env),
      allocator_(static_cast<uint32_t>(capacity_bytes / page_bytes)) {
  MutexLock l(&mu_);
  tenants_.resize(tenants.size());
  for (size_t i = 0; i < tenants.size(); ++i) {
    TenantState& t = tenants_[i];
    t.config = std::move(tenants[i]);
    t.budget_pages = t.config.budget_bytes / page_bytes_;
    t.stats.name = t.config.name;
    t.stats.memory_budget_bytes = t.config.budget_bytes;
  }
}

MemoryTier::~MemoryTier() = default;

EntryList* MemoryTier::QueueOf(const Entry& e) {
  TenantState& t = tenants_[e.tenant];
  switch (e.queue) {
    case QueueId::kSmall: return &t.small;
    case QueueId::kMain: return &t.main;
    case QueueId::kNone: return nullptr;
  }
  return nullptr;
}

void MemoryTier::Dequeue(uint32_t index) {
  Entry& e = table_.at(index);
  if (EntryList* q = QueueOf(e)) table_.Remove(q, index, PagesFor(e.size));
  e.queue = QueueId::kNone;
}

void MemoryTier::Enqueue(uint32_t index, QueueId queue) {
  Entry& e = table_.at(index);
  e.queue = queue;
  EntryList* q = QueueOf(e);
  // A chain's later block goes just ahead of its parent in the same queue, so FIFO order
  // reaches the tail of a chain before its head.
  if (e.parent != kNil && table_.at(e.parent).state == EntryState::kResident &&
      table_.at(e.parent).queue == queue) {
    table_.InsertBefore(q, e.parent, index, PagesFor(e.size));
  } else {
    table_.PushBack(q, index, PagesFor(e.size));
  }
}

bool MemoryTier::Expired(const Entry& e, uint64_t now) const {
  uint64_t ttl = tenants_[e.tenant].config.ttl_us;
  return ttl != 0 && e.pins == 0 && now > e.last_access_us && now - e.last_access_us > ttl;
}

void MemoryTier::Touch(Entry& e, uint64_t now) {
  if (e.freq < kMaxFreq) ++e.freq;
  e.last_access_us = std::max(e.last_access_us, now);
}

uint32_t MemoryTier::FindLive(uint32_t tenant, const BlockKey& key, uint64_t now) {
  uint32_t idx = table_.Find(tenant, key);
  if (idx != kNil && Expired(table_.at(idx), now)) {
    Detach(idx, DetachReason::kExpired);
    return kNil;
  }
  return idx;
}

Status MemoryTier::Put(uint32_t tenant, const BlockKey& key, std::span<const std::byte> value,
                       const BlockKey* parent) {
  const uint32_t pages = PagesFor(value.size());
  std::vector<Extent> extents;
  {
    MutexLock l(&mu_);
    const uint64_t now = env_->NowMicros();
    TenantState& t = tenants_[tenant];
    uint32_t existing = FindLive(tenant, key, now);
    if (existing != kNil) {
      Touch(table_.at(existing), now);
      ++t.stats.duplicate_puts;
      return Status::OK();
    }
    Status s = MakeRoom(tenant, pages, now);
    if (!s.ok()) {
      ++t.stats.rejected_puts;
      return s;
    }
    allocator_.Allocate(pages, &extents);  // MakeRoom guaranteed the pages are free.
    t.used_pages += pages;
  }

  CopyIn(extents, value);

  MutexLock l(&mu_);
  const uint64_t now = env_->NowMicros();
  TenantState& t = tenants_[tenant];
  if (FindLive(tenant, key, now) != kNil) {
    // A concurrent put of the same key committed first; blocks are immutable, keep that one.
    FreeExtents(tenant, extents);
    ++t.stats.duplicate_puts;
    return Status::OK();
  }
  uint32_t idx = table_.NewEntry();
  Entry& e = table_.at(idx);
  e.key = key;
  e.tenant = tenant;
  e.size = static_cast<uint32_t>(value.size());
  e.extent = extents[0];
  e.last_access_us = now;
  e.state = EntryState::kResident;
  if (extents.size() > 1) {
    e.flags |= kEntryMultiExtent;
    more_extents_.emplace(idx, std::vector<Extent>(extents.begin() + 1, extents.end()));
  }
  if (parent != nullptr) {
    uint32_t p = table_.Find(tenant, *parent);
    if (p != kNil) {
      e.parent = p;
      ++table_.at(p).children;
    }
  }
  table_.Index(idx);
  ++t.stats.blocks;
  Enqueue(idx, t.ghost.Contains(key.Hash64()) ? QueueId::kMain : QueueId::kSmall);
  ++t.stats.puts;
  t.stats.put_bytes += value.size();
  return Status::OK();
}

void MemoryTier::CopyIn(const std::vector<Extent>& extents,
                        std::span<const std::byte> value) const {
  if (!arena_) return;
  size_t offset = 0;
  for (const Extent& x : extents) {
    size_t n = std::min<size_t>(value.size() - offset, uint64_t{x.num_pages} * page_bytes_);
    std::memcpy(arena_->base() + uint64_t{x.first_page} * page_bytes_, value.data() + offset, n);
    offset += n;
  }
}

Status MemoryTier::MakeRoom(uint32_t tenant, uint32_t pages, uint64_t now) {
  TenantState& t = tenants_[tenant];
  if (pages > allocator_.total_pages()) {
    return Status::InvalidArgument("block of " + std::to_string(uint64_t{pages} * page_bytes_) +
                                   " bytes exceeds the G2 capacity of " +
                                   std::to_string(capacity_bytes_) + " bytes");
  }
  if (t.budget_pages != 0 && pages > t.budget_pages) {
    return Status::InvalidArgument("block of " + std::to_string(uint64_t{pages} * page_bytes_) +
                                   " bytes exceeds tenant '" + t.config.name +
                                   "' G2 budget of " + std::to_string(t.config.budget_bytes) +
                                   " bytes");
  }
  while (t.budget_pages != 0 && t.used_pages + pages > t.budget_pages) {
    if (!EvictOne(tenant, now)) {
      return Status::ResourceExhausted("tenant '" + t.config.name +
                                       "' is at its G2 budget and every block it holds is "
                                       "pinned, leased or a prefix of one");
    }
  }
  while (allocator_.free_pages() < pages) {
    // Evict from the tenant using the largest share of its budget that can give something up.
    std::vector<std::pair<double, uint32_t>> order;
    for (uint32_t i = 0; i < tenants_.size(); ++i) {
      const TenantState& v = tenants_[i];
      if (v.small.count + v.main.count == 0) continue;
      double limit = v.budget_pages ? double(v.budget_pages) : double(allocator_.total_pages());
      order.emplace_back(double(v.used_pages) / limit, i);
    }
    std::sort(order.begin(), order.end(), std::greater<>());
    bool evicted = false;
    for (const auto& [share, victim] : order) {
      if (EvictOne(victim, now)) {
        evicted = true;
        break;
      }
    }
    if (!evicted) {
      return Status::ResourceExhausted(
          "G2 is full and every block in it is pinned, leased or a prefix of one");
    }
  }
  return Status::OK();
}

bool MemoryTier::EvictOne(uint32_t tenant, uint64_t now) {
  TenantState& t = tenants_[tenant];
  // Each entry is re-queued at most kMaxFreq + 2 times before it must be evicted or is known
  // to be unevictable (leased, or a parent of a resident block); bound the scan accordingly.
  uint64_t budget = uint64_t{t.small.count + t.main.count} * (kMaxFreq + 2) + 1;
  while (budget-- > 0 && t.small.count + t.main.count > 0) {
    uint64_t small_target = static_cast<uint64_t>(double(t.used_pages) * small_fraction_);
    bool from_small = t.small.count > 0 && (t.small.pages > small_target || t.main.count == 0);
    uint32_t idx = from_small ? t.small.head : t.main.head;
    Entry& e = table_.at(idx);
    if (Expired(e, now) && e.readers == 0) {
      Detach(idx, DetachReason::kExpired);
      return true;
    }
    if (from_small) {
      if (e.freq > 0 || e.readers > 0 || e.children > 0) {
        // Read again while on probation (or still needed): promote to main.
        Dequeue(idx);
        e.freq = 0;
        Enqueue(idx, QueueId::kMain);
        continue;
      }
      t.ghost.Insert(e.key.Hash64(), t.main.count);
    } else if (e.freq > 0 || e.readers > 0 || e.children > 0) {
      if (e.freq > 0) --e.freq;
      Dequeue(idx);
      Enqueue(idx, QueueId::kMain);
      continue;
    }
    Detach(idx, DetachReason::kEvicted);
    return true;
  }
  return false;
}

void MemoryTier::Detach(uint32_t index, DetachReason reason) {
  Entry& e = table_.at(index);
  TenantState& t = tenants_[e.tenant];
  Dequeue(index);
  table_.Unindex(index);
  e.state = EntryState::kDetached;
  --t.stats.blocks;
  if (e.pins > 0) --t.stats.pinned_blocks;
  e.pins = 0;
  switch (reason) {
    case DetachReason::kEvicted: ++t.stats.evictions; break;
    case DetachReason::kExpired: ++t.stats.expirations; break;
    case DetachReason::kDeleted: ++t.stats.deletes; break;
  }
  Reclaim(index);
}

void MemoryTier::Reclaim(uint32_t index) {
  while (index != kNil) {
    Entry& e = table_.at(index);
    if (e.state != EntryState::kDetached || e.readers > 0) return;
    if ((e.flags & kEntryDataFreed) == 0) {
      std::vector<Extent> extents{e.extent};
      if (e.flags & kEntryMultiExtent) {
        auto it = more_extents_.find(index);
        extents.insert(extents.end(), it->second.begin(), it->second.end());
        more_extents_.erase(it);
      }
      FreeExtents(e.tenant, extents);
      e.flags = kEntryDataFreed;
    }
    if (e.children > 0) return;
    uint32_t parent = e.parent;
    table_.FreeEntry(index);
    if (parent == kNil) return;
    --table_.at(parent).children;
    index = parent;
  }
}

void MemoryTier::FreeExtents(uint32_t tenant, const std::vector<Extent>& extents) {
  for (const Extent& x : extents) {
    allocator_.Free(x);
    tenants_[tenant].used_pages -= x.num_pages;
  }
}

std::vector<std::span<const std::byte>> MemoryTier::Spans(uint32_t index) const {
  const Entry& e = table_.at(index);
  std::vector<std::span<const std::byte>> spans;
  if (!arena_) return spans;
  size_t remaining = e.size;
  auto add = [&](const Extent& x) {
    size_t n = std::min<size_t>(remaining, uint64_t{x.num_pages} * page_bytes_);
    spans.emplace_back(arena_->base() + uint64_t{x.first_page} * page_bytes_, n);
    remaining -= n;
  };
  add(e.extent);
  if (e.flags & kEntryMultiExtent) {
    for (const Extent& x : more_extents_.at(index)) add(x);
  }
  return spans;
}

Result<BlockHandle> MemoryTier::Acquire(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  TenantState& t = tenants_[tenant];
  uint32_t idx = FindLive(tenant, key, env_->NowMicros());
  if (idx == kNil) {
    ++t.stats.misses;
    return Status::NotFound("block not in G2");
  }
  Entry& e = table_.at(idx);
  if (e.readers == UINT16_MAX) {
    return Status::ResourceExhausted("too many concurrent read leases on one block");
  }
  ++e.readers;
  Touch(e, env_->NowMicros());
  ++t.stats.hits;
  t.stats.get_bytes += e.size;
  return BlockHandle(this, idx, e.size, Spans(idx));
}

void MemoryTier::ReleaseLease(uint32_t entry) {
  MutexLock l(&mu_);
  --table_.at(entry).readers;
  Reclaim(entry);
}

size_t MemoryTier::LookupPrefix(uint32_t tenant, std::span<const BlockKey> keys) {
  MutexLock l(&mu_);
  const uint64_t now = env_->NowMicros();
  TenantState& t = tenants_[tenant];
  size_t found = 0;
  for (const BlockKey& key : keys) {
    uint32_t idx = FindLive(tenant, key, now);
    if (idx == kNil) break;
    Touch(table_.at(idx), now);
    ++found;
  }
  t.stats.hits += found;
  if (found < keys.size()) ++t.stats.misses;
  return found;
}

Status MemoryTier::Erase(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  uint32_t idx = FindLive(tenant, key, env_->NowMicros());
  if (idx == kNil) return Status::NotFound("block not in G2");
  Detach(idx, DetachReason::kDeleted);
  return Status::OK();
}

Status MemoryTier::Pin(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  const uint64_t now = env_->NowMicros();
  uint32_t idx = FindLive(tenant, key, now);
  if (idx == kNil) return Status::NotFound("block not in G2");
  Entry& e = table_.at(idx);
  if (e.pins == UINT16_MAX) return Status::ResourceExhausted("pin count of the block overflows");
  if (e.pins++ == 0) {
    Dequeue(idx);
    ++tenants_[tenant].stats.pinned_blocks;
  }
  Touch(e, now);
  return Status::OK();
}

Status MemoryTier::Unpin(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  const uint64_t now = env_->NowMicros();
  uint32_t idx = FindLive(tenant, key, now);
  if (idx == kNil) return Status::NotFound("block not in G2");
  Entry& e = table_.at(idx);
  if (e.pins == 0) return Status::FailedPrecondition("block is not pinned");
  if (--e.pins == 0) {
    --tenants_[tenant].stats.pinned_blocks;
    // TTL counts from the unpin, not from before the pin.
    e.last_access_us = std::max(e.last_access_us, now);
    Enqueue(idx, QueueId::kMain);
  }
  return Status::OK();
}

size_t MemoryTier::PurgeExpired() {
  MutexLock l(&mu_);
  const uint64_t now = env_->NowMicros();
  size_t purged = 0;
  for (TenantState& t : tenants_) {
    if (t.config.ttl_us == 0) continue;
    for (EntryList* q : {&t.small, &t.main}) {
      for (uint32_t idx = q->head; idx != kNil;) {
        uint32_t next = table_.at(idx).next;
        if (Expired(table_.at(idx), now)) {
          Detach(idx, DetachReason::kExpired);
          ++purged;
        }
        idx = next;
      }
    }
  }
  return purged;
}

TenantStats MemoryTier::StatsForTenant(uint32_t tenant) const {
  MutexLock l(&mu_);
  const TenantState& t = tenants_[tenant];
  TenantStats s = t.stats;
  s.bytes = t.used_pages * page_bytes_;
  return s;
}

void MemoryTier::FillStats(StoreStats* stats) const {
  MutexLock l(&mu_);
  stats->memory_capacity_bytes = capacity_bytes_;
  stats->memory_free_bytes = uint64_t{allocator_.free_pages()} * page_bytes_;
  stats->memory_used_bytes = stats->memory_capacity_bytes - stats->memory_free_bytes;
  stats->memory_largest_free_extent_bytes = uint64_t{allocator_.largest_free_run()} * page_bytes_;
  stats->blocks = table_.indexed();
  stats->multi_extent_blocks = more_extents_.size();
  size_t bytes = table_.MemoryUsage() + allocator_.MemoryUsage();
  for (const TenantState& t : tenants_) bytes += t.ghost.MemoryUsage();
  stats->index_bytes = bytes;
}

}  // namespace kvtier
