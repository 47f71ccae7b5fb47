#include "src/services/encryption/aes_gcm.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>

namespace kvtier::encryption {
namespace {

// EVP takes int lengths; larger messages go through in chunks of this size.
constexpr size_t kMaxUpdateBytes = size_t{1} << 30;

const unsigned char* Bytes(std::span<const std::byte> s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}
unsigned char* Bytes(std::span<std::byte> s) { return reinterpret_cast<unsigned char*>(s.data()); }

Status CheckSizes(size_t input, size_t output, size_t aad) {
  if (input != output) {
    return Status::InvalidArgument("AES-GCM: output size differs from input size");
  }
  if (input > kMaxGcmMessageBytes || aad > kMaxUpdateBytes) {
    return Status::InvalidArgument("AES-GCM: message too large");
  }
  return Status::OK();
}

// Runs `in` through `ctx` into `out` (same size) in int-sized chunks.
bool Update(EVP_CIPHER_CTX* ctx, bool encrypt, std::span<const std::byte> in,
            std::span<std::byte> out) {
  size_t done = 0;
  while (done < in.size()) {
    const size_t n = std::min(kMaxUpdateBytes, in.size() - done);
    int written = 0;
    const int ok = encrypt ? EVP_EncryptUpdate(ctx, Bytes(out.subspan(done)), &written,
                                               Bytes(in.subspan(done)), static_cast<int>(n))
                           : EVP_DecryptUpdate(ctx, Bytes(out.subspan(done)), &written,
                                               Bytes(in.subspan(done)), static_cast<int>(n));
    if (ok != 1 || static_cast<size_t>(written) != n) return false;
    done += n;
  }
  return true;
}

bool UpdateAad(EVP_CIPHER_CTX* ctx, bool encrypt, std::span<const std::byte> aad) {
  if (aad.empty()) return true;
  int written = 0;
  const int n = static_cast<int>(aad.size());
  return (encrypt ? EVP_EncryptUpdate(ctx, nullptr, &written, Bytes(aad), n)
                  : EVP_DecryptUpdate(ctx, nullptr, &written, Bytes(aad), n)) == 1;
}

}  // namespace

Result<std::unique_ptr<AesGcm>> AesGcm::Create() {
  EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  EVP_CIPHER_CTX* seal_ctx = EVP_CIPHER_CTX_new();
  EVP_CIPHER_CTX* open_ctx = EVP_CIPHER_CTX_new();
  if (cipher == nullptr || seal_ctx == nullptr || open_ctx == nullptr ||
      EVP_EncryptInit_ex(seal_ctx, cipher, nullptr, nullptr, nullptr) != 1 ||
      EVP_DecryptInit_ex(open_ctx, cipher, nullptr, nullptr, nullptr) != 1) {
    EVP_CIPHER_CTX_free(seal_ctx);
    EVP_CIPHER_CTX_free(open_ctx);
    EVP_CIPHER_free(cipher);
    return Status::Internal("OpenSSL does not provide AES-256-GCM");
  }
  return std::unique_ptr<AesGcm>(new AesGcm(cipher, seal_ctx, open_ctx));
}

AesGcm::AesGcm(EVP_CIPHER* cipher, EVP_CIPHER_CTX* seal_ctx, EVP_CIPHER_CTX* open_ctx)
    : cipher_(cipher), seal_ctx_(seal_ctx), open_ctx_(open_ctx) {}

AesGcm::~AesGcm() {
  // EVP_CIPHER_CTX_free cleanses the key schedule.
  EVP_CIPHER_CTX_free(seal_ctx_);
  EVP_CIPHER_CTX_free(open_ctx_);
  EVP_CIPHER_free(cipher_);
}

Status AesGcm::Begin(EVP_CIPHER_CTX* ctx, bool encrypt, const SecretKey& key,
                     const GcmNonce& nonce, SecretKey* cached_key, bool* keyed) {
  const bool same_key = *keyed && *cached_key == key;
  const unsigned char* key_bytes = same_key ? nullptr : key.data();
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx, nullptr, nullptr, key_bytes, nonce.data())
                         : EVP_DecryptInit_ex(ctx, nullptr, nullptr, key_bytes, nonce.data());
  if (ok != 1) {
    *keyed = false;
    return Status::Internal("AES-GCM: cipher initialisation failed");
  }
  if (!same_key) {
    *cached_key = key;
    *keyed = true;
  }
  return Status::OK();
}

Status AesGcm::Seal(const SecretKey& key, const GcmNonce& nonce, std::span<const std::byte> aad,
                    std::span<const std::byte> plaintext, std::span<std::byte> ciphertext,
                    GcmTag* tag) {
  KVTIER_RETURN_IF_ERROR(CheckSizes(plaintext.size(), ciphertext.size(), aad.size()));
  KVTIER_RETURN_IF_ERROR(Begin(seal_ctx_, true, key, nonce, &seal_key_, &seal_keyed_));
  unsigned char final_block[16];  // GCM emits nothing at Final; EVP still wants a buffer.
  int final_bytes = 0;
  if (!UpdateAad(seal_ctx_, true, aad) || !Update(seal_ctx_, true, plaintext, ciphertext) ||
      EVP_EncryptFinal_ex(seal_ctx_, final_block, &final_bytes) != 1 ||
      EVP_CIPHER_CTX_ctrl(seal_ctx_, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kGcmTagBytes),
                          tag->data()) != 1) {
    seal_keyed_ = false;
    OPENSSL_cleanse(ciphertext.data(), ciphertext.size());
    return Status::Internal("AES-GCM: encryption failed");
  }
  return Status::OK();
}

Status AesGcm::Open(const SecretKey& key, const GcmNonce& nonce, std::span<const std::byte> aad,
                    std::span<const std::byte> ciphertext, const GcmTag& tag,
                    std::span<std::byte> plaintext) {
  KVTIER_RETURN_IF_ERROR(CheckSizes(ciphertext.size(), plaintext.size(), aad.size()));
  KVTIER_RETURN_IF_ERROR(Begin(open_ctx_, false, key, nonce, &open_key_, &open_keyed_));
  GcmTag expected = tag;  // EVP wants a mutable buffer.
  if (!UpdateAad(open_ctx_, false, aad) || !Update(open_ctx_, false, ciphertext, plaintext) ||
      EVP_CIPHER_CTX_ctrl(open_ctx_, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kGcmTagBytes),
                          expected.data()) != 1) {
    open_keyed_ = false;
    OPENSSL_cleanse(plaintext.data(), plaintext.size());
    return Status::Internal("AES-GCM: decryption failed");
  }
  unsigned char final_block[16];
  int final_bytes = 0;
  if (EVP_DecryptFinal_ex(open_ctx_, final_block, &final_bytes) != 1) {
    OPENSSL_cleanse(plaintext.data(), plaintext.size());
    return Status::DataLoss(
        "AES-GCM: authentication failed (wrong key, or tampered data, tag, nonce or context)");
  }
  return Status::OK();
}

}  // namespace kvtier::encryption
