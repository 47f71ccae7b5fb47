// KeyManager: per-tenant data keys (DEKs), their versions, rotation and crypto-shredding.
//
// Key hierarchy (docs/security.md): master key -> HKDF-SHA256 -> one KEK per (tenant,
// version) -> wraps that version's random 256-bit DEK. The wrapped DEKs live in
// `<dir>/KEYSTORE` (keystore_format.h), replaced atomically by every change: the new version
// is written to KEYSTORE.tmp and fsynced, the old one renamed to KEYSTORE.old, the new one
// renamed into place (directory fsyncs between), then KEYSTORE.old is overwritten with zeros,
// fsynced and removed, so no copy of a destroyed key is left in any file of the directory.
// Open() finishes or rolls back a replacement that a crash interrupted.
// `<dir>/KEYSTORE.lock` keeps a second process out.
//
// Data keys are held unwrapped in memory only inside this object and copied out per call
// (into a SecretKey the caller wipes by destroying it); no reference to them escapes, so a
// shred takes effect for every later call at once, on every tier.
//
// Versions: a record carries the key version it was sealed with. New seals use the tenant's
// newest version; every older version that has not been shredded still opens. A version is
// rotated automatically after `max_seals_per_key` seals (the nonce budget, docs/security.md).
//
// Shredding: ShredTenant() destroys every version of a tenant (in memory first, then in the
// keystore, durably). Afterwards GetKey() for any of those versions returns
// FailedPrecondition "tenant keys shredded". A later seal for the same tenant name starts a
// fresh key at a version above the shredded ones, so old records stay unreadable.
//
// Administrative acts (create, rotate, shred, master key rotation) are written to the audit
// log when one is given; an audit write failure is reported through Env::Log and does not
// undo the act.
//
// Thread safety: thread-safe.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_KEY_MANAGER_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_KEY_MANAGER_H_

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
#include "src/services/audit/audit_log.h"
#include "src/services/encryption/aes_gcm.h"
#include "src/services/encryption/key_service.h"
#include "src/services/encryption/keystore_format.h"
#include "src/services/encryption/master_key.h"
#include "src/services/encryption/secret_key.h"

namespace kvtier::encryption {

inline constexpr char kKeystoreFileName[] = "KEYSTORE";

struct KeyManagerOptions {
  // Seals (random 96-bit nonces) allowed under one data-key version before new writes move to
  // a new version. With q seals the chance that any two nonces collide is below q^2 / 2^97;
  // the default 2^32 (NIST SP 800-38D, 8.3) keeps it under 2^-33. Lower it for a stricter
  // bound at the cost of more versions. Clamped to [1, 2^32].
  uint64_t max_seals_per_key = uint64_t{1} << 32;
  // Seals reserved durably per keystore write. A restart forfeits what was reserved but not
  // used, so a larger value means fewer keystore writes but a budget that runs out sooner
  // when the process restarts often. Clamped to [1, max_seals_per_key].
  uint64_t seal_reservation = uint64_t{1} << 20;
  // Where administrative acts are recorded; not owned, may be null.
  audit::AuditLog* audit = nullptr;
};

// The actor of automatic acts (a version rotated when its nonce budget is spent).
inline constexpr std::string_view kKeySystemActor = "kvtier";

// InvalidArgument for a tenant name outside 1..255 bytes.
Status CheckKeyTenantName(std::string_view tenant);

// Records a key act in `log` (nothing when null); a failure to record is logged through
// `env` and does not undo the act.
void AuditKeyAct(audit::AuditLog* log, Env* env, audit::AuditOp op, std::string_view tenant,
                 std::string_view actor, std::optional<uint32_t> key_version, uint64_t keys,
                 const Status& result);

class KeyManager final : public KeyService {
 public:
  // Opens (or creates, when absent) the keystore in `dir` (which must exist). `env` is not
  // owned and must outlive the KeyManager. Errors: FailedPrecondition for a wrong master key
  // or a keystore locked by another process, DataLoss for a corrupt or altered keystore,
  // the Env's errors for I/O.
  [[nodiscard]] static Result<std::unique_ptr<KeyManager>> Open(
      Env* env, const std::string& dir, const MasterKey& master, const KeyManagerOptions& options);

