// RecordCipher: seals and opens stored KV blocks (records) under their tenant's data key.
//
// The decorator the tiers wrap around their payload I/O: each record gets a fresh random
// 96-bit nonce and the tenant's current key version; the associated data (RecordAad) binds
// the ciphertext to its block key, its tenant and the record format version, so a record
// moved to another key, another tenant or read as another format fails authentication.
// What a record must store besides the ciphertext is a SealedRecordInfo: key version, nonce,
// tag (the disk record header has room for all three; docs/disk_format.md).
//
// Errors on Open: DataLoss for a record that does not authenticate (tampered, or sealed under
// another tenant's key); FailedPrecondition "tenant keys shredded" once the tenant's keys are
// gone; NotFound for a key version this keystore never had. Plaintext is never returned on
// error (the output buffer is zeroed).
//
// Thread safety: thread-compatible; use one RecordCipher per thread (they may share one
// KeyManager).

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_RECORD_CIPHER_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_RECORD_CIPHER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "src/services/encryption/aes_gcm.h"
#include "src/services/encryption/key_service.h"

namespace kvtier::encryption {

// Associated data of a record, layout version 1 (docs/security.md, "Associated data"):
//   u8[4]  "KVA1"          purpose and layout version of these bytes
//   u16le  format_version  version of the record format that carries the ciphertext
//   u8     tenant_len      1..255
//   u8[]   tenant          the namespace owner, as stored in the record header
//   u8[32] block key       identifies the namespace (model, layout, TP rank) and the tokens
//   u8[]   context         what the caller binds besides (BlockCodec: the payload codec and
//                          the block's length), at most kMaxContextBytes; may be empty
// Held inline: building it allocates nothing.
class RecordAad {
 public:
  static constexpr size_t kMaxContextBytes = 16;
  static constexpr size_t kMaxBytes = 4 + 2 + 1 + 255 + kBlockKeySize + kMaxContextBytes;

  // InvalidArgument for a tenant name outside 1..255 bytes or a context over
  // kMaxContextBytes.
  [[nodiscard]] static Result<RecordAad> Build(uint16_t format_version, std::string_view tenant,
                                               const BlockKey& key,
                                               std::span<const std::byte> context = {});

  std::span<const std::byte> bytes() const { return std::span(bytes_).first(size_); }

 private:
  RecordAad() = default;
  std::array<std::byte, kMaxBytes> bytes_{};
  size_t size_ = 0;
};

struct SealedRecordInfo {
  uint32_t key_version = 0;
  GcmNonce nonce{};
  GcmTag tag{};
};

class RecordCipher {
 public:
  // `keys` is not owned and must outlive the cipher.
  [[nodiscard]] static Result<std::unique_ptr<RecordCipher>> Create(KeyService* keys);

  // Encrypts `plaintext` into `ciphertext` (same size; may be the same buffer) under
  // `tenant`'s current key. Errors: InvalidArgument for bad sizes or names; the KeyService's
  // errors (a keystore that cannot record the nonce budget).
  // `context` is bound as the tail of the associated data (RecordAad).
  [[nodiscard]] Result<SealedRecordInfo> Seal(uint16_t format_version, std::string_view tenant,
                                              const BlockKey& key,
                                              std::span<const std::byte> plaintext,
                                              std::span<std::byte> ciphertext,
                                              std::span<const std::byte> context = {});

  // Decrypts a record sealed by Seal() with the same format version, tenant and block key.
  // See the header comment for the errors.
  [[nodiscard]] Status Open(uint16_t format_version, std::string_view tenant, const BlockKey& key,
                            const SealedRecordInfo& info, std::span<const std::byte> ciphertext,
                            std::span<std::byte> plaintext,
                            std::span<const std::byte> context = {});

 private:
  RecordCipher(KeyService* keys, std::unique_ptr<AesGcm> gcm) : keys_(keys), gcm_(std::move(gcm)) {}

  KeyService* const keys_;
  const std::unique_ptr<AesGcm> gcm_;
};

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_RECORD_CIPHER_H_
