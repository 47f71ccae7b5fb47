// Incremental SHA-256 over OpenSSL's EVP interface (which uses SHA-NI/AVX2 where present).

#ifndef KVTIER_COMMON_SHA256_H_
#define KVTIER_COMMON_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX.

namespace kvtier {

// Not thread-safe; one instance per thread. Reusable: Final() resets it.
class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  // Writes the digest of everything fed since the last Final() and starts over.
  Digest Final();

 private:
  void Reset();
  evp_md_ctx_st* ctx_;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_SHA256_H_
