// SecretKey: 32 bytes of key material that are wiped (OPENSSL_cleanse) when destroyed or
// overwritten, so that keys do not linger in freed memory.
//
// Thread safety: a value type; const methods may be called concurrently.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_SECRET_KEY_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_SECRET_KEY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier::encryption {

inline constexpr size_t kSecretKeyBytes = 32;

class SecretKey {
 public:
  SecretKey() = default;  // All zero.
  explicit SecretKey(std::span<const uint8_t, kSecretKeyBytes> bytes);
  SecretKey(const SecretKey& other);
  SecretKey& operator=(const SecretKey& other);
  ~SecretKey();

  std::span<const uint8_t, kSecretKeyBytes> bytes() const { return bytes_; }
  std::span<uint8_t, kSecretKeyBytes> mutable_bytes() { return bytes_; }
  const uint8_t* data() const { return bytes_.data(); }

  // Sets every byte to zero.
  void Wipe();

  // Constant-time comparison.
  friend bool operator==(const SecretKey& a, const SecretKey& b);

 private:
  std::array<uint8_t, kSecretKeyBytes> bytes_{};
};

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_SECRET_KEY_H_