  ~KeyManager() override;
  KeyManager(const KeyManager&) = delete;
  KeyManager& operator=(const KeyManager&) = delete;

  // The key for sealing one new record of `tenant`: copies it into *key and returns its
  // version. Each call consumes one seal of the version's nonce budget; the tenant's first
  // key is created on first use. InvalidArgument for a tenant name outside 1..255 bytes; I/O
  // errors when the keystore cannot be updated (nothing is then returned).
  [[nodiscard]] Result<uint32_t> AcquireSealingKey(std::string_view tenant, SecretKey* key)
      override ABSL_LOCKS_EXCLUDED(mu_);

  // Copies version `version` of `tenant`'s key into *key, for opening a record.
  // FailedPrecondition "tenant keys shredded" when that version was destroyed; NotFound when
  // the tenant or version never existed here.
  [[nodiscard]] Status GetKey(std::string_view tenant, uint32_t version, SecretKey* key)
      override ABSL_LOCKS_EXCLUDED(mu_);

  // Creates a new version for `tenant` (creating the tenant when absent) that new seals use
  // from now on; older versions still open. Returns the new version.
  [[nodiscard]] Result<uint32_t> RotateTenantKey(std::string_view tenant, std::string_view actor)
      override ABSL_LOCKS_EXCLUDED(mu_);

  // Destroys every key version of `tenant`. In memory at once (even if the keystore write
  // then fails: the error says the shred is not yet durable and the call should be repeated);
  // durable when OK is returned. NotFound when the tenant has no keys here.
  [[nodiscard]] Status ShredTenant(std::string_view tenant, std::string_view actor)
      override ABSL_LOCKS_EXCLUDED(mu_);

  // Re-wraps every data key under `new_master` and rewrites the keystore; the data itself is
  // untouched. On error the old master key stays in force (keep both keys until a rotation
  // has returned OK: a failed rename may or may not have happened).
  [[nodiscard]] Status RotateMasterKey(const MasterKey& new_master, std::string_view actor)
      override ABSL_LOCKS_EXCLUDED(mu_);

  // NotFound when the keystore has never seen `tenant`.
  [[nodiscard]] Result<TenantKeyInfo> DescribeTenant(std::string_view tenant)
      override ABSL_LOCKS_EXCLUDED(mu_);

  std::string master_key_id() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Version {
    SecretKey dek;
    WrappedDataKey wrapped;  // As stored; refreshed by a master key rotation.
    uint64_t seals_used = 0;  // Starts at seals_reserved after a load (unused ones forfeit).
  };
  struct Tenant {
    uint32_t shredded_through = 0;
    std::map<uint32_t, Version> versions;  // Live versions; the newest seals.
  };

  KeyManager(Env* env, std::string dir, const MasterKey& master, const KeyManagerOptions& options,
             std::unique_ptr<AesGcm> gcm, std::unique_ptr<FileLock> lock);

  // Finishes or rolls back a keystore replacement a crash interrupted.
  Status Recover() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Result<bool> Exists(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Overwrites the file at `path` with zeros, syncs, removes it.
  Status ScrubAndRemove(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the in-memory state, wrapped under `master`, as the new keystore.
  Status Persist(const MasterKey& master) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status WrapVersion(const MasterKey& master, const std::string& tenant, Version* version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a new newest version to `tenant`, persists, and undoes the addition on failure.
  Result<uint32_t> AddVersion(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an act when an audit log is configured (see the class comment).
  void Audit(audit::AuditOp op, std::string_view tenant, std::string_view actor,
             std::optional<uint32_t> key_version, uint64_t keys, const Status& result);

  Env* const env_;
  const std::string dir_;
  const std::string path_;
  const KeyManagerOptions options_;
  const std::unique_ptr<FileLock> lock_;
  mutable Mutex mu_;
  MasterKey master_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<AesGcm> gcm_ ABSL_GUARDED_BY(mu_);  // Wraps and unwraps DEKs.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Tenant, std::less<>> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_KEY_MANAGER_H_
