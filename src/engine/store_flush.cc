// Store::Flush: a tenant's G2 blocks written through to G3, so that a put can be made durable
// on request (docs/operations.md, "What survives what").

#include <vector>

#include "src/engine/contiguous_bytes.h"
#include "src/engine/store_impl.h"

namespace kvtier {
namespace {
// Blocks per DiskTier::PutMany: several writes in flight, a bounded number of leases held.
constexpr size_t kFlushBatch = 32;
}  // namespace

Result<uint64_t> StoreImpl::Flush(TenantId tenant) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  if (!disk_) return Status::FailedPrecondition("flush needs a G3 tier ([disk] dir)");
  const std::vector<BlockKey> keys = memory_->ResidentKeys(tenant.value);
  uint64_t written = 0;
  Status first_error;
  for (size_t begin = 0; begin < keys.size(); begin += kFlushBatch) {
    std::vector<BlockHandle> leases;
    std::vector<std::vector<std::byte>> joined;
    std::vector<DiskTier::PutRequest> requests;
    leases.reserve(kFlushBatch);
    joined.reserve(kFlushBatch);
    for (size_t i = begin; i < keys.size() && i < begin + kFlushBatch; ++i) {
      if (disk_->BlockSize(tenant.value, keys[i]).ok()) continue;  // G3 has it already.
      BlockMeta meta;
      Result<BlockHandle> lease = memory_->LeaseForCopy(tenant.value, keys[i], &meta);
      if (!lease.ok()) continue;  // Evicted or deleted since: nothing left to keep.
      leases.push_back(std::move(lease).value());
      requests.push_back({keys[i], ContiguousBytes(leases.back().extents(), &joined),
                          meta.session, meta.created_us, meta.dtype});
    }
    if (requests.empty()) continue;
    std::vector<Status> results = disk_->PutMany(tenant.value, requests);
    for (const Status& s : results) {
      if (s.ok()) {
        ++written;
      } else if (first_error.ok()) {
        first_error = s;
      }
    }
  }
  if (!first_error.ok()) {
    return Status(first_error.code(), "flush wrote " + std::to_string(written) +
                                          " blocks to G3, then: " + std::string(first_error.message()));
  }
  return written;
}

}  // namespace kvtier
