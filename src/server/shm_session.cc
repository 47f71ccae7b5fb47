#include "src/server/shm_session.h"

#include <algorithm>
#include <string>
#include <utility>

#include "src/common/copy.h"

namespace kvtier::server {

Result<std::unique_ptr<ShmSession>> ShmSession::Create(Store* store, TenantId tenant,
                                                       const SharedArena& arena,
                                                       uint32_t page_bytes, const Limits& limits) {
  if (page_bytes == 0 || limits.staging_bytes < page_bytes ||
      limits.staging_bytes / page_bytes > UINT32_MAX) {
    return Status::InvalidArgument("staging of " + std::to_string(limits.staging_bytes) +
                                   " bytes in pages of " + std::to_string(page_bytes));
  }
  const uint64_t bytes = limits.staging_bytes / page_bytes * page_bytes;
  Result<std::unique_ptr<Arena>> staging = Arena::Create(1, bytes);
  if (!staging.ok()) return staging.status();
  return std::unique_ptr<ShmSession>(
      new ShmSession(store, tenant, arena, page_bytes, limits, std::move(staging).value()));
}

ShmSession::ShmSession(Store* store, TenantId tenant, const SharedArena& arena,
                       uint32_t page_bytes, const Limits& limits, std::unique_ptr<Arena> staging)
    : store_(store),
      tenant_(tenant),
      arena_(arena),
      page_bytes_(page_bytes),
      limits_(limits),
      staging_(std::move(staging)),
      staging_pages_(static_cast<uint32_t>(staging_->region_bytes() / page_bytes)) {}

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

Status ShmSession::Release(uint64_t id) {
  if (leases_.erase(id) != 0) return Status::OK();
  for (auto it = reservations_.begin(); it != reservations_.end(); ++it) {
    if (it->second.id == id) {
      staging_pages_.Free(it->second.pages);
      reservations_.erase(it);
      return Status::OK();
    }
  }
  return Status::NotFound("no lease or reservation " + std::to_string(id) + " on this connection");
}

Result<protocol::ShmReservation> ShmSession::Reserve(uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("a buffer of 0 bytes");
  if (reservations_.size() >= limits_.max_reservations) {
    return Status::ResourceExhausted("this connection already holds max_reservations (" +
                                     std::to_string(limits_.max_reservations) +
                                     ") staging buffers: release some first");
  }
  const uint64_t pages = bytes / page_bytes_ + (bytes % page_bytes_ != 0);
  std::vector<Extent> run;
  if (pages > staging_pages_.largest_free_run() ||
      !staging_pages_.Allocate(static_cast<uint32_t>(pages), &run)) {
    return Status::ResourceExhausted(
        "this connection's staging file (" + std::to_string(staging_->region_bytes()) +
        " bytes) has no free run of " + std::to_string(bytes) +
        " bytes: release buffers, or commit or abort allocations, first");
  }
  // One run: the best-fitting free run is taken whole when one is large enough.
  const uint64_t offset = uint64_t{run[0].first_page} * page_bytes_;
  const uint64_t id = next_id_++;
  reservations_.emplace(offset, Reserved{id, run[0]});
  return protocol::ShmReservation{id, offset};
}

bool ShmSession::InReservation(uint64_t offset, uint64_t size) const {
  auto it = reservations_.upper_bound(offset);
  if (it == reservations_.begin()) return false;
  --it;
  const uint64_t end = it->first + uint64_t{it->second.pages.num_pages} * page_bytes_;
  return offset < end && size <= end - offset;
}

std::vector<Status> ShmSession::Put(std::span<const protocol::ShmPutItem> items) {
  std::vector<Status> out(items.size());
  std::vector<BlockWrite> writes;
  std::vector<size_t> index;
  writes.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const protocol::ShmPutItem& item = items[i];
    if (!InReservation(item.offset, item.entry.size)) {
      out[i] = Status::InvalidArgument(
          "bytes [" + std::to_string(item.offset) + ", +" + std::to_string(item.entry.size) +
          ") of the staging file are not inside one buffer reserved with SHM_RESERVE");
      continue;
    }
    // The client may still be writing them: the block is what they hold at the copy, and
    // nothing can change it afterwards.
    writes.push_back({item.entry.key,
                      {staging_->base(0) + item.offset, item.entry.size},
                      item.entry.parent,
                      item.entry.session,
                      item.entry.dtype});
    index.push_back(i);
  }
  if (writes.empty()) return out;
  std::vector<Status> stored = store_->PutMany(tenant_, writes);
  for (size_t k = 0; k < index.size(); ++k) out[index[k]] = std::move(stored[k]);
  return out;
}

