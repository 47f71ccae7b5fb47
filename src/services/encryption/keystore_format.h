// The keystore file: every tenant's wrapped data keys, authenticated under the master key.
//
// Layout (little-endian; docs/security.md, "Keystore file"):
//   keystore := header tenant* trailer
//   header   := u32 magic 0x534B564B ("KVKS")  u16 format_version (= 1)  u16 reserved (0)
//               u8 master_key_id[16]  u64 generation  u32 tenant_count
//   tenant   := u8 name_len (1..255)  name  u32 shredded_through  u32 version_count  dek*
//   dek      := u32 version  u64 created_micros  u64 seals_reserved
//               u8 nonce[12]  u8 wrapped_key[32]  u8 tag[16]
//   trailer  := u8 mac[32]   HMAC-SHA256(keystore MAC key, every preceding byte)
//               u64 checksum XXH3-64 of every preceding byte, the MAC included
// Tenants are sorted by name and unique; a tenant's versions are ascending, unique and above
// shredded_through (every version at or below it was destroyed by a shred).
//
// Decoding checks, in order: size and checksum (DataLoss "corrupt"), magic (DataLoss), format
// version (FailedPrecondition for a newer one), master key id (FailedPrecondition "wrong master
// key"), MAC (DataLoss "authentication failed": the file was altered), then the body's
// structure (DataLoss). Nothing is trusted before the MAC has been checked.
//
// Thread safety: pure functions.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_KEYSTORE_FORMAT_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_KEYSTORE_FORMAT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "src/services/encryption/aes_gcm.h"
#include "src/services/encryption/master_key.h"
#include "src/services/encryption/secret_key.h"

namespace kvtier::encryption {

inline constexpr uint32_t kKeystoreMagic = 0x534B564B;
inline constexpr uint16_t kKeystoreFormatVersion = 1;

// One data-key version, wrapped (AES-256-GCM) under the KEK of (tenant, version).
struct WrappedDataKey {
  uint32_t version = 0;
  uint64_t created_micros = 0;  // Env::NowMicros() at creation.
  // Seals (nonces) this version may have used: reserved durably before use, so a restart
  // never reuses the budget (docs/security.md, "Nonces").
  uint64_t seals_reserved = 0;
  GcmNonce nonce{};
  std::array<uint8_t, kSecretKeyBytes> wrapped_key{};
  GcmTag tag{};
};

struct KeystoreTenant {
  std::string name;
  uint32_t shredded_through = 0;  // 0: never shredded.
  std::vector<WrappedDataKey> versions;
};

struct KeystoreContents {
  MasterKeyId master_key_id{};
  uint64_t generation = 0;  // Incremented by every write.
  std::vector<KeystoreTenant> tenants;
};

// REQUIRES: contents satisfy the ordering rules above (InvalidArgument otherwise).
[[nodiscard]] Result<std::vector<uint8_t>> EncodeKeystore(const KeystoreContents& contents,
                                                          const SecretKey& mac_key);

// `master_key_id` and `mac_key` come from the master key the caller holds.
[[nodiscard]] Result<KeystoreContents> DecodeKeystore(std::span<const uint8_t> bytes,
                                                      const MasterKeyId& master_key_id,
                                                      const SecretKey& mac_key);

// The associated data binding a wrapped key to its tenant and version:
// "KVDK" u8 tenant_len tenant u32le version.
std::vector<uint8_t> WrappedKeyAad(const std::string& tenant, uint32_t version);

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_KEYSTORE_FORMAT_H_
