#include "src/services/compression/exponent_split.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVTIER_EXPONENT_SPLIT_SSSE3 1
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <numeric>

namespace kvtier::compression {
namespace {

uint16_t Load16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void Store16(std::byte* p, uint16_t v) { std::memcpy(p, &v, sizeof(v)); }

// The exponent field: bf16 bits 7-14, fp16 bits 10-14.
int ExponentShift(KvDtype dtype) { return dtype == KvDtype::kBf16 ? 7 : 10; }

// fp16: the 3-bit field of the bit stream (sign << 2 | top two mantissa bits) as it sits in
// the element's high byte, the exponent bits clear.
uint8_t Fp16FieldToHighByte(uint32_t field) {
  return static_cast<uint8_t>(((field & 4) << 5) | (field & 3));
}

// Per rank: the bits the exponent contributes to the element's low and high byte.
struct RankBytes {
  std::array<uint8_t, 16> lo{}, hi{};
};

RankBytes MakeRankBytes(KvDtype dtype, const ExponentTable& table) {
  RankBytes b;
  for (size_t r = 0; r < 16; ++r) {
    const uint16_t bits = static_cast<uint16_t>(table.exponent[r] << ExponentShift(dtype));
    b.lo[r] = static_cast<uint8_t>(bits);
    b.hi[r] = static_cast<uint8_t>(bits >> 8);
  }
  return b;
}

void MergeScalar(KvDtype dtype, const RankBytes& rb, const std::byte* const* planes, size_t n,
                 std::byte* out) {
  const auto* ranks = reinterpret_cast<const uint8_t*>(planes[0]);
  const auto* rest = reinterpret_cast<const uint8_t*>(planes[1]);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t r = (ranks[i / 2] >> (4 * (i % 2))) & 0x0f;
    uint8_t lo, hi;
    if (dtype == KvDtype::kBf16) {
      lo = static_cast<uint8_t>(rb.lo[r] | (rest[i] & 0x7f));
      hi = static_cast<uint8_t>(rb.hi[r] | (rest[i] & 0x80));
    } else {
      const auto* stream = reinterpret_cast<const uint8_t*>(planes[2]);
      const size_t bit = 3 * i;
      const uint32_t next = bit / 8 + 1 < 3 * n / 8 ? stream[bit / 8 + 1] : 0;
      const uint32_t two = stream[bit / 8] | next << 8;
      lo = rest[i];
      hi = static_cast<uint8_t>(rb.hi[r] | Fp16FieldToHighByte((two >> (bit % 8)) & 7));
    }
    out[2 * i] = static_cast<std::byte>(lo);
    out[2 * i + 1] = static_cast<std::byte>(hi);
  }
}

#if defined(KVTIER_EXPONENT_SPLIT_SSSE3)
// 32 elements per step: 16 rank bytes give two vectors of 16 ranks, each looked up in the
// rank tables with one byte shuffle per output byte lane.
__attribute__((target("ssse3"))) void MergeSsse3(KvDtype dtype, const RankBytes& rb,
                                                 const std::byte* const* planes, size_t n,
                                                 std::byte* out) {
  const __m128i map_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rb.lo.data()));
  const __m128i map_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rb.hi.data()));
  const __m128i nibble = _mm_set1_epi8(0x0f);
  const __m128i low7 = _mm_set1_epi8(0x7f);
  const __m128i sign = _mm_set1_epi8(static_cast<char>(0x80));
  const bool bf16 = dtype == KvDtype::kBf16;
  // fp16 stream: 16 elements' 48 bits. Element j's field is bit 3j: a shuffle puts the two
  // bytes holding it in 16-bit lane j, a multiply by 2^(13 - 3j % 8) moves it to the top,
  // a shift by 13 brings it down; a last shuffle turns fields into high-byte bits.
  const __m128i pairs_lo = _mm_setr_epi8(0, 1, 0, 1, 0, 1, 1, 2, 1, 2, 1, 2, 2, 3, 2, 3);
  const __m128i pairs_hi = _mm_setr_epi8(3, 4, 3, 4, 3, 4, 4, 5, 4, 5, 4, 5, 5, -1, 5, -1);
  const __m128i to_top = _mm_setr_epi16(1 << 13, 1 << 10, 1 << 7, 1 << 12, 1 << 9, 1 << 6,
                                        1 << 11, 1 << 8);
  alignas(16) std::array<uint8_t, 16> field_bytes{};
  for (uint32_t f = 0; f < 8; ++f) field_bytes[f] = Fp16FieldToHighByte(f);
  const __m128i field_to_high =
      _mm_load_si128(reinterpret_cast<const __m128i*>(field_bytes.data()));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[0] + i / 2));
    const __m128i even = _mm_and_si128(packed, nibble);
    const __m128i odd = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
    const __m128i ranks[2] = {_mm_unpacklo_epi8(even, odd), _mm_unpackhi_epi8(even, odd)};
    for (size_t k = 0; k < 2; ++k) {
      const size_t at = i + 16 * k;
      const __m128i rest = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[1] + at));
      __m128i lo, hi;
      if (bf16) {
        lo = _mm_or_si128(_mm_shuffle_epi8(map_lo, ranks[k]), _mm_and_si128(rest, low7));
        hi = _mm_or_si128(_mm_shuffle_epi8(map_hi, ranks[k]), _mm_and_si128(rest, sign));
      } else {
        // The 6 bytes of 16 elements, in two loads: one 6-byte copy through memory would
        // stall on store forwarding.
        const std::byte* stream = planes[2] + at * 3 / 8;
        uint32_t low;
        uint16_t high;
        std::memcpy(&low, stream, sizeof(low));
        std::memcpy(&high, stream + 4, sizeof(high));
        const __m128i bits = _mm_cvtsi64_si128(static_cast<long long>(low | uint64_t{high} << 32));
        const __m128i f_lo =
            _mm_srli_epi16(_mm_mullo_epi16(_mm_shuffle_epi8(bits, pairs_lo), to_top), 13);
        const __m128i f_hi =
            _mm_srli_epi16(_mm_mullo_epi16(_mm_shuffle_epi8(bits, pairs_hi), to_top), 13);
        lo = rest;
        hi = _mm_or_si128(_mm_shuffle_epi8(map_hi, ranks[k]),
                          _mm_shuffle_epi8(field_to_high, _mm_packus_epi16(f_lo, f_hi)));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * at), _mm_unpacklo_epi8(lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * at + 16), _mm_unpackhi_epi8(lo, hi));
    }
  }
  if (i < n) {
    std::array<const std::byte*, 3> tail = {planes[0] + i / 2, planes[1] + i,
                                            bf16 ? nullptr : planes[2] + i * 3 / 8};
    MergeScalar(dtype, rb, tail.data(), n - i, out + 2 * i);
  }
}

