#include "src/services/encryption/cluster_keys.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "src/common/byte_codec.h"
#include "src/services/encryption/kdf.h"
#include "src/services/encryption/keystore_format.h"

namespace kvtier::encryption {
namespace {

constexpr char kRecordMagic[4] = {'K', 'V', 'C', 'K'};
constexpr uint16_t kRecordFormat = 1;

std::span<const std::byte> AsBytes(std::span<const uint8_t> s) { return std::as_bytes(s); }

std::string Digits(uint64_t n, int width) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%0*llu", width, static_cast<unsigned long long>(n));
  return buf;
}

// What a record's name says (cluster_keys.h has the layout).
struct RecordName {
  enum class Kind { kKey, kReservation, kShredded, kOther } kind = Kind::kOther;
  uint32_t version = 0;
  std::string key_id;  // kKey.
};

RecordName ParseName(std::string_view name, std::string_view prefix) {
  RecordName r;
  if (!name.starts_with(prefix)) return r;
  std::string_view rest = name.substr(prefix.size());
  auto number = [](std::string_view digits, uint32_t* out) {
    if (digits.size() != 10 || digits.find_first_not_of("0123456789") != std::string_view::npos) {
      return false;
    }
    const uint64_t v = std::stoull(std::string(digits));
    if (v > UINT32_MAX) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  };
  if (rest.starts_with("shredded.")) {
    if (number(rest.substr(9), &r.version)) r.kind = RecordName::Kind::kShredded;
    return r;
  }
  if (!rest.starts_with("k") || rest.size() < 12 || rest[11] != '.') return r;
  if (!number(rest.substr(1, 10), &r.version)) return r;
  const std::string_view tail = rest.substr(12);
  if (tail.size() == 7 && tail[0] == 'r' &&
      tail.find_first_not_of("0123456789", 1) == std::string_view::npos) {
    r.kind = RecordName::Kind::kReservation;
  } else if (tail.size() == 2 * kMasterKeyIdBytes &&
             tail.find_first_not_of("0123456789abcdef") == std::string_view::npos) {
    r.kind = RecordName::Kind::kKey;
    r.key_id = std::string(tail);
  }
  return r;
}

std::string VersionPrefix(const std::string& component, uint32_t version) {
  return component + ".k" + Digits(version, 10) + ".";
}

// A version's wrapped key, as its record holds it.
std::vector<std::byte> EncodeRecord(const std::string& tenant, const WrappedDataKey& w) {
  std::vector<std::byte> out(4 + 2 + 1 + tenant.size() + 4 + 8 + w.nonce.size() +
                             w.wrapped_key.size() + w.tag.size());
  ByteWriter b(out);
  b.Raw(kRecordMagic, 4);
  b.U16(kRecordFormat);
  b.U8(static_cast<uint8_t>(tenant.size()));
  b.Raw(tenant.data(), tenant.size());
  b.U32(w.version);
  b.U64(w.created_micros);
  b.Raw(w.nonce.data(), w.nonce.size());
  b.Raw(w.wrapped_key.data(), w.wrapped_key.size());
  b.Raw(w.tag.data(), w.tag.size());
  return out;
}

// The record `name` of version `version` under the tenant component `component` of `records`;
// *tenant receives the tenant's name it holds.
Result<WrappedDataKey> DecodeRecord(const RecordStore& records, std::span<const std::byte> bytes,
                                    std::string_view component, uint32_t version,
                                    const std::string& name, std::string* tenant) {
  ByteReader r(bytes);
  char magic[4];
  r.Raw(magic, 4);
  const uint16_t format = r.U16();
  const uint8_t name_len = r.U8();
  std::string stored(name_len, '\0');
  r.Raw(stored.data(), name_len);
  WrappedDataKey w;
  w.version = r.U32();
  w.created_micros = r.U64();
  r.Raw(w.nonce.data(), w.nonce.size());
  r.Raw(w.wrapped_key.data(), w.wrapped_key.size());
  r.Raw(w.tag.data(), w.tag.size());
  if (!r.ok() || std::memcmp(magic, kRecordMagic, 4) != 0 || r.pos() != bytes.size()) {
    return Status::DataLoss("G4 key record " + name + " is corrupt");
  }
  if (format != kRecordFormat) {
    return Status::FailedPrecondition("G4 key record " + name + " has format " +
                                      std::to_string(format) + "; this kvtierd reads " +
                                      std::to_string(kRecordFormat));
  }
  // The wrap authenticates both too; a mismatch here names the damage plainly.
  Result<std::string> stored_component = records.TenantComponent(stored);
  if (!stored_component.ok() || *stored_component != component || w.version != version) {
    return Status::DataLoss("G4 key record " + name + " names another tenant or version");
  }
  *tenant = std::move(stored);
  return w;
}

}  // namespace

