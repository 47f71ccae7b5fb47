// Key derivation and message authentication on OpenSSL 3: HKDF-SHA256 (RFC 5869, EVP_KDF
// "HKDF"), HMAC-SHA256 (EVP_MAC "HMAC") and the operating system's CSPRNG (RAND_bytes).
//
// Thread safety: all functions are thread-safe.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_KDF_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_KDF_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/status.h"

namespace kvtier::encryption {

inline constexpr size_t kSha256Bytes = 32;

// Derives out.size() bytes (1 to 255 * 32) from input keying material `ikm`. An empty `salt`
// means the RFC's default (32 zero bytes); `info` may be empty. Internal on OpenSSL failure,
// InvalidArgument for an output size HKDF cannot produce.
[[nodiscard]] Status HkdfSha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt,
                                std::span<const uint8_t> info, std::span<uint8_t> out);

// HMAC-SHA256 of `data` under `key` (non-empty).
[[nodiscard]] Status HmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data,
                                std::array<uint8_t, kSha256Bytes>* mac);

// Fills `out` from OpenSSL's CSPRNG. Internal when the generator is not seeded.
[[nodiscard]] Status FillRandom(std::span<uint8_t> out);

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_KDF_H_