bool HasSsse3() {
  static const bool has = __builtin_cpu_supports("ssse3");
  return has;
}
#endif

// One step of the split for a dtype known at compile time (a runtime shift and mask cost the
// scalar loop a third of its speed).
template <KvDtype D>
void SplitOne(uint16_t v, size_t i, uint8_t* rest, uint8_t* stream, uint8_t* exponents) {
  constexpr int kShift = D == KvDtype::kBf16 ? 7 : 10;
  constexpr uint32_t kMask = D == KvDtype::kBf16 ? 0xff : 0x1f;
  exponents[i] = static_cast<uint8_t>((v >> kShift) & kMask);
  if constexpr (D == KvDtype::kBf16) {
    rest[i] = static_cast<uint8_t>(((v >> 8) & 0x80) | (v & 0x7f));
  } else {
    rest[i] = static_cast<uint8_t>(v);
    const size_t bit = 3 * i;
    if (bit % 8 == 0) stream[bit / 8] = 0;
    const uint32_t field = ((v >> 13) & 4) | ((v >> 8) & 3);
    stream[bit / 8] |= static_cast<uint8_t>(field << (bit % 8));
    if (bit % 8 > 5) stream[bit / 8 + 1] = static_cast<uint8_t>(field >> (8 - bit % 8));
  }
}