Result<std::unique_ptr<ClusterKeyManager>> ClusterKeyManager::Create(
    Env* env, const MasterKey& master, const KeyManagerOptions& options) {
  Result<std::unique_ptr<AesGcm>> gcm = AesGcm::Create();
  if (!gcm.ok()) return gcm.status();
  KeyManagerOptions sanitized = options;
  sanitized.max_seals_per_key =
      std::clamp<uint64_t>(options.max_seals_per_key, 1, uint64_t{1} << 32);
  sanitized.seal_reservation =
      std::clamp<uint64_t>(options.seal_reservation, 1, sanitized.max_seals_per_key);
  return std::unique_ptr<ClusterKeyManager>(
      new ClusterKeyManager(env, master, sanitized, std::move(gcm).value()));
}

ClusterKeyManager::ClusterKeyManager(Env* env, const MasterKey& master,
                                     const KeyManagerOptions& options, std::unique_ptr<AesGcm> gcm)
    : env_(env), options_(options), master_(master), gcm_(std::move(gcm)) {}

ClusterKeyManager::~ClusterKeyManager() = default;

Status ClusterKeyManager::Attach(RecordStore* g4) {
  // A record this node alone writes and removes: creating it checks that G4 can keep records
  // at all (an S3 service without conditional writes cannot).
  std::array<uint8_t, 8> nonce{};
  KVTIER_RETURN_IF_ERROR(FillRandom(nonce));
  std::string probe = "probe.";
  for (uint8_t b : nonce) probe += Digits(b, 3);
  Status created = g4->CreateRecord(probe, {});
  if (!created.ok()) {
    return Status(created.code(),
                  "G4 cannot keep the cluster's data keys: " + std::string(created.message()));
  }
  KVTIER_RETURN_IF_ERROR(g4->DeleteRecord(probe));
  MutexLock lock(&mu_);
  g4_ = g4;
  return Status::OK();
}

Status ClusterKeyManager::Wrap(const MasterKey& master, const std::string& tenant,
                               const SecretKey& dek, WrappedDataKey* w) {
  SecretKey kek;
  KVTIER_RETURN_IF_ERROR(master.DeriveKek(tenant, w->version, &kek));
  KVTIER_RETURN_IF_ERROR(FillRandom(w->nonce));
  const std::vector<uint8_t> aad = WrappedKeyAad(tenant, w->version);
  return gcm_->Seal(kek, w->nonce, AsBytes(aad), AsBytes(dek.bytes()),
                    std::as_writable_bytes(std::span(w->wrapped_key)), &w->tag);
}

Status ClusterKeyManager::Unwrap(const MasterKey& master, const std::string& tenant,
                                 const WrappedDataKey& w, SecretKey* dek) {
  SecretKey kek;
  KVTIER_RETURN_IF_ERROR(master.DeriveKek(tenant, w.version, &kek));
  const std::vector<uint8_t> aad = WrappedKeyAad(tenant, w.version);
  return gcm_->Open(kek, w.nonce, AsBytes(aad), AsBytes(w.wrapped_key), w.tag,
                    std::as_writable_bytes(std::span(dek->mutable_bytes())));
}

Status ClusterKeyManager::Ready() const {
  if (g4_ == nullptr) return Status::FailedPrecondition("the data keys live in G4, not yet open");
  return Status::OK();
}

