// KeyService: where the data services (RecordCipher, BlockCodec) get tenants' data keys, and
// the administrative acts on them. Two implementations keep the same contract:
//   - KeyManager (key_manager.h): the keys in a keystore file beside this node's G3;
//   - ClusterKeyManager (cluster_keys.h): the keys in G4, shared by every node of a cluster.
// docs/security.md, "Key hierarchy" and "Cluster keys".
//
// Thread safety: implementations are thread-safe.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_KEY_SERVICE_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_KEY_SERVICE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "src/services/encryption/master_key.h"
#include "src/services/encryption/secret_key.h"

namespace kvtier::encryption {

// What a tenant's keys look like, for admin tools; carries no key material.
struct TenantKeyInfo {
  bool shredded = false;          // Every version up to shredded_through was destroyed.
  uint32_t shredded_through = 0;
  uint32_t current_version = 0;   // 0 when the tenant has no live key.
  uint32_t live_versions = 0;
};

class KeyService {
 public:
  virtual ~KeyService() = default;

  // The key for sealing one new record of `tenant`: copies it into *key and returns its
  // version. Each call consumes one seal of the version's nonce budget; the tenant's first
  // key is created on first use. InvalidArgument for a tenant name outside 1..255 bytes; I/O
  // errors when the keys cannot be stored (nothing is then returned).
  [[nodiscard]] virtual Result<uint32_t> AcquireSealingKey(std::string_view tenant,
                                                           SecretKey* key) = 0;
  // Copies version `version` of `tenant`'s key into *key, for opening a record.
  // FailedPrecondition "tenant keys shredded" when that version was destroyed; NotFound when
  // the tenant or version never existed.
  [[nodiscard]] virtual Status GetKey(std::string_view tenant, uint32_t version,
                                      SecretKey* key) = 0;
  // Creates a new version for `tenant` that new seals use from now on; older versions still
  // open. Returns the new version.
  [[nodiscard]] virtual Result<uint32_t> RotateTenantKey(std::string_view tenant,
                                                         std::string_view actor) = 0;
  // Destroys every key version of `tenant`. NotFound when the tenant has no keys.
  [[nodiscard]] virtual Status ShredTenant(std::string_view tenant, std::string_view actor) = 0;
  // Re-wraps every data key under `new_master`; the data itself is untouched. On error the
  // old master key stays in force.
  [[nodiscard]] virtual Status RotateMasterKey(const MasterKey& new_master,
                                               std::string_view actor) = 0;
  // NotFound when `tenant` has never had keys.
  [[nodiscard]] virtual Result<TenantKeyInfo> DescribeTenant(std::string_view tenant) = 0;
  virtual std::string master_key_id() const = 0;
  // Another node shredded `tenant` (its deletion notice says so): whatever this process holds
  // of the tenant's keys goes now. A no-op where the keys are this node's alone.
  virtual void ForgetTenant(std::string_view tenant) { (void)tenant; }
};

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_KEY_SERVICE_H_
