#include "src/server/s3_checksum.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <openssl/evp.h>

#include <array>
#include <cctype>
#include <cstring>

namespace kvtier::server {
namespace {

// Tables for a reflected CRC of width T read eight bytes at a time ("slicing by 8").
template <typename T, T kPolynomial>
struct CrcTables {
  std::array<std::array<T, 256>, 8> t{};
  CrcTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      T c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};

// The register `crc` (not inverted) carried over `n` bytes at `p` by the tables.
template <typename T, T kPolynomial>
T TableCrc(T crc, const uint8_t* p, size_t n) {
  static const CrcTables<T, kPolynomial> kTables;
  const auto& t = kTables.t;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // Little-endian: the first byte is the lowest.
    const uint64_t v = word ^ crc;
    crc = static_cast<T>(t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^
                         t[4][(v >> 24) & 0xff] ^ t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^
                         t[1][(v >> 48) & 0xff] ^ t[0][v >> 56]);
  }
  for (; n > 0; ++p, --n) crc = static_cast<T>((crc >> 8) ^ t[0][(crc ^ *p) & 0xff]);
  return crc;
}

#if defined(__x86_64__)
// Folding with carry-less multiplication (PCLMULQDQ), for any reflected CRC up to 64 bits wide:
// 16-byte lanes are carried forward over the data by multiplying their two halves with x^k mod
// P, so that the message shrinks to one 16-byte block with the same CRC, which the tables
// finish (with the tail). With the reflected bit order, a lane's low half A and high half B
// stand for A(x) x^64 + B(x); moved D bits on, that is A x^(D+64) + B x^D mod P, and the
// multiplier's extra factor x is taken out of the constants: x^(D+63) and x^(D-1).
struct FoldConstants {
  __m128i by16;   // D = 128: one lane onto the next.
  __m128i by64;   // D = 512: each of four lanes onto its successor four lanes on.
  __m128i by256;  // D = 2048: each of sixteen lanes (four 512-bit registers) onto its successor.
};

// x^k mod P, reflected into 64 bits (bit i: the coefficient of x^(63 - i)). `normal` is P
// without its x^width term, in the usual (unreflected) bit order.
uint64_t ReflectedXPowMod(uint64_t normal, int width, int k) {
  const uint64_t top = uint64_t{1} << (width - 1);
  const uint64_t mask = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
  uint64_t r = 1;
  for (int i = 0; i < k; ++i) r = ((r << 1) & mask) ^ ((r & top) != 0 ? normal : 0);
  uint64_t reflected = 0;
  for (int i = 0; i < 64; ++i) reflected |= ((r >> i) & 1) << (63 - i);
  return reflected;
}

template <typename T, T kPolynomial>
const FoldConstants& FoldConstantsOf() {
  static const FoldConstants k = [] {
    constexpr int kWidth = 8 * sizeof(T);
    uint64_t normal = 0;  // kPolynomial is reflected: reverse it into the usual order.
    for (int i = 0; i < kWidth; ++i) normal |= ((uint64_t{kPolynomial} >> i) & 1) << (kWidth - 1 - i);
    auto pair = [&](int distance) {
      return _mm_set_epi64x(static_cast<int64_t>(ReflectedXPowMod(normal, kWidth, distance - 1)),
                            static_cast<int64_t>(ReflectedXPowMod(normal, kWidth, distance + 63)));
    };
    return FoldConstants{pair(128), pair(512), pair(2048)};
  }();
  return k;
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i Fold(__m128i lane, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(lane, k, 0x00),
                                     _mm_clmulepi64_si128(lane, k, 0x11)),
                       next);
}

// REQUIRES: *n >= 64. Folds the register `crc` and all but the last *n % 16 bytes at *p into
// the 16 bytes `out` (whose CRC from a zero register is theirs); advances *p and *n past them.
__attribute__((target("pclmul,sse4.1"))) void FoldLanes(uint64_t crc, const uint8_t** p, size_t* n,
                                                        const FoldConstants& k, uint8_t out[16]) {
  auto load = [](const uint8_t* at) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)); };
  const uint8_t* at = *p;
  // The register enters as if XORed into the first bytes of the data.
  __m128i x0 = _mm_xor_si128(load(at), _mm_cvtsi64_si128(static_cast<int64_t>(crc)));
  __m128i x1 = load(at + 16), x2 = load(at + 32), x3 = load(at + 48);
  at += 64;
  size_t left = *n - 64;
  for (; left >= 64; at += 64, left -= 64) {
    x0 = Fold(x0, k.by64, load(at));
    x1 = Fold(x1, k.by64, load(at + 16));
    x2 = Fold(x2, k.by64, load(at + 32));
    x3 = Fold(x3, k.by64, load(at + 48));
  }
  x1 = Fold(x0, k.by16, x1);
  x2 = Fold(x1, k.by16, x2);
  x3 = Fold(x2, k.by16, x3);
  for (; left >= 16; at += 16, left -= 16) x3 = Fold(x3, k.by16, load(at));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), x3);
  *p = at;
  *n = left;
}