Result<ClusterKeyManager::Tenant*> ClusterKeyManager::Load(const std::string& tenant) {
  KVTIER_RETURN_IF_ERROR(Ready());
  Result<std::string> component = g4_->TenantComponent(tenant);
  if (!component.ok()) return component.status();
  const std::string prefix = *component + ".";
  Result<std::vector<std::string>> names = g4_->ListRecords(prefix);
  if (!names.ok()) return names.status();
  const std::string mine = master_.IdHex();
  Tenant loaded;
  std::map<uint32_t, std::string> keys;  // Version -> record under this master key.
  std::map<uint32_t, uint32_t> reservations;
  std::set<uint32_t> foreign;             // Versions under other master keys only.
  std::string foreign_id;
  for (const std::string& name : *names) {
    const RecordName r = ParseName(name, prefix);
    switch (r.kind) {
      case RecordName::Kind::kShredded:
        loaded.shredded_through = std::max(loaded.shredded_through, r.version);
        break;
      case RecordName::Kind::kReservation: ++reservations[r.version]; break;
      case RecordName::Kind::kKey:
        if (r.key_id == mine) {
          keys[r.version] = name;
        } else {
          foreign.insert(r.version);
          foreign_id = r.key_id;
        }
        break;
      case RecordName::Kind::kOther: break;
    }
  }
  for (uint32_t v : foreign) {
    if (v > loaded.shredded_through && !keys.contains(v)) {
      return Status::FailedPrecondition(
          "wrong master key: tenant '" + tenant + "' has data keys in G4 wrapped under master "
          "key " + foreign_id + ", and this node's is " + mine);
    }
  }
  for (const auto& [number, name] : keys) {
    if (number <= loaded.shredded_through) continue;  // A shred that is still removing them.
    Result<std::vector<std::byte>> body = g4_->ReadRecord(name);
    if (body.status().code() == StatusCode::kNotFound) continue;  // Shredded meanwhile.
    if (!body.ok()) return body.status();
    std::string stored;
    Result<WrappedDataKey> w = DecodeRecord(*g4_, *body, *component, number, name, &stored);
    if (!w.ok()) return w.status();
    if (stored != tenant) {  // Two names of one component (a hash collision) are not one tenant.
      return Status::DataLoss("G4 key record " + name + " names another tenant or version");
    }
    Version& version = loaded.versions[number];
    if (!Unwrap(master_, tenant, *w, &version.dek).ok()) {
      return Status::DataLoss("G4 key record " + name + " does not unwrap (altered?)");
    }
    version.reservations = reservations[number];
  }
  Tenant& held = tenants_[tenant];
  held = std::move(loaded);
  return &held;
}

Result<ClusterKeyManager::Tenant*> ClusterKeyManager::Find(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return &it->second;
  return Load(tenant);
}

Status ClusterKeyManager::CreateVersion(const std::string& tenant, uint32_t number) {
  Result<std::string> component = g4_->TenantComponent(tenant);
  if (!component.ok()) return component.status();
  WrappedDataKey w;
  w.version = number;
  w.created_micros = env_->NowMicros();
  SecretKey dek;
  KVTIER_RETURN_IF_ERROR(FillRandom(dek.mutable_bytes()));
  KVTIER_RETURN_IF_ERROR(Wrap(master_, tenant, dek, &w));
  const std::vector<std::byte> body = EncodeRecord(tenant, w);
  const Status created = g4_->CreateRecord(VersionPrefix(*component, number) + master_.IdHex(), body);
  if (!created.ok() && created.code() != StatusCode::kAlreadyExists) return created;
  // Ours, or another node's that was first: G4 has the one key of this version.
  Result<Tenant*> reloaded = Load(tenant);
  if (!reloaded.ok()) return reloaded.status();
  if (!(*reloaded)->versions.contains(number)) {
    return Status::Unavailable("key version " + std::to_string(number) + " of tenant '" + tenant +
                               "' was shredded while it was created");
  }
  return Status::OK();
}

Status ClusterKeyManager::Reserve(const std::string& tenant) {
  Result<std::string> component = g4_->TenantComponent(tenant);
  if (!component.ok()) return component.status();
  const uint64_t max_reservations =
      std::max<uint64_t>(1, options_.max_seals_per_key / options_.seal_reservation);
  for (;;) {
    Tenant& t = tenants_.at(tenant);
    const uint32_t number = t.versions.rbegin()->first;
    Version& v = t.versions.rbegin()->second;
    if (v.reservations >= max_reservations) {
      // The cluster spent this version's nonce budget: new seals move to a new version.
      if (number == UINT32_MAX) {
        return Status::ResourceExhausted("tenant '" + tenant + "' has used every key version");
      }
      const Status rotated = CreateVersion(tenant, number + 1);
      Audit(audit::AuditOp::kRotateTenantKey, tenant, kKeySystemActor, number + 1, 1, rotated);
      KVTIER_RETURN_IF_ERROR(rotated);
      continue;
    }
    const Status s = g4_->CreateRecord(
        VersionPrefix(*component, number) + "r" + Digits(v.reservations, 6), {});
    ++v.reservations;  // Taken, by this node or another.
    if (s.code() == StatusCode::kAlreadyExists) continue;
    KVTIER_RETURN_IF_ERROR(s);
    v.seals_left = options_.seal_reservation;
    return Status::OK();
  }
}

