// Store::Replace: values stored under names that may change (RESP's SET), beside the
// content-addressed blocks of the rest of the Store.

#include <array>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "src/engine/store_impl.h"

namespace kvtier {

namespace {

// Whether `pieces` (spans), in order, hold the bytes of `value`.
template <typename Pieces>
bool SameBytes(const Pieces& pieces, std::span<const std::byte> value) {
  size_t offset = 0;
  for (std::span<const std::byte> piece : pieces) {
    if (offset + piece.size() > value.size() ||
        std::memcmp(piece.data(), value.data() + offset, piece.size()) != 0) {
      return false;
    }
    offset += piece.size();
  }
  return offset == value.size();
}

}  // namespace

Status StoreImpl::Replace(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
                          const PutOptions& options) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  KVTIER_RETURN_IF_ERROR(CheckValue(value));
  // Looked at without counting as an access: a SET is not a read.
  std::optional<bool> same;
  BlockMeta meta;
  if (Result<BlockHandle> held = memory_->LeaseForCopy(tenant.value, key, &meta); held.ok()) {
    same = SameBytes(held->extents(), value);
  } else if (disk_ && disk_->Describe(tenant.value, key).ok()) {
    Result<std::vector<std::byte>> stored = ReadFromDisk(tenant, key, &meta);
    same = stored.ok() && SameBytes(std::array{std::span<const std::byte>(*stored)}, value);
  }
  if (same == true) return Status::OK();
  if (same == false) {
    Status deleted = Delete(tenant, key);
    if (!deleted.ok() && deleted.code() != StatusCode::kNotFound) return deleted;
  }
  return Put(tenant, key, value, options);
}

Status StoreImpl::CommitReplace(BlockAllocation allocation, const PutOptions& options) {
  if (!allocation.valid()) return Status::InvalidArgument("allocation is not valid");
  const TenantId tenant = allocation.tenant();
  const BlockKey key = allocation.key();
  if (disk_ && disk_->Describe(tenant.value, key).ok()) {
    BlockMeta meta;
    Result<std::vector<std::byte>> stored = ReadFromDisk(tenant, key, &meta);
    if (stored.ok() && SameBytes(allocation.extents(), *stored)) return Status::OK();
    Status deleted = Delete(tenant, key);
    if (!deleted.ok() && deleted.code() != StatusCode::kNotFound) return deleted;
  }
  return Commit(std::move(allocation), options);
}

}  // namespace kvtier
