#include "src/common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace kvtier {
namespace {

// Fetched once; the implementation object is immutable and shared between threads.
const EVP_MD* Sha256Md() {
  static const EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Allocation failure of a 200-byte context is not recoverable in any caller.
  if (ctx_ == nullptr || Sha256Md() == nullptr) std::abort();
  Reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Reset() { EVP_DigestInit_ex2(ctx_, Sha256Md(), nullptr); }

void Sha256::Update(const void* data, size_t size) { EVP_DigestUpdate(ctx_, data, size); }

Sha256::Digest Sha256::Final() {
  Digest out;
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_, out.data(), &len);
  Reset();
  return out;
}

}  // namespace kvtier