// With 512-bit carry-less multiplication (VPCLMULQDQ) the same folding takes four 512-bit
// registers, sixteen lanes, at a time: 256 bytes per step. REQUIRES: *n >= 256. As FoldLanes.
#define KVTIER_VPCLMUL_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))
KVTIER_VPCLMUL_TARGET inline __m512i Fold512(__m512i lane, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(lane, k, 0x00),
                                   _mm512_clmulepi64_epi128(lane, k, 0x11), next, 0x96);  // XOR3
}

KVTIER_VPCLMUL_TARGET inline __m512i Load512(const uint8_t* at) { return _mm512_loadu_si512(at); }

KVTIER_VPCLMUL_TARGET void FoldLanes512(uint64_t crc, const uint8_t** p, size_t* n,
                                        const FoldConstants& k, uint8_t out[16]) {
  // The zero-masked forms: GCC 12's unmasked ones read an undefined register (-Wuninitialized).
  const __m512i by256 = _mm512_maskz_broadcast_i32x4(0xFFFF, k.by256);
  const __m512i by64 = _mm512_maskz_broadcast_i32x4(0xFFFF, k.by64);
  const uint8_t* at = *p;
  const __m512i first = _mm512_inserti32x4(_mm512_setzero_si512(),
                                           _mm_cvtsi64_si128(static_cast<int64_t>(crc)), 0);
  __m512i x0 = _mm512_xor_si512(Load512(at), first);
  __m512i x1 = Load512(at + 64), x2 = Load512(at + 128), x3 = Load512(at + 192);
  at += 256;
  size_t left = *n - 256;
  for (; left >= 256; at += 256, left -= 256) {
    x0 = Fold512(x0, by256, Load512(at));
    x1 = Fold512(x1, by256, Load512(at + 64));
    x2 = Fold512(x2, by256, Load512(at + 128));
    x3 = Fold512(x3, by256, Load512(at + 192));
  }
  x1 = Fold512(x0, by64, x1);
  x2 = Fold512(x1, by64, x2);
  x3 = Fold512(x2, by64, x3);
  for (; left >= 64; at += 64, left -= 64) x3 = Fold512(x3, by64, Load512(at));
  // The register's four 128-bit lanes, in the order of their bytes, each onto the next.
  __m128i r = Fold(_mm512_maskz_extracti32x4_epi32(0xF, x3, 0), k.by16,
                   _mm512_maskz_extracti32x4_epi32(0xF, x3, 1));
  r = Fold(r, k.by16, _mm512_maskz_extracti32x4_epi32(0xF, x3, 2));
  r = Fold(r, k.by16, _mm512_maskz_extracti32x4_epi32(0xF, x3, 3));
  for (; left >= 16; at += 16, left -= 16) {
    r = Fold(r, k.by16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), r);
  *p = at;
  *n = left;
}

bool HaveCarrylessMultiply() {
  static const bool have = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return have;
}

bool HaveVectorCarrylessMultiply() {
  static const bool have = HaveCarrylessMultiply() && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("vpclmulqdq");
  return have;
}
#endif

template <typename T, T kPolynomial>
T ReflectedCrc(T crc, std::span<const std::byte> data) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t n = data.size();
  crc = ~crc;
#if defined(__x86_64__)
  if (n >= 64 && HaveCarrylessMultiply()) {
    uint8_t folded[16];
    if (n >= 256 && HaveVectorCarrylessMultiply()) {
      FoldLanes512(crc, &p, &n, FoldConstantsOf<T, kPolynomial>(), folded);
    } else {
      FoldLanes(crc, &p, &n, FoldConstantsOf<T, kPolynomial>(), folded);
    }
    crc = TableCrc<T, kPolynomial>(0, folded, sizeof(folded));
  }
#endif
  return ~TableCrc<T, kPolynomial>(crc, p, n);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

constexpr std::array<std::pair<std::string_view, S3ChecksumAlgorithm>, 5> kFlexible = {{
    {"crc32", S3ChecksumAlgorithm::kCrc32},
    {"crc32c", S3ChecksumAlgorithm::kCrc32c},
    {"crc64nvme", S3ChecksumAlgorithm::kCrc64Nvme},
    {"sha1", S3ChecksumAlgorithm::kSha1},
    {"sha256", S3ChecksumAlgorithm::kSha256},
}};

}  // namespace

