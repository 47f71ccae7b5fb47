// MemoryTier: atomic batch puts and batch presence, for state beside KV (docs/state.md).

#include <string>
#include <utility>

#include "src/tier/memory/memory_tier.h"

namespace kvtier {

Status MemoryTier::PutAll(uint32_t tenant, std::span<const BlockWrite> writes) {
  std::vector<std::vector<Extent>> extents(writes.size());
  std::vector<Extent> to_back;
  std::vector<bool> resident(writes.size(), false);
  std::vector<uint32_t> held;  // Resident blocks of the batch, leased while the rest is placed.
  {
    MutexLock l(&mu_);
    // A batch that cannot fit at all is refused before anything is evicted for it.
    uint64_t pages = 0;
    for (const BlockWrite& w : writes) pages += PagesFor(w.value.size());
    const uint64_t budget = tenants_[tenant].budget_pages;
    if (pages > total_pages_ || (budget != 0 && pages > budget)) {
      return Status::InvalidArgument(
          "atomic put of " + std::to_string(pages * page_bytes_) + " bytes exceeds " +
          (budget != 0 && budget < total_pages_ ? "tenant '" + tenants_[tenant].config.name +
                                                      "' G2 budget"
                                                : std::string("the G2 capacity")));
    }
    for (size_t i = 0; i < writes.size(); ++i) {
      const BlockWrite& w = writes[i];
      Status s = AllocateFor(tenant, w.key, PagesFor(w.value.size()), &extents[i], &to_back,
                             w.parent ? &*w.parent : nullptr);
      if (s.code() == StatusCode::kAlreadyExists) {
        const uint32_t idx = table_.Find(tenant, w.key);
        if (table_.at(idx).readers == UINT16_MAX) {
          EndBatch(tenant, &extents, &held);
          return Status::ResourceExhausted("too many concurrent read leases on one block");
        }
        ++table_.at(idx).readers;  // Room for the others must not come from it.
        held.push_back(idx);
        resident[i] = true;
        continue;
      }
      if (!s.ok()) {
        EndBatch(tenant, &extents, &held);
        return s;
      }
    }
  }
  // Outside the lock: nobody else sees these pages yet.
  for (const Extent& x : to_back) {
    Status backed = arena_->Back(tenant, uint64_t{x.first_page} * page_bytes_,
                                 uint64_t{x.num_pages} * page_bytes_);
    if (!backed.ok()) {
      MutexLock l(&mu_);
      EndBatch(tenant, &extents, &held);
      ++tenants_[tenant].stats.rejected_puts;
      return backed;
    }
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    if (!resident[i]) CopyIn(tenant, extents[i], writes[i].value);
  }
  MutexLock l(&mu_);
  for (size_t i = 0; i < writes.size(); ++i) {
    if (resident[i]) continue;
    const BlockWrite& w = writes[i];
    Publish(tenant, w.key, w.value.size(), std::exchange(extents[i], {}),
            w.parent ? &*w.parent : nullptr, {w.session, 0, w.dtype, false, w.engine_hash, w.role});
  }
  EndBatch(tenant, &extents, &held);
  return Status::OK();
}

void MemoryTier::EndBatch(uint32_t tenant, std::vector<std::vector<Extent>>* extents,
                          std::vector<uint32_t>* held) {
  for (std::vector<Extent>& x : *extents) {
    FreeExtents(tenant, x);
    x.clear();
  }
  for (uint32_t idx : *held) {
    --table_.at(idx).readers;
    Reclaim(idx);
  }
  held->clear();
}

std::vector<bool> MemoryTier::Present(uint32_t tenant, std::span<const BlockKey> keys,
                                      bool access) {
  MutexLock l(&mu_);
  const uint32_t now = NowSeconds();
  std::vector<bool> found(keys.size(), false);
  std::vector<uint32_t> entries(keys.size(), kNil);
  for (size_t i = 0; i < keys.size(); ++i) {
    entries[i] = FindLive(tenant, keys[i], now);
    found[i] = entries[i] != kNil;
  }
  if (!access) return found;
  uint64_t hits = 0;
  for (size_t i = keys.size(); i-- > 0;) {
    if (entries[i] == kNil) continue;
    Touch(entries[i], now);
    ++hits;
  }
  tenants_[tenant].stats.hits += hits;
  return found;
}

}  // namespace kvtier
