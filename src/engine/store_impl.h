// StoreImpl: the Store of include/kvtier/store.h over the G2 MemoryTier. It owns the tenant
// registry, validates every request, and expands batch and token forms.

#ifndef KVTIER_ENGINE_STORE_IMPL_H_
#define KVTIER_ENGINE_STORE_IMPL_H_

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/store.h"
#include "src/tier/memory/memory_tier.h"

namespace kvtier {

// Checks and normalises options; InvalidArgument naming the offending field.
Result<Options> SanitizeOptions(const Options& options);

class StoreImpl final : public Store {
 public:
  // REQUIRES: `options` came from SanitizeOptions.
  StoreImpl(const Options& options, std::unique_ptr<MemoryTier> memory);

  Result<TenantId> FindTenant(std::string_view name) const override;
  Status Put(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
             const PutOptions& options) override;
  std::vector<Status> PutMany(TenantId tenant, std::span<const BlockWrite> writes) override;
  Result<BlockHandle> Get(TenantId tenant, const BlockKey& key) override;
  std::vector<Result<BlockHandle>> GetMany(TenantId tenant,
                                           std::span<const BlockKey> keys) override;
  Result<size_t> Read(TenantId tenant, const BlockKey& key, std::span<std::byte> out) override;
  std::vector<Result<size_t>> ReadMany(TenantId tenant, std::span<const BlockKey> keys,
                                       std::span<const std::span<std::byte>> outs) override;
  Result<PrefixMatch> LookupPrefix(TenantId tenant, std::span<const BlockKey> keys) override;
  Result<PrefixMatch> LookupPrefix(const Namespace& ns,
                                   std::span<const uint32_t> tokens) override;
  std::vector<Result<PrefixMatch>> LookupPrefixMany(
      TenantId tenant, std::span<const std::span<const BlockKey>> prompts) override;
  Status Delete(TenantId tenant, const BlockKey& key) override;
  std::vector<Status> DeleteMany(TenantId tenant, std::span<const BlockKey> keys) override;
  Status Pin(TenantId tenant, const BlockKey& key) override;
  std::vector<Status> PinMany(TenantId tenant, std::span<const BlockKey> keys) override;
  Status Unpin(TenantId tenant, const BlockKey& key) override;
  std::vector<Status> UnpinMany(TenantId tenant, std::span<const BlockKey> keys) override;
  size_t PurgeExpired() override;
  StoreStats Stats() const override;
  Result<TenantStats> StatsForTenant(TenantId tenant) const override;

 private:
  Status CheckTenant(TenantId tenant) const;
  Status CheckValue(std::span<const std::byte> value) const;

  const Options options_;
  const std::unique_ptr<MemoryTier> memory_;
  std::unordered_map<std::string, uint32_t> tenant_ids_;  // Immutable after construction.
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_STORE_IMPL_H_