template <KvDtype D>
void SplitOffExponentsOf(const std::byte* in, size_t n, std::byte* const* planes,
                         uint8_t* exponents) {
  auto* rest = reinterpret_cast<uint8_t*>(planes[1]);
  auto* stream = D == KvDtype::kFp16 ? reinterpret_cast<uint8_t*>(planes[2]) : nullptr;
#if defined(__SSE2__)
  // 16 elements per step: bytes split apart with packs, the fp16 stream fields gathered with
  // multiply-adds.
  const __m128i low_byte = _mm_set1_epi16(0x00ff);
  for (size_t g = 0; g < n; g += kGroupElements) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * g));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * g + 16));
    const __m128i lo = _mm_packus_epi16(_mm_and_si128(a, low_byte), _mm_and_si128(b, low_byte));
    const __m128i hi = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
    __m128i e;
    if constexpr (D == KvDtype::kBf16) {
      e = _mm_packus_epi16(_mm_and_si128(_mm_srli_epi16(a, 7), low_byte),
                           _mm_and_si128(_mm_srli_epi16(b, 7), low_byte));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(rest + g),
                       _mm_or_si128(_mm_and_si128(hi, _mm_set1_epi8(static_cast<char>(0x80))),
                                    _mm_and_si128(lo, _mm_set1_epi8(0x7f))));
    } else {
      // Byte-wise shifts through 16-bit ones: the bits shifted in from the neighbour byte
      // are masked off.
      e = _mm_and_si128(_mm_srli_epi16(hi, 2), _mm_set1_epi8(0x1f));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(rest + g), lo);
      const __m128i field = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(hi, 5), _mm_set1_epi8(4)),
                                         _mm_and_si128(hi, _mm_set1_epi8(3)));
      const __m128i zero = _mm_setzero_si128();
      const __m128i pair_weights = _mm_set1_epi32(1 | (8 << 16));
      const __m128i pairs =
          _mm_packs_epi32(_mm_madd_epi16(_mm_unpacklo_epi8(field, zero), pair_weights),
                          _mm_madd_epi16(_mm_unpackhi_epi8(field, zero), pair_weights));
      const __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(1 | (64 << 16)));
      const auto q01 = static_cast<uint64_t>(_mm_cvtsi128_si64(quads));
      const auto q23 = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_srli_si128(quads, 8)));
      const uint64_t bits = (q01 & 0xfff) | ((q01 >> 32) << 12) | ((q23 & 0xfff) << 24) |
                            ((q23 >> 32) << 36);
      const auto low = static_cast<uint32_t>(bits);
      const auto high = static_cast<uint16_t>(bits >> 32);
      std::memcpy(stream + g * 3 / 8, &low, sizeof(low));
      std::memcpy(stream + g * 3 / 8 + 4, &high, sizeof(high));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(exponents + g), e);
  }
#else
  for (size_t i = 0; i < n; ++i) SplitOne<D>(Load16(in + 2 * i), i, rest, stream, exponents);
#endif
}

// Whether the table's exponents are the run exponent[0] + r.
bool IsRun(const ExponentTable& table) {
  if (table.count != kMaxRanks) return false;
  for (uint32_t r = 0; r < kMaxRanks; ++r) {
    if (table.exponent[r] != table.exponent[0] + r) return false;
  }
  return true;
}

}  // namespace

bool HasExponentSplit(KvDtype dtype) {
  return dtype == KvDtype::kBf16 || dtype == KvDtype::kFp16;
}

size_t ExponentSplitPlanes(KvDtype dtype) { return dtype == KvDtype::kBf16 ? 2 : 3; }

size_t PlaneBytesPer8(KvDtype dtype, size_t plane) {
  static constexpr size_t kBf16[] = {4, 8}, kFp16[] = {4, 8, 3};
  return dtype == KvDtype::kBf16 ? kBf16[plane] : kFp16[plane];
}

uint32_t ExponentLimit(KvDtype dtype) { return dtype == KvDtype::kBf16 ? 256 : 32; }

ExponentTable RankExponents(KvDtype dtype, const uint8_t* exponents, size_t n) {
  // Counted on a sample, an eighth of the block in runs of 256 elements, one per stretch of
  // 2048 (at least 64 runs), each starting at a pseudo-random point of its stretch so that
  // they fall on every channel whatever the row length (K has per-channel scales). The
  // table only has to be good: escapes are exact, an exponent the sample misses is escaped.
  // Eight tables, byte k of each 8 into table k, so that runs of one exponent (the common
  // case) do not wait on each other's increments.
  constexpr size_t kRun = 256, kMinRuns = 64;
  const size_t runs = std::max(kMinRuns, n / (8 * kRun));
  const size_t stretch = n / runs;
  std::array<std::array<uint32_t, 256>, 8> counts{};
  auto count_run = [&](size_t begin, size_t end) {
    size_t i = begin;
    for (; i + 8 <= end; i += 8) {
      uint64_t x;
      std::memcpy(&x, exponents + i, sizeof(x));
      for (size_t k = 0; k < 8; ++k) ++counts[k][(x >> (8 * k)) & 0xff];
    }
    for (; i < end; ++i) ++counts[0][exponents[i]];
  };
  size_t sampled = n;
  if (stretch <= kRun) {
    count_run(0, n);
  } else {
    sampled = runs * kRun;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t r = 0; r < runs; ++r) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const size_t begin = r * stretch + x % (stretch - kRun + 1);
      count_run(begin, begin + kRun);
    }
  }
  std::array<uint32_t, 256> count{};
  for (const std::array<uint32_t, 256>& c : counts) {
    for (size_t e = 0; e < 256; ++e) count[e] += c[e];
  }
  std::array<uint8_t, 256> order;
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint8_t a, uint8_t b) { return count[a] > count[b]; });
  ExponentTable table;
  uint64_t top_covered = 0;
  while (table.count < kMaxRanks && count[order[table.count]] > 0) {
    table.exponent[table.count] = order[table.count];
    top_covered += count[order[table.count]];
    ++table.count;
  }
  // Consecutive exponents rank by subtraction, 16 at a time: take the best run of 15 when it
  // escapes at most one element in 4096 more than the 15 most frequent do. KV exponents
  // mostly are such a run.
  uint64_t covered = 0, best = 0;
  uint32_t best_base = 0;
  for (uint32_t e = 0; e < ExponentLimit(dtype); ++e) {
    covered += count[e];
    if (e >= kMaxRanks) covered -= count[e - kMaxRanks];
    if (e + 1 >= kMaxRanks && covered > best) {
      best = covered;
      best_base = e + 1 - kMaxRanks;
    }
  }
  if (best + sampled / 4096 >= top_covered) {
    table.count = kMaxRanks;
    for (uint32_t r = 0; r < kMaxRanks; ++r) {
      table.exponent[r] = static_cast<uint8_t>(best_base + r);
    }
  }
  return table;
}

