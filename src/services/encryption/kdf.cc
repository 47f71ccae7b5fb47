#include "src/services/encryption/kdf.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <algorithm>
#include <climits>

namespace kvtier::encryption {
namespace {

OSSL_PARAM OctetParam(const char* name, std::span<const uint8_t> bytes) {
  // OSSL_PARAM is not const-correct; OpenSSL only reads input parameters.
  return OSSL_PARAM_construct_octet_string(name, const_cast<uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

Status HkdfSha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt,
                  std::span<const uint8_t> info, std::span<uint8_t> out) {
  if (out.empty() || out.size() > 255 * kSha256Bytes) {
    return Status::InvalidArgument("HKDF-SHA256: output must be 1 to 8160 bytes");
  }
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf == nullptr ? nullptr : EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) return Status::Internal("OpenSSL does not provide HKDF");
  char digest[] = "SHA256";
  OSSL_PARAM params[5];
  size_t n = 0;
  params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  params[n++] = OctetParam(OSSL_KDF_PARAM_KEY, ikm);
  if (!salt.empty()) params[n++] = OctetParam(OSSL_KDF_PARAM_SALT, salt);
  if (!info.empty()) params[n++] = OctetParam(OSSL_KDF_PARAM_INFO, info);
  params[n] = OSSL_PARAM_construct_end();
  const int ok = EVP_KDF_derive(ctx, out.data(), out.size(), params);
  EVP_KDF_CTX_free(ctx);  // Cleanses the key it copied.
  if (ok != 1) return Status::Internal("HKDF-SHA256 derivation failed");
  return Status::OK();
}

Status HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data,
                  std::array<uint8_t, kSha256Bytes>* mac) {
  if (key.empty()) return Status::InvalidArgument("HMAC-SHA256: empty key");
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = hmac == nullptr ? nullptr : EVP_MAC_CTX_new(hmac);
  EVP_MAC_free(hmac);
  if (ctx == nullptr) return Status::Internal("OpenSSL does not provide HMAC");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_end()};
  size_t written = 0;
  const bool ok = EVP_MAC_init(ctx, key.data(), key.size(), params) == 1 &&
                  EVP_MAC_update(ctx, data.data(), data.size()) == 1 &&
                  EVP_MAC_final(ctx, mac->data(), &written, mac->size()) == 1 &&
                  written == kSha256Bytes;
  EVP_MAC_CTX_free(ctx);
  if (!ok) return Status::Internal("HMAC-SHA256 failed");
  return Status::OK();
}

Status FillRandom(std::span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    const size_t n = std::min<size_t>(out.size() - done, INT_MAX);
    if (RAND_bytes(out.data() + done, static_cast<int>(n)) != 1) {
      return Status::Internal("the CSPRNG failed to produce random bytes");
    }
    done += n;
  }
  return Status::OK();
}

}  // namespace kvtier::encryption
