#include "src/server/put_in_place.h"

#include <utility>

namespace kvtier::server {

InPlacePut::InPlacePut(Store* store, TenantId tenant, std::vector<protocol::PutEntry> entries)
    : store_(store), tenant_(tenant), entries_(std::move(entries)), statuses_(entries_.size()) {}

std::span<std::byte> InPlacePut::Target() {
  const protocol::PutEntry& e = entries_[entry_];
  if (!started_) {
    started_ = true;
    piece_ = 0;
    Result<BlockAllocation> a = store_->Allocate(tenant_, e.key, e.size, e.parent);
    if (a.ok()) {
      allocation_ = std::move(a).value();
    } else if (a.status().code() != StatusCode::kAlreadyExists) {
      statuses_[entry_] = a.status();
    }
  }
  if (allocation_.valid()) return allocation_.extents()[piece_];
  return {static_cast<std::byte*>(nullptr), e.size};
}

void InPlacePut::Filled() {
  const protocol::PutEntry& e = entries_[entry_];
  if (allocation_.valid()) {
    if (++piece_ < allocation_.extents().size()) return;
    statuses_[entry_] =
        store_->Commit(std::move(allocation_), {e.parent, e.session, e.dtype, e.engine_hash, e.role});
  }
  started_ = false;
  ++entry_;
}

}  // namespace kvtier::server