uint32_t Crc32(uint32_t crc, std::span<const std::byte> data) {
  return ReflectedCrc<uint32_t, 0xEDB88320u>(crc, data);
}
uint32_t Crc32c(uint32_t crc, std::span<const std::byte> data) {
  return ReflectedCrc<uint32_t, 0x82F63B78u>(crc, data);
}
uint64_t Crc64Nvme(uint64_t crc, std::span<const std::byte> data) {
  return ReflectedCrc<uint64_t, 0x9A6C9329AC4BC9B5ull>(crc, data);
}

std::optional<S3ChecksumAlgorithm> ChecksumOfHeader(std::string_view name) {
  constexpr std::string_view kPrefix = "x-amz-checksum-";
  const std::string lower = Lower(name);
  if (lower.size() <= kPrefix.size() || lower.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  return ChecksumOfName(std::string_view(lower).substr(kPrefix.size()));
}

std::optional<S3ChecksumAlgorithm> ChecksumOfName(std::string_view name) {
  const std::string lower = Lower(name);
  for (const auto& [n, algorithm] : kFlexible) {
    if (lower == n) return algorithm;
  }
  return std::nullopt;
}

std::string_view ChecksumHeader(S3ChecksumAlgorithm algorithm) {
  switch (algorithm) {
    case S3ChecksumAlgorithm::kCrc32: return "x-amz-checksum-crc32";
    case S3ChecksumAlgorithm::kCrc32c: return "x-amz-checksum-crc32c";
    case S3ChecksumAlgorithm::kCrc64Nvme: return "x-amz-checksum-crc64nvme";
    case S3ChecksumAlgorithm::kSha1: return "x-amz-checksum-sha1";
    case S3ChecksumAlgorithm::kSha256: return "x-amz-checksum-sha256";
    case S3ChecksumAlgorithm::kMd5: break;
  }
  return "content-md5";
}

struct S3Checksum::Digest {
  struct Free {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx{EVP_MD_CTX_new()};
};

S3Checksum::S3Checksum(S3ChecksumAlgorithm algorithm) : algorithm_(algorithm) {
  const EVP_MD* md = algorithm == S3ChecksumAlgorithm::kSha1     ? EVP_sha1()
                     : algorithm == S3ChecksumAlgorithm::kSha256 ? EVP_sha256()
                     : algorithm == S3ChecksumAlgorithm::kMd5    ? EVP_md5()
                                                                 : nullptr;
  if (md != nullptr) {
    digest_ = std::make_unique<Digest>();
    EVP_DigestInit_ex(digest_->ctx.get(), md, nullptr);
  }
}

S3Checksum::~S3Checksum() = default;
S3Checksum::S3Checksum(S3Checksum&&) noexcept = default;
S3Checksum& S3Checksum::operator=(S3Checksum&&) noexcept = default;

void S3Checksum::Update(std::span<const std::byte> data) {
  switch (algorithm_) {
    case S3ChecksumAlgorithm::kCrc32: crc_ = Crc32(static_cast<uint32_t>(crc_), data); return;
    case S3ChecksumAlgorithm::kCrc32c: crc_ = Crc32c(static_cast<uint32_t>(crc_), data); return;
    case S3ChecksumAlgorithm::kCrc64Nvme: crc_ = Crc64Nvme(crc_, data); return;
    case S3ChecksumAlgorithm::kSha1:
    case S3ChecksumAlgorithm::kSha256:
    case S3ChecksumAlgorithm::kMd5: EVP_DigestUpdate(digest_->ctx.get(), data.data(), data.size());
  }
}

std::vector<uint8_t> S3Checksum::Finish() {
  std::array<uint8_t, EVP_MAX_MD_SIZE> out{};
  size_t n = 0;
  if (digest_ != nullptr) {
    unsigned len = 0;
    EVP_DigestFinal_ex(digest_->ctx.get(), out.data(), &len);
    n = len;
  } else {
    n = algorithm_ == S3ChecksumAlgorithm::kCrc64Nvme ? 8 : 4;
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(crc_ >> (8 * (n - 1 - i)));
  }
  return {out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n)};
}

std::string S3Checksum::FinishBase64() { return Base64Encode(Finish()); }

std::string Base64Encode(std::span<const uint8_t> data) {
  std::string out(4 * ((data.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data.data(),
                                static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string Md5Hex(std::span<const std::byte> data) {
  std::array<uint8_t, EVP_MAX_MD_SIZE> md{};
  unsigned len = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_md5(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

}  // namespace kvtier::server