Result<uint32_t> ClusterKeyManager::AcquireSealingKey(std::string_view tenant_name,
                                                      SecretKey* key) {
  KVTIER_RETURN_IF_ERROR(CheckKeyTenantName(tenant_name));
  const std::string tenant(tenant_name);
  MutexLock lock(&mu_);
  Result<Tenant*> t = Find(tenant);
  if (!t.ok()) return t.status();
  if ((*t)->versions.empty()) {
    const uint32_t number = (*t)->shredded_through + 1;
    if (number == 0) return Status::ResourceExhausted("tenant '" + tenant + "' has no key left");
    const Status created = CreateVersion(tenant, number);
    Audit(audit::AuditOp::kCreateTenantKey, tenant, kKeySystemActor, number, 1, created);
    KVTIER_RETURN_IF_ERROR(created);
  }
  Tenant& held = tenants_.at(tenant);
  if (held.versions.rbegin()->second.seals_left == 0) KVTIER_RETURN_IF_ERROR(Reserve(tenant));
  auto& [number, version] = *tenants_.at(tenant).versions.rbegin();
  --version.seals_left;
  *key = version.dek;
  return number;
}

Status ClusterKeyManager::GetKey(std::string_view tenant_name, uint32_t number, SecretKey* key) {
  KVTIER_RETURN_IF_ERROR(CheckKeyTenantName(tenant_name));
  const std::string tenant(tenant_name);
  MutexLock lock(&mu_);
  Result<Tenant*> t = Find(tenant);
  if (!t.ok()) return t.status();
  // A version this node has not seen yet was made by another node: G4 has it.
  if (number > (*t)->shredded_through && !(*t)->versions.contains(number)) t = Load(tenant);
  if (!t.ok()) return t.status();
  if (number <= (*t)->shredded_through) return Status::FailedPrecondition("tenant keys shredded");
  auto it = (*t)->versions.find(number);
  if (it == (*t)->versions.end()) {
    return Status::NotFound("tenant '" + tenant + "' has no key version " + std::to_string(number));
  }
  *key = it->second.dek;
  return Status::OK();
}

Result<uint32_t> ClusterKeyManager::RotateTenantKey(std::string_view tenant_name,
                                                    std::string_view actor) {
  KVTIER_RETURN_IF_ERROR(CheckKeyTenantName(tenant_name));
  const std::string tenant(tenant_name);
  MutexLock lock(&mu_);
  Result<Tenant*> t = Load(tenant);
  if (!t.ok()) return t.status();
  const uint32_t newest =
      (*t)->versions.empty() ? (*t)->shredded_through : (*t)->versions.rbegin()->first;
  if (newest == UINT32_MAX) {
    return Status::ResourceExhausted("tenant '" + tenant + "' has used every key version");
  }
  const Status created = CreateVersion(tenant, newest + 1);
  Audit(audit::AuditOp::kRotateTenantKey, tenant, actor, newest + 1, 1, created);
  KVTIER_RETURN_IF_ERROR(created);
  return newest + 1;
}

Status ClusterKeyManager::ShredTenant(std::string_view tenant_name, std::string_view actor) {
  KVTIER_RETURN_IF_ERROR(CheckKeyTenantName(tenant_name));
  const std::string tenant(tenant_name);
  MutexLock lock(&mu_);
  Status status = Ready();
  Result<std::string> component = status.ok() ? g4_->TenantComponent(tenant) : status;
  if (status.ok()) status = component.status();
  Result<std::vector<std::string>> names =
      status.ok() ? g4_->ListRecords(*component + ".") : Result<std::vector<std::string>>(status);
  uint32_t through = 0;
  uint64_t destroyed = 0;
  if (names.ok()) {
    for (const std::string& name : *names) {
      const RecordName r = ParseName(name, *component + ".");
      if (r.kind == RecordName::Kind::kOther) continue;
      through = std::max(through, r.version);
      if (r.kind == RecordName::Kind::kKey) ++destroyed;
    }
    status = destroyed == 0 ? Status::NotFound("tenant '" + tenant + "' has no keys")
                            : Status::OK();
  } else {
    status = names.status();
  }
  if (status.ok()) {
    // The marker first: from the moment it exists, no node loads these versions again.
    // Then the keys themselves.
    status = g4_->CreateRecord(*component + ".shredded." + Digits(through, 10), {});
    if (status.code() == StatusCode::kAlreadyExists) status = Status::OK();
    for (const std::string& name : *names) {
      const RecordName r = ParseName(name, *component + ".");
      if (!status.ok()) break;
      if (r.kind == RecordName::Kind::kKey || r.kind == RecordName::Kind::kReservation) {
        status = g4_->DeleteRecord(name);
      }
    }
  }
  if (status.ok() || names.ok()) {
    // Gone from this process whatever G4 said: the keys are not used here again.
    Tenant& held = tenants_[tenant];
    held.versions.clear();
    held.shredded_through = std::max(held.shredded_through, through);
  }
  if (!status.ok() && status.code() != StatusCode::kNotFound) {
    status = Status(status.code(), "tenant keys forgotten on this node but not yet destroyed in "
                                   "G4 (repeat the shred): " + std::string(status.message()));
  }
  Audit(audit::AuditOp::kShredTenant, tenant, actor, std::nullopt, destroyed, status);
  return status;
}

