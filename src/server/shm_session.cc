#include "src/server/shm_session.h"

#include <string>
#include <utility>

namespace kvtier::server {

ShmSession::ShmSession(Store* store, const SharedArena& arena, const Limits& limits)
    : store_(store), arena_(arena), limits_(limits) {}

ShmSession::~ShmSession() {
  // Dropping the handles ends the leases; dropping the allocations gives their space back.
  leases_.clear();
  allocations_.clear();
}

bool ShmSession::ToExtents(std::span<const std::span<const std::byte>> spans,
                           std::vector<protocol::ShmExtent>* extents) const {
  extents->clear();
  extents->reserve(spans.size());
  const auto base = reinterpret_cast<uintptr_t>(arena_.base);
  for (std::span<const std::byte> s : spans) {
    const auto p = reinterpret_cast<uintptr_t>(s.data());
    if (s.empty() || p < base || p - base > arena_.size || s.size() > arena_.size - (p - base)) {
      return false;
    }
    extents->push_back({p - base, s.size()});
  }
  return !extents->empty();
}

Result<uint64_t> ShmSession::AddLease(BlockHandle handle,
                                      std::vector<protocol::ShmExtent>* extents) {
  if (leases_.size() >= limits_.max_leases) {
    return Status::ResourceExhausted("this connection already holds max_leases (" +
                                     std::to_string(limits_.max_leases) +
                                     ") shared-memory leases: release some first");
  }
  if (!ToExtents(handle.extents(), extents)) {
    return Status::FailedPrecondition("block is not in the shared arena");
  }
  const uint64_t id = next_id_++;
  leases_.emplace(id, std::move(handle));
  return id;
}

Status ShmSession::Release(uint64_t lease) {
  if (leases_.erase(lease) == 0) {
    return Status::NotFound("no lease " + std::to_string(lease) + " on this connection");
  }
  return Status::OK();
}

Result<uint64_t> ShmSession::Allocate(TenantId tenant, const protocol::PutEntry& entry,
                                      std::vector<protocol::ShmExtent>* extents) {
  if (allocations_.size() >= limits_.max_allocations) {
    return Status::ResourceExhausted("this connection already holds max_allocations (" +
                                     std::to_string(limits_.max_allocations) +
                                     ") uncommitted allocations: commit or abort some first");
  }
  Result<BlockAllocation> allocation = store_->Allocate(tenant, entry.key, entry.size);
  if (!allocation.ok()) return allocation.status();
  std::vector<std::span<const std::byte>> spans(allocation->extents().begin(),
                                                allocation->extents().end());
  if (!ToExtents(spans, extents)) {
    return Status::Internal("the store allocated space outside its shared arena");
  }
  const uint64_t id = next_id_++;
  allocations_.emplace(
      id, PendingPut{std::move(allocation).value(), {entry.parent, entry.session, entry.dtype}});
  return id;
}

Status ShmSession::Commit(uint64_t allocation) {
  auto it = allocations_.find(allocation);
  if (it == allocations_.end()) {
    return Status::NotFound("no allocation " + std::to_string(allocation) + " on this connection");
  }
  PendingPut put = std::move(it->second);
  allocations_.erase(it);
  return store_->Commit(std::move(put.allocation), put.options);
}

Status ShmSession::Abort(uint64_t allocation) {
  if (allocations_.erase(allocation) == 0) {
    return Status::NotFound("no allocation " + std::to_string(allocation) + " on this connection");
  }
  return Status::OK();
}

}  // namespace kvtier::server
