// AesGcm: AES-256-GCM authenticated encryption (OpenSSL 3 EVP) with reusable contexts.
//
// One object holds one encryption and one decryption context and the cipher fetched once, so
// sealing and opening allocate nothing per call. When consecutive calls use the same key the
// AES key schedule is kept and only the nonce is reset.
//
// Failure model: a tampered ciphertext, tag, nonce or associated data makes Open() return
// DataLoss and zero the whole output buffer: unauthenticated plaintext never escapes.
//
// Thread safety: thread-compatible. Use one object per thread.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_AES_GCM_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_AES_GCM_H_

#include <openssl/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kvtier/status.h"
#include "src/services/encryption/secret_key.h"

namespace kvtier::encryption {

inline constexpr size_t kGcmNonceBytes = 12;
inline constexpr size_t kGcmTagBytes = 16;
// GCM's limit for one message is 2^39 - 256 bits; kvtier blocks are far smaller.
inline constexpr uint64_t kMaxGcmMessageBytes = (uint64_t{1} << 36) - 32;

using GcmNonce = std::array<uint8_t, kGcmNonceBytes>;
using GcmTag = std::array<uint8_t, kGcmTagBytes>;

class AesGcm {
 public:
  // Internal when OpenSSL cannot provide AES-256-GCM.
  [[nodiscard]] static Result<std::unique_ptr<AesGcm>> Create();
  ~AesGcm();
  AesGcm(const AesGcm&) = delete;
  AesGcm& operator=(const AesGcm&) = delete;

  // Encrypts `plaintext` into `ciphertext` and writes the 16-byte tag, authenticating `aad`
  // too. REQUIRES: `nonce` never used before with `key` (see docs/security.md).
  // `ciphertext` may be the same buffer as `plaintext` (in place) but must not partially
  // overlap it. InvalidArgument when the sizes differ or exceed kMaxGcmMessageBytes.
  [[nodiscard]] Status Seal(const SecretKey& key, const GcmNonce& nonce,
                            std::span<const std::byte> aad, std::span<const std::byte> plaintext,
                            std::span<std::byte> ciphertext, GcmTag* tag);

  // Decrypts and authenticates. DataLoss when the tag does not match (wrong key, or any of
  // ciphertext, tag, nonce, aad altered); `plaintext` is then all zeros. Same aliasing and
  // size rules as Seal().
  [[nodiscard]] Status Open(const SecretKey& key, const GcmNonce& nonce,
                            std::span<const std::byte> aad, std::span<const std::byte> ciphertext,
                            const GcmTag& tag, std::span<std::byte> plaintext);

 private:
  AesGcm(EVP_CIPHER* cipher, EVP_CIPHER_CTX* seal_ctx, EVP_CIPHER_CTX* open_ctx);

  // Prepares `ctx` for a message under key/nonce, keeping the key schedule when `key`
  // equals *cached_key.
  Status Begin(EVP_CIPHER_CTX* ctx, bool encrypt, const SecretKey& key, const GcmNonce& nonce,
               SecretKey* cached_key, bool* keyed);

  EVP_CIPHER* const cipher_;
  EVP_CIPHER_CTX* const seal_ctx_;
  EVP_CIPHER_CTX* const open_ctx_;
  SecretKey seal_key_;
  SecretKey open_key_;
  bool seal_keyed_ = false;
  bool open_keyed_ = false;
};

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_AES_GCM_H_