Status ClusterKeyManager::RotateMasterKey(const MasterKey& new_master, std::string_view actor) {
  MutexLock lock(&mu_);
  Status status = Ready();
  Result<std::vector<std::string>> names =
      status.ok() ? g4_->ListRecords("") : Result<std::vector<std::string>>(status);
  if (!names.ok()) status = names.status();
  const std::string old_id = master_.IdHex();
  std::vector<std::string> old_records;
  uint64_t rewrapped = 0;
  for (size_t i = 0; status.ok() && i < names->size(); ++i) {
    const std::string& name = (*names)[i];
    const size_t dot = name.find('.');
    if (dot == std::string::npos) continue;
    const RecordName r = ParseName(name, name.substr(0, dot + 1));
    if (r.kind != RecordName::Kind::kKey || r.key_id != old_id) continue;
    Result<std::vector<std::byte>> body = g4_->ReadRecord(name);
    if (body.status().code() == StatusCode::kNotFound) continue;  // Shredded meanwhile.
    if (!body.ok()) {
      status = body.status();
      break;
    }
    // The tenant's name is in the record (its G4 component may be a hash of it).
    std::string tenant;
    Result<WrappedDataKey> w =
        DecodeRecord(*g4_, *body, name.substr(0, dot), r.version, name, &tenant);
    if (!w.ok()) {
      status = w.status();
      break;
    }
    SecretKey dek;
    status = Unwrap(master_, tenant, *w, &dek);
    if (status.ok()) status = Wrap(new_master, tenant, dek, &*w);
    if (status.ok()) {
      status = g4_->CreateRecord(name.substr(0, name.size() - old_id.size()) + new_master.IdHex(),
                                 EncodeRecord(tenant, *w));
      if (status.code() == StatusCode::kAlreadyExists) status = Status::OK();  // A rerun.
    }
    old_records.push_back(name);
    ++rewrapped;
  }
  if (status.ok()) {
    // Every key is under the new master key now; the old wrappings go.
    for (const std::string& name : old_records) {
      status = g4_->DeleteRecord(name);
      if (!status.ok()) break;
    }
  }
  if (status.ok()) master_ = new_master;
  Audit(audit::AuditOp::kRotateMasterKey, "", actor, std::nullopt, rewrapped, status);
  return status;
}

Result<TenantKeyInfo> ClusterKeyManager::DescribeTenant(std::string_view tenant_name) {
  KVTIER_RETURN_IF_ERROR(CheckKeyTenantName(tenant_name));
  MutexLock lock(&mu_);
  Result<Tenant*> t = Load(std::string(tenant_name));
  if (!t.ok()) return t.status();
  if ((*t)->versions.empty() && (*t)->shredded_through == 0) {
    tenants_.erase(tenants_.find(tenant_name));
    return Status::NotFound("tenant '" + std::string(tenant_name) + "' has no keys");
  }
  TenantKeyInfo info;
  info.shredded = (*t)->shredded_through > 0;
  info.shredded_through = (*t)->shredded_through;
  info.live_versions = static_cast<uint32_t>((*t)->versions.size());
  info.current_version = (*t)->versions.empty() ? 0 : (*t)->versions.rbegin()->first;
  return info;
}

std::string ClusterKeyManager::master_key_id() const {
  MutexLock lock(&mu_);
  return master_.IdHex();
}

void ClusterKeyManager::ForgetTenant(std::string_view tenant) {
  MutexLock lock(&mu_);
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) tenants_.erase(it);  // Wipes the keys (SecretKey).
}

void ClusterKeyManager::Audit(audit::AuditOp op, std::string_view tenant, std::string_view actor,
                              std::optional<uint32_t> key_version, uint64_t keys,
                              const Status& result) {
  AuditKeyAct(options_.audit, env_, op, tenant, actor, key_version, keys, result);
}

}  // namespace kvtier::encryption
