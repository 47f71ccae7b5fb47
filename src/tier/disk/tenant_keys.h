// Hash-map keys of G3's recovery and offline check: a block key or a session, within a tenant
// named by its index (recovery) or its name (fsck, which knows no configuration).

#ifndef KVTIER_TIER_DISK_TENANT_KEYS_H_
#define KVTIER_TIER_DISK_TENANT_KEYS_H_

#include <cstdint>
#include <utility>

#include "kvtier/block_key.h"

namespace kvtier::disk {

template <typename Tenant>
struct TenantKeyOf {
  Tenant tenant;
  BlockKey key;
  friend bool operator==(const TenantKeyOf&, const TenantKeyOf&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const TenantKeyOf& k) {
    return H::combine(std::move(h), k.tenant, k.key.Hash64());
  }
};

template <typename Tenant>
struct TenantSessionOf {
  Tenant tenant;
  uint64_t session;
  friend bool operator==(const TenantSessionOf&, const TenantSessionOf&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const TenantSessionOf& s) {
    return H::combine(std::move(h), s.tenant, s.session);
  }
};

}  // namespace kvtier::disk

#endif  // KVTIER_TIER_DISK_TENANT_KEYS_H_
