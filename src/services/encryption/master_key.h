// MasterKey: the root of kvtier's key hierarchy (docs/security.md, "Key hierarchy").
//
// The master key never encrypts data. HKDF-SHA256 derives from it a key-encryption key (KEK)
// per (tenant, key version), which wraps that tenant's data keys in the keystore, a MAC key
// for the keystore, and a public 16-byte key id that tells a wrong master key apart from a
// corrupt keystore. The key bytes are wiped when the object is destroyed; no method returns
// or logs them.
//
// Thread safety: a value type; const methods may be called concurrently.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_MASTER_KEY_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_MASTER_KEY_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "src/services/encryption/secret_key.h"

namespace kvtier::encryption {

// The environment variable read by MasterKey::FromEnvironment() by default.
inline constexpr char kMasterKeyEnvVar[] = "KVTIER_MASTER_KEY";
inline constexpr size_t kMasterKeyIdBytes = 16;

using MasterKeyId = std::array<uint8_t, kMasterKeyIdBytes>;

class MasterKey {
 public:
  // Exactly 32 bytes, not all zero; InvalidArgument otherwise.
  [[nodiscard]] static Result<MasterKey> FromBytes(std::span<const uint8_t> bytes);
  // 64 hexadecimal digits; leading and trailing white space is ignored. InvalidArgument
  // otherwise (the message never quotes the input).
  [[nodiscard]] static Result<MasterKey> FromHex(std::string_view hex);
  // The contents of a key file: 32 raw bytes, or 64 hex digits and optional white space.
  // `mode` is the file's st_mode: PermissionDenied when "other" users have any access.
  [[nodiscard]] static Result<MasterKey> FromKeyFile(std::span<const uint8_t> contents,
                                                     uint32_t mode);
  // Reads a key file from the operating system's file system (not through an Env: the
  // permission check needs fstat on the descriptor that is read, so that the file checked is
  // the file read). NotFound, PermissionDenied, or FromKeyFile's errors, naming the path.
  [[nodiscard]] static Result<MasterKey> LoadFile(const std::string& path);
  // Reads the hex key from environment variable `variable`. NotFound when unset or empty.
  [[nodiscard]] static Result<MasterKey> FromEnvironment(const char* variable = kMasterKeyEnvVar);

  // A public fingerprint: HKDF(master, info "kvtier/v1/master-key-id"), 16 bytes. Safe to
  // store and print; reveals nothing about the key.
  const MasterKeyId& id() const { return id_; }
  std::string IdHex() const;

  // The KEK wrapping version `version` of `tenant`'s data key.
  [[nodiscard]] Status DeriveKek(std::string_view tenant, uint32_t version, SecretKey* kek) const;
  // The key authenticating the keystore file.
  [[nodiscard]] Status DeriveKeystoreMacKey(SecretKey* mac_key) const;

 private:
  MasterKey() = default;

  SecretKey key_;
  MasterKeyId id_{};
};

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_MASTER_KEY_H_
