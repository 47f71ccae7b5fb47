// ClusterKeyManager: tenants' data keys as a cluster resource, kept in G4 (docs/security.md,
// "Cluster keys"), so that every node sharing a G4 opens what any of them sealed, and a shred
// on one node destroys the keys for all of them.
//
// G4 holds, as cluster records (RecordStore::CreateRecord), per tenant (by its name component
// <t>, RecordStore::TenantComponent, which holds no '.'):
//   <t>.k<version, 10 digits>.<master key id, 32 hex>   the version's data key, wrapped under
//        the KEK of (tenant, version) from that master key (as in the keystore file):
//        "KVCK" u16le 1, u8 name_len, name, u32le version, u64le created_micros,
//        u8 nonce[12], u8 wrapped_key[32], u8 tag[16]
//   <t>.k<version>.r<index, 6 digits>                  seal reservation `index` of a version
//   <t>.shredded.<version, 10 digits>                  every version up to this one destroyed
//
// - Creating a version is a create-if-absent: of two nodes creating a tenant's first key (or
//   the same next version) at once exactly one record is written, and the loser adopts the
//   winner's key. Nothing else is ever written over.
// - The nonce budget is counted across the cluster: a node seals only under reservations of
//   `seal_reservation` seals that it created itself, each a record of its own; a version has
//   at most max_seals_per_key / seal_reservation of them, then new seals move to a new
//   version. A restart forfeits what it had reserved.
// - Shredding writes the shred marker, then removes the version and reservation records. The
//   node that shreds forgets the keys at once; the others when they apply the tenant's
//   deletion notice (ForgetTenant), and a node that loads the tenant afterwards finds the
//   marker. Keys are loaded from G4 when first needed and held in memory only.
// - A master key rotation writes every version again under the new key id and then removes
//   the records under the old one; the data is not touched. Nodes still running with the old
//   key keep what they hold; restart them with the new key. A node whose master key has no
//   records where others do refuses to create keys of its own (FailedPrecondition
//   "wrong master key"), so two master keys never split a tenant.
//
// Thread safety: thread-safe. G4 I/O happens under the lock, which is held per call; the
// seal path touches G4 only for a tenant's first key and once per reservation.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_CLUSTER_KEYS_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_CLUSTER_KEYS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "src/common/mutex.h"
#include "src/services/encryption/aes_gcm.h"
#include "src/services/encryption/key_manager.h"
#include "src/services/encryption/key_service.h"
#include "src/services/encryption/keystore_format.h"
#include "src/services/encryption/master_key.h"
#include "src/services/encryption/record_store.h"

namespace kvtier::encryption {

class ClusterKeyManager final : public KeyService {
 public:
  // Keys for the G4 that Attach names later (G4 is opened after the data services, which it
  // uses). `env` is not owned. Options as KeyManager's.
  [[nodiscard]] static Result<std::unique_ptr<ClusterKeyManager>> Create(
      Env* env, const MasterKey& master, const KeyManagerOptions& options);
  ~ClusterKeyManager() override;

  // Where the keys live (G4's SharedTier); not owned, must outlive every later call. Checks
  // that it can keep them (FailedPrecondition for an S3 service without conditional writes).
  [[nodiscard]] Status Attach(RecordStore* g4) ABSL_LOCKS_EXCLUDED(mu_);

  Result<uint32_t> AcquireSealingKey(std::string_view tenant, SecretKey* key) override
      ABSL_LOCKS_EXCLUDED(mu_);
  Status GetKey(std::string_view tenant, uint32_t version, SecretKey* key) override
      ABSL_LOCKS_EXCLUDED(mu_);
  Result<uint32_t> RotateTenantKey(std::string_view tenant, std::string_view actor) override
      ABSL_LOCKS_EXCLUDED(mu_);
  Status ShredTenant(std::string_view tenant, std::string_view actor) override
      ABSL_LOCKS_EXCLUDED(mu_);
  Status RotateMasterKey(const MasterKey& new_master, std::string_view actor) override
      ABSL_LOCKS_EXCLUDED(mu_);
  Result<TenantKeyInfo> DescribeTenant(std::string_view tenant) override ABSL_LOCKS_EXCLUDED(mu_);
  std::string master_key_id() const override ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetTenant(std::string_view tenant) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Version {
    SecretKey dek;
    uint32_t reservations = 0;  // Reservation records of the version seen or made.
    uint64_t seals_left = 0;    // Of this node's current reservation.
  };
  struct Tenant {
    uint32_t shredded_through = 0;
    std::map<uint32_t, Version> versions;  // Live versions; the newest seals.
  };

  ClusterKeyManager(Env* env, const MasterKey& master, const KeyManagerOptions& options,
                    std::unique_ptr<AesGcm> gcm);

  // The tenant as G4 has it now, replacing what was held.
  Result<Tenant*> Load(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What is held, or Load.
  Result<Tenant*> Find(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates version `number` in G4, or adopts it when another node was first.
  Status CreateVersion(const std::string& tenant, uint32_t number)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new reservation of the newest version, moving to a new version when it has none left.
  Status Reserve(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Seals `dek` as version w->version of `tenant` under `master` into *w (a fresh nonce), and
  // back; DataLoss when it does not unwrap.
  Status Wrap(const MasterKey& master, const std::string& tenant, const SecretKey& dek,
              WrappedDataKey* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Unwrap(const MasterKey& master, const std::string& tenant, const WrappedDataKey& w,
                SecretKey* dek) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Audit(audit::AuditOp op, std::string_view tenant, std::string_view actor,
             std::optional<uint32_t> key_version, uint64_t keys, const Status& result);

  Env* const env_;
  const KeyManagerOptions options_;
  mutable Mutex mu_;
  MasterKey master_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<AesGcm> gcm_ ABSL_GUARDED_BY(mu_);
  RecordStore* g4_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<std::string, Tenant, std::less<>> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_CLUSTER_KEYS_H_
