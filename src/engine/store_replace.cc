// Store::Replace: values stored under names that may change (RESP's SET), beside the
// content-addressed blocks of the rest of the Store.

#include <cstring>
#include <optional>

#include "src/engine/store_impl.h"

namespace kvtier {

Status StoreImpl::Replace(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
                          const PutOptions& options) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  KVTIER_RETURN_IF_ERROR(CheckValue(value));
  auto same_bytes = [&value](std::span<const std::byte> piece, size_t offset) {
    return std::memcmp(piece.data(), value.data() + offset, piece.size()) == 0;
  };
  // Looked at without counting as an access: a SET is not a read.
  std::optional<bool> same;
  BlockMeta meta;
  if (Result<BlockHandle> held = memory_->LeaseForCopy(tenant.value, key, &meta); held.ok()) {
    same = held->size() == value.size();
    size_t offset = 0;
    for (std::span<const std::byte> piece : held->extents()) {
      if (!*same) break;
      *same = same_bytes(piece, offset);
      offset += piece.size();
    }
  } else if (disk_ && disk_->Describe(tenant.value, key).ok()) {
    Result<std::vector<std::byte>> stored = ReadFromDisk(tenant, key, &meta);
    same = stored.ok() && stored->size() == value.size() && same_bytes(*stored, 0);
  }
  if (same == true) return Status::OK();
  if (same == false) {
    Status deleted = Delete(tenant, key);
    if (!deleted.ok() && deleted.code() != StatusCode::kNotFound) return deleted;
  }
  return Put(tenant, key, value, options);
}

}  // namespace kvtier