Result<uint64_t> ShmSession::Allocate(const protocol::PutEntry& entry,
                                      std::vector<protocol::ShmExtent>* extents) {
  if (allocations_.size() >= limits_.max_allocations) {
    return Status::ResourceExhausted("this connection already holds max_allocations (" +
                                     std::to_string(limits_.max_allocations) +
                                     ") uncommitted allocations: commit or abort some first");
  }
  Result<BlockAllocation> allocation =
      store_->Allocate(tenant_, entry.key, entry.size, entry.parent);
  if (!allocation.ok()) return allocation.status();
  const uint64_t pages = (entry.size + page_bytes_ - 1) / page_bytes_;
  if (pages > staging_pages_.free_pages()) {
    return Status::ResourceExhausted(
        "this connection's staging file (" + std::to_string(staging_->region_bytes()) +
        " bytes) is full: commit or abort some allocations first");
  }
  std::vector<Extent> staged;
  staging_pages_.Allocate(static_cast<uint32_t>(pages), &staged);
  extents->clear();
  uint64_t left = entry.size;
  for (const Extent& x : staged) {
    const uint64_t n = std::min<uint64_t>(left, uint64_t{x.num_pages} * page_bytes_);
    extents->push_back({uint64_t{x.first_page} * page_bytes_, n});
    left -= n;
  }
  const uint64_t id = next_id_++;
  allocations_.emplace(id, PendingPut{std::move(allocation).value(),
                                      {entry.parent, entry.session, entry.dtype},
                                      std::move(staged)});
  return id;
}

void ShmSession::Unstage(const std::vector<Extent>& staged) {
  // The pages keep their memory for the connection's next puts (no page faults, no zeroing):
  // the staging file holds at most what the connection's allocations have needed at once.
  for (const Extent& x : staged) staging_pages_.Free(x);
}

Status ShmSession::Commit(uint64_t allocation) {
  auto it = allocations_.find(allocation);
  if (it == allocations_.end()) {
    return Status::NotFound("no allocation " + std::to_string(allocation) + " on this connection");
  }
  PendingPut put = std::move(it->second);
  allocations_.erase(it);
  // The staged bytes, in order, into the allocation's pieces. The client may still be writing
  // them: the block is what they hold at this copy, and nothing can change it afterwards.
  std::vector<std::span<const std::byte>> from;
  uint64_t left = put.allocation.size();
  for (const Extent& x : put.staged) {
    const uint64_t n = std::min<uint64_t>(left, uint64_t{x.num_pages} * page_bytes_);
    from.emplace_back(staging_->base(0) + uint64_t{x.first_page} * page_bytes_, n);
    left -= n;
  }
  size_t f = 0;
  size_t f_off = 0;
  for (std::span<std::byte> to : put.allocation.extents()) {
    size_t done = 0;
    while (done < to.size()) {
      const size_t n = std::min(to.size() - done, from[f].size() - f_off);
      CopyBytesUncached(to.data() + done, from[f].data() + f_off, n);
      done += n;
      f_off += n;
      if (f_off == from[f].size()) {
        ++f;
        f_off = 0;
      }
    }
  }
  Unstage(put.staged);
  return store_->Commit(std::move(put.allocation), put.options);
}

Status ShmSession::Abort(uint64_t allocation) {
  auto it = allocations_.find(allocation);
  if (it == allocations_.end()) {
    return Status::NotFound("no allocation " + std::to_string(allocation) + " on this connection");
  }
  Unstage(it->second.staged);
  allocations_.erase(it);
  return Status::OK();
}

}  // namespace kvtier::server