void SplitOffExponents(KvDtype dtype, const std::byte* in, size_t n, std::byte* const* planes,
                       uint8_t* exponents) {
  if (dtype == KvDtype::kBf16) {
    SplitOffExponentsOf<KvDtype::kBf16>(in, n, planes, exponents);
  } else {
    SplitOffExponentsOf<KvDtype::kFp16>(in, n, planes, exponents);
  }
}

void WriteRanks(const ExponentTable& table, const uint8_t* exponents, size_t n,
                std::byte* ranks_plane, Escapes* escapes) {
  std::array<uint8_t, 256> rank_of;
  rank_of.fill(kEscapeRank);
  for (uint8_t r = 0; r < table.count; ++r) rank_of[table.exponent[r]] = r;
  auto* ranks = reinterpret_cast<uint8_t*>(ranks_plane);
  auto escape = [&](size_t i) {
    escapes->index.push_back(static_cast<uint32_t>(i));
    escapes->exponent.push_back(exponents[i]);
  };
#if defined(__SSE2__)
  // 16 at a time: by subtraction from a run, else looked up one by one.
  const bool run = IsRun(table);
  const __m128i base = _mm_set1_epi8(static_cast<char>(table.exponent[0]));
  const __m128i escape_rank = _mm_set1_epi8(kEscapeRank);
  const __m128i low_byte = _mm_set1_epi16(0x00ff);
  for (size_t g = 0; g < n; g += kGroupElements) {
    __m128i r;
    if (run) {
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(exponents + g));
      r = _mm_min_epu8(_mm_sub_epi8(e, base), escape_rank);
    } else {
      alignas(16) std::array<uint8_t, kGroupElements> group;
      for (size_t j = 0; j < kGroupElements; ++j) group[j] = rank_of[exponents[g + j]];
      r = _mm_load_si128(reinterpret_cast<const __m128i*>(group.data()));
    }
    // Lane pairs (even | odd << 8) become even | odd << 4.
    const __m128i nibbles = _mm_and_si128(_mm_or_si128(r, _mm_srli_epi16(r, 4)), low_byte);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(ranks + g / 2), _mm_packus_epi16(nibbles, nibbles));
    const int escaped = _mm_movemask_epi8(_mm_cmpeq_epi8(r, escape_rank));
    if (escaped != 0) {
      for (size_t j = 0; j < kGroupElements; ++j) {
        if ((escaped >> j) & 1) escape(g + j);
      }
    }
  }
#else
  for (size_t i = 0; i < n; i += 2) {
    const uint8_t r0 = rank_of[exponents[i]], r1 = rank_of[exponents[i + 1]];
    ranks[i / 2] = static_cast<uint8_t>(r0 | (r1 << 4));
    if (r0 == kEscapeRank) escape(i);
    if (r1 == kEscapeRank) escape(i + 1);
  }
#endif
}

void MergeExponents(KvDtype dtype, const ExponentTable& table, const std::byte* const* planes,
                    size_t n, std::byte* out) {
  const RankBytes rb = MakeRankBytes(dtype, table);
#if defined(KVTIER_EXPONENT_SPLIT_SSSE3)
  if (HasSsse3()) return MergeSsse3(dtype, rb, planes, n, out);
#endif
  MergeScalar(dtype, rb, planes, n, out);
}

void SetExponent(KvDtype dtype, std::byte* out, size_t i, uint8_t exponent) {
  const int shift = ExponentShift(dtype);
  Store16(out + 2 * i, static_cast<uint16_t>(Load16(out + 2 * i) | (exponent << shift)));
}

}  // namespace kvtier::compression
