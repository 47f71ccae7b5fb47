#include "src/services/encryption/key_manager.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "src/services/encryption/kdf.h"

namespace kvtier::encryption {
namespace {

// A keystore holds 88 bytes per key version; anything this large is not one.
constexpr uint64_t kMaxKeystoreBytes = uint64_t{64} << 20;
std::span<const std::byte> AsBytes(std::span<const uint8_t> s) { return std::as_bytes(s); }

Status Annotate(const Status& status, std::string_view context) {
  return Status(status.code(), std::string(context) + ": " + std::string(status.message()));
}

}  // namespace

Result<std::unique_ptr<KeyManager>> KeyManager::Open(Env* env, const std::string& dir,
                                                     const MasterKey& master,
                                                     const KeyManagerOptions& options) {
  Result<std::unique_ptr<FileLock>> lock = env->LockFile(dir + "/" + kKeystoreFileName + ".lock");
  if (!lock.ok()) return Annotate(lock.status(), "keystore lock");
  Result<std::unique_ptr<AesGcm>> gcm = AesGcm::Create();
  if (!gcm.ok()) return gcm.status();
  KeyManagerOptions sanitized = options;
  sanitized.max_seals_per_key = std::clamp<uint64_t>(options.max_seals_per_key, 1, uint64_t{1} << 32);
  sanitized.seal_reservation =
      std::clamp<uint64_t>(options.seal_reservation, 1, sanitized.max_seals_per_key);
  std::unique_ptr<KeyManager> manager(
      new KeyManager(env, dir, master, sanitized, std::move(*gcm), std::move(*lock)));
  MutexLock guard(&manager->mu_);
  KVTIER_RETURN_IF_ERROR(manager->Load());
  return manager;
}

KeyManager::KeyManager(Env* env, std::string dir, const MasterKey& master,
                       const KeyManagerOptions& options, std::unique_ptr<AesGcm> gcm,
                       std::unique_ptr<FileLock> lock)
    : env_(env),
      dir_(std::move(dir)),
      path_(dir_ + "/" + kKeystoreFileName),
      options_(options),
      lock_(std::move(lock)),
      master_(master),
      gcm_(std::move(gcm)) {}

KeyManager::~KeyManager() = default;

Status KeyManager::Load() {
  KVTIER_RETURN_IF_ERROR(Recover());
  Result<std::unique_ptr<File>> file = env_->OpenFile(path_, FileOptions{});
  if (!file.ok() && file.status().code() == StatusCode::kNotFound) {
    return Persist(master_);  // A new keystore, recording which master key owns it.
  }
  if (!file.ok()) return Annotate(file.status(), "keystore");
  Result<uint64_t> size = (*file)->Size();
  if (!size.ok()) return Annotate(size.status(), "keystore");
  if (*size > kMaxKeystoreBytes) return Status::DataLoss("keystore corrupt: file too large");
  std::vector<uint8_t> bytes(*size);
  size_t got = 0;
  KVTIER_RETURN_IF_ERROR((*file)->Read(0, std::as_writable_bytes(std::span(bytes)), &got));
  if (got != bytes.size()) return Status::DataLoss("keystore corrupt: short read");
  SecretKey mac_key;
  KVTIER_RETURN_IF_ERROR(master_.DeriveKeystoreMacKey(&mac_key));
  Result<KeystoreContents> contents = DecodeKeystore(bytes, master_.id(), mac_key);
  if (!contents.ok()) return Annotate(contents.status(), path_);
  generation_ = contents->generation;
  for (const KeystoreTenant& stored : contents->tenants) {
    Tenant& tenant = tenants_[stored.name];
    tenant.shredded_through = stored.shredded_through;
    for (const WrappedDataKey& wrapped : stored.versions) {
      Version& version = tenant.versions[wrapped.version];
      version.wrapped = wrapped;
      version.seals_used = wrapped.seals_reserved;  // Unused reservations are forfeit.
      SecretKey kek;
      KVTIER_RETURN_IF_ERROR(master_.DeriveKek(stored.name, wrapped.version, &kek));
      const std::vector<uint8_t> aad = WrappedKeyAad(stored.name, wrapped.version);
      const Status unwrapped =
          gcm_->Open(kek, wrapped.nonce, AsBytes(aad), AsBytes(wrapped.wrapped_key), wrapped.tag,
                     std::as_writable_bytes(std::span(version.dek.mutable_bytes())));
      if (!unwrapped.ok()) {
        return Status::DataLoss("keystore corrupt: a data key of tenant '" + stored.name +
                                "' (version " + std::to_string(wrapped.version) +
                                ") does not unwrap");
      }
    }
  }
  return Status::OK();
}

Status KeyManager::WrapVersion(const MasterKey& master, const std::string& tenant,
                               Version* version) {
  SecretKey kek;
  KVTIER_RETURN_IF_ERROR(master.DeriveKek(tenant, version->wrapped.version, &kek));
  KVTIER_RETURN_IF_ERROR(FillRandom(version->wrapped.nonce));
  const std::vector<uint8_t> aad = WrappedKeyAad(tenant, version->wrapped.version);
  return gcm_->Seal(kek, version->wrapped.nonce, AsBytes(aad), AsBytes(version->dek.bytes()),
                    std::as_writable_bytes(std::span(version->wrapped.wrapped_key)),
                    &version->wrapped.tag);
}

Status KeyManager::Persist(const MasterKey& master) {
  KeystoreContents contents;
  contents.master_key_id = master.id();
  contents.generation = generation_ + 1;
  for (const auto& [name, tenant] : tenants_) {
    KeystoreTenant& stored = contents.tenants.emplace_back();
    stored.name = name;
    stored.shredded_through = tenant.shredded_through;
    for (const auto& [number, version] : tenant.versions) stored.versions.push_back(version.wrapped);
  }
  SecretKey mac_key;
  KVTIER_RETURN_IF_ERROR(master.DeriveKeystoreMacKey(&mac_key));
  Result<std::vector<uint8_t>> bytes = EncodeKeystore(contents, mac_key);
  if (!bytes.ok()) return bytes.status();

  // Replace the keystore so that a crash at any point leaves a whole one (see Recover()), and
  // so that the replaced file can be overwritten by name before it is removed.
  const std::string tmp = path_ + ".tmp";
  const std::string old = path_ + ".old";
  KVTIER_RETURN_IF_ERROR(Recover());  // An earlier failed replacement may have stopped midway.
  {
    FileOptions create;
    create.create = true;
    create.truncate = true;
    Result<std::unique_ptr<File>> file = env_->OpenFile(tmp, create);
    if (!file.ok()) return Annotate(file.status(), "keystore write");
    KVTIER_RETURN_IF_ERROR((*file)->Write(0, AsBytes(*bytes)));
    KVTIER_RETURN_IF_ERROR((*file)->Sync());
  }
  Status moved = env_->RenameFile(path_, old);
  if (!moved.ok() && moved.code() != StatusCode::kNotFound) return moved;
  const bool had_previous = moved.ok();
  if (had_previous) KVTIER_RETURN_IF_ERROR(env_->SyncDir(dir_));
  KVTIER_RETURN_IF_ERROR(env_->RenameFile(tmp, path_));
  KVTIER_RETURN_IF_ERROR(env_->SyncDir(dir_));
  generation_ = contents.generation;
  if (had_previous) {
    // The new keystore is durable; a failure to scrub the old one is retried at the next
    // open (Recover()), so it is only logged here.
    if (Status s = ScrubAndRemove(old); !s.ok()) {
      env_->Log("keystore: could not scrub the replaced keystore: " + s.ToString());
    }
  }
  return Status::OK();
}

Status KeyManager::ScrubAndRemove(const std::string& path) {
  {
    Result<std::unique_ptr<File>> file = env_->OpenFile(path, FileOptions{});
    if (!file.ok()) return file.status();
    Result<uint64_t> size = (*file)->Size();
    if (!size.ok()) return size.status();
    const std::vector<std::byte> zeros(*size);
    KVTIER_RETURN_IF_ERROR((*file)->Write(0, zeros));
    KVTIER_RETURN_IF_ERROR((*file)->Sync());
  }
  KVTIER_RETURN_IF_ERROR(env_->RemoveFile(path));
  return env_->SyncDir(dir_);
}

Result<bool> KeyManager::Exists(const std::string& path) {
  Result<std::unique_ptr<File>> file = env_->OpenFile(path, FileOptions{});
  if (file.ok()) return true;
  if (file.status().code() == StatusCode::kNotFound) return false;
  return Annotate(file.status(), "keystore");
}

Status KeyManager::Recover() {
  // Persist() steps: (1) write and sync KEYSTORE.tmp, (2) rename KEYSTORE to KEYSTORE.old,
  // (3) rename KEYSTORE.tmp to KEYSTORE, (4) scrub and remove KEYSTORE.old.
  const std::string tmp = path_ + ".tmp";
  const std::string old = path_ + ".old";
  Result<bool> has_current = Exists(path_);
  if (!has_current.ok()) return has_current.status();
  Result<bool> has_previous = Exists(old);
  if (!has_previous.ok()) return has_previous.status();
  if (*has_previous && !*has_current) {
    // Crashed between (2) and (3): the change was never acknowledged; roll back.
    KVTIER_RETURN_IF_ERROR(env_->RenameFile(old, path_));
    KVTIER_RETURN_IF_ERROR(env_->SyncDir(dir_));
  } else if (*has_previous) {
    KVTIER_RETURN_IF_ERROR(ScrubAndRemove(old));  // Crashed in (4).
  }
  // A temporary file left by a crash in (1) or (2) holds an unacknowledged change.
  if (Status s = env_->RemoveFile(tmp); !s.ok() && s.code() != StatusCode::kNotFound) {
    return Annotate(s, "keystore");
  }
  return Status::OK();
}

Result<uint32_t> KeyManager::AddVersion(const std::string& name) {
  const bool existed = tenants_.contains(name);
  Tenant& tenant = tenants_[name];
  const uint32_t newest =
      tenant.versions.empty() ? tenant.shredded_through : tenant.versions.rbegin()->first;
  if (newest == UINT32_MAX) {
    return Status::ResourceExhausted("tenant '" + name + "' has used every key version");
  }
  const uint32_t number = newest + 1;
  Version& version = tenant.versions[number];
  version.wrapped.version = number;
  version.wrapped.created_micros = env_->NowMicros();
  version.wrapped.seals_reserved = options_.seal_reservation;
  Status status = FillRandom(version.dek.mutable_bytes());
  if (status.ok()) status = WrapVersion(master_, name, &version);
  if (status.ok()) status = Persist(master_);
  if (!status.ok()) {
    tenant.versions.erase(number);
    if (!existed) tenants_.erase(name);
    return status;
  }
  return number;
}

Result<uint32_t> KeyManager::AcquireSealingKey(std::string_view tenant_name, SecretKey* key) {
  KVTIER_RETURN_IF_ERROR(CheckKeyTenantName(tenant_name));
  MutexLock lock(&mu_);
  auto it = tenants_.find(tenant_name);
  if (it == tenants_.end() || it->second.versions.empty()) {
    const std::string name(tenant_name);
    Result<uint32_t> created = AddVersion(name);
    Audit(audit::AuditOp::kCreateTenantKey, tenant_name, kKeySystemActor,
          created.ok() ? std::optional<uint32_t>(*created) : std::nullopt, 1, created.status());
    if (!created.ok()) return created.status();
    it = tenants_.find(tenant_name);
  }
  Tenant& tenant = it->second;
  if (tenant.versions.rbegin()->second.seals_used >= options_.max_seals_per_key) {
    // The nonce budget of this version is spent: new writes move to a new version.
    Result<uint32_t> rotated = AddVersion(it->first);
    Audit(audit::AuditOp::kRotateTenantKey, tenant_name, kKeySystemActor,
          rotated.ok() ? std::optional<uint32_t>(*rotated) : std::nullopt, 1, rotated.status());
    if (!rotated.ok()) return rotated.status();
  }
  auto& [number, version] = *tenant.versions.rbegin();
  if (version.seals_used >= version.wrapped.seals_reserved) {
    const uint64_t reserved = version.wrapped.seals_reserved;
    version.wrapped.seals_reserved =
        std::min(reserved + options_.seal_reservation, options_.max_seals_per_key);
    if (Status s = Persist(master_); !s.ok()) {
      version.wrapped.seals_reserved = reserved;
      return s;
    }
  }
  ++version.seals_used;
  *key = version.dek;
  return number;
}

Status KeyManager::GetKey(std::string_view tenant_name, uint32_t version, SecretKey* key) {
  MutexLock lock(&mu_);
  auto it = tenants_.find(tenant_name);
  if (it == tenants_.end()) {
    return Status::NotFound("no data keys for tenant '" + std::string(tenant_name) + "'");
  }
  if (version <= it->second.shredded_through) {
    return Status::FailedPrecondition("tenant keys shredded (tenant '" + std::string(tenant_name) +
                                      "', key version " + std::to_string(version) + ")");
  }
  auto found = it->second.versions.find(version);
  if (found == it->second.versions.end()) {
    return Status::NotFound("unknown key version " + std::to_string(version) + " for tenant '" +
                            std::string(tenant_name) + "'");
  }
  *key = found->second.dek;
  return Status::OK();
}

Result<uint32_t> KeyManager::RotateTenantKey(std::string_view tenant, std::string_view actor) {
  KVTIER_RETURN_IF_ERROR(CheckKeyTenantName(tenant));
  MutexLock lock(&mu_);
  Result<uint32_t> version = AddVersion(std::string(tenant));
  Audit(audit::AuditOp::kRotateTenantKey, tenant, actor,
        version.ok() ? std::optional<uint32_t>(*version) : std::nullopt, 1, version.status());
  return version;
}

Status KeyManager::ShredTenant(std::string_view tenant_name, std::string_view actor) {
  KVTIER_RETURN_IF_ERROR(CheckKeyTenantName(tenant_name));
  MutexLock lock(&mu_);
  auto it = tenants_.find(tenant_name);
  if (it == tenants_.end()) {
    return Status::NotFound("no data keys for tenant '" + std::string(tenant_name) + "'");
  }
  Tenant& tenant = it->second;
  const uint64_t destroyed = tenant.versions.size();
  if (!tenant.versions.empty()) tenant.shredded_through = tenant.versions.rbegin()->first;
  tenant.versions.clear();  // SecretKey wipes each data key.
  Status status = Persist(master_);
  if (!status.ok()) {
    status = Status(status.code(), "tenant keys shredded in memory but not yet durably (repeat "
                                   "the shred): " + std::string(status.message()));
  }
  Audit(audit::AuditOp::kShredTenant, tenant_name, actor, std::nullopt, destroyed, status);
  return status;
}

Status KeyManager::RotateMasterKey(const MasterKey& new_master, std::string_view actor) {
  MutexLock lock(&mu_);
  std::vector<std::pair<Version*, WrappedDataKey>> old_wrapped;
  Status status;
  for (auto& [name, tenant] : tenants_) {
    for (auto& [number, version] : tenant.versions) {
      old_wrapped.emplace_back(&version, version.wrapped);
      if (status.ok()) status = WrapVersion(new_master, name, &version);
    }
  }
  if (status.ok()) status = Persist(new_master);
  if (status.ok()) {
    master_ = new_master;
  } else {
    for (auto& [version, wrapped] : old_wrapped) version->wrapped = wrapped;
  }
  Audit(audit::AuditOp::kRotateMasterKey, "", actor, std::nullopt, old_wrapped.size(), status);
  return status;
}

Result<TenantKeyInfo> KeyManager::DescribeTenant(std::string_view tenant_name) {
  MutexLock lock(&mu_);
  auto it = tenants_.find(tenant_name);
  if (it == tenants_.end()) {
    return Status::NotFound("no data keys for tenant '" + std::string(tenant_name) + "'");
  }
  TenantKeyInfo info;
  info.shredded = it->second.shredded_through != 0;
  info.shredded_through = it->second.shredded_through;
  info.live_versions = static_cast<uint32_t>(it->second.versions.size());
  info.current_version = it->second.versions.empty() ? 0 : it->second.versions.rbegin()->first;
  return info;
}

std::string KeyManager::master_key_id() const {
  MutexLock lock(&mu_);
  return master_.IdHex();
}

void KeyManager::Audit(audit::AuditOp op, std::string_view tenant, std::string_view actor,
                       std::optional<uint32_t> key_version, uint64_t keys, const Status& result) {
  AuditKeyAct(options_.audit, env_, op, tenant, actor, key_version, keys, result);
}

void AuditKeyAct(audit::AuditLog* log, Env* env, audit::AuditOp op, std::string_view tenant,
                 std::string_view actor, std::optional<uint32_t> key_version, uint64_t keys,
                 const Status& result) {
  if (log == nullptr) return;
  audit::AuditEvent event;
  event.op = op;
  event.scope = tenant.empty() ? audit::AuditScope::kNode : audit::AuditScope::kTenant;
  event.tenant = std::string(tenant);
  event.actor = std::string(actor);
  event.keys = keys;
  event.key_version = key_version;
  event.result = result.code();
  if (Status s = log->Append(event); !s.ok()) {
    env->Log("audit: could not record " + std::string(audit::AuditOpName(op)) + ": " +
             s.ToString());
  }
}

Status CheckKeyTenantName(std::string_view tenant) {
  if (tenant.empty() || tenant.size() > 255) {
    return Status::InvalidArgument("tenant name must be 1 to 255 bytes");
  }
  return Status::OK();
}

}  // namespace kvtier::encryption
