#include "src/services/encryption/secret_key.h"

#include <openssl/crypto.h>

#include <algorithm>

namespace kvtier::encryption {

SecretKey::SecretKey(std::span<const uint8_t, kSecretKeyBytes> bytes) {
  std::copy(bytes.begin(), bytes.end(), bytes_.begin());
}

SecretKey::SecretKey(const SecretKey& other) : bytes_(other.bytes_) {}

SecretKey& SecretKey::operator=(const SecretKey& other) {
  bytes_ = other.bytes_;
  return *this;
}

SecretKey::~SecretKey() { Wipe(); }

void SecretKey::Wipe() { OPENSSL_cleanse(bytes_.data(), bytes_.size()); }

bool operator==(const SecretKey& a, const SecretKey& b) {
  return CRYPTO_memcmp(a.bytes_.data(), b.bytes_.data(), kSecretKeyBytes) == 0;
}

}  // namespace kvtier::encryption
