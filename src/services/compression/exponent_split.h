// Exponent ranks: the transform behind KV codec 2 for 16-bit floats (bf16, fp16).
//
// The exponent is what compresses in a KV block (under 3 bits of entropy); sign and mantissa
// are near-random. The transform takes each element's exponent out, replaces it by its rank
// among the block's 15 most frequent exponents (rank 15: "escaped", the exponent is listed
// apart), and packs the ranks of two elements into one byte. The entropy coder, whose speed
// is per symbol, then codes one symbol per two elements instead of one per element. Real KV
// escapes about one element in 3000. What is left of each element goes to raw planes:
//   bf16: one byte per element, the sign (bit 7) and the 7 mantissa bits;
//   fp16: one byte per element, the low 8 mantissa bits, and a bit stream of 3 bits per
//         element (bit 3i of the plane, little-endian: sign << 2 | the top 2 mantissa bits).
// Elements are handled in groups of 16 (kGroupElements).

#ifndef KVTIER_SRC_SERVICES_COMPRESSION_EXPONENT_SPLIT_H_
#define KVTIER_SRC_SERVICES_COMPRESSION_EXPONENT_SPLIT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/block_key.h"

namespace kvtier::compression {

inline constexpr size_t kGroupElements = 16;
inline constexpr uint8_t kEscapeRank = 15;
inline constexpr size_t kMaxRanks = 15;

// Rank -> exponent for the ranks in use; ranks past `count` (and the escape) map to 0.
struct ExponentTable {
  uint8_t count = 0;
  std::array<uint8_t, 16> exponent{};
};

// Elements whose rank is kEscapeRank: their indices (increasing) and exponents.
struct Escapes {
  std::vector<uint32_t> index;
  std::vector<uint8_t> exponent;
  void clear() {
    index.clear();
    exponent.clear();
  }
};

// Whether `dtype` has an exponent split; its planes (the rank plane first) and each plane's
// bytes per 8 elements.
bool HasExponentSplit(KvDtype dtype);
size_t ExponentSplitPlanes(KvDtype dtype);
size_t PlaneBytesPer8(KvDtype dtype, size_t plane);
// Exclusive upper bound of the exponent field's values.
uint32_t ExponentLimit(KvDtype dtype);

// Splits n elements (a multiple of kGroupElements): their exponents into `exponents`, one
// byte each, and the rest of each element into the raw planes, planes[1] on; planes[0], the
// ranks, is WriteRanks' to fill.
void SplitOffExponents(KvDtype dtype, const std::byte* in, size_t n, std::byte* const* planes,
                       uint8_t* exponents);

// The table for n exponents, judged on a sample of them: their 15 most frequent, or a run of
// 15 consecutive ones that escapes barely more elements (ranks by subtraction are faster to
// compute).
ExponentTable RankExponents(KvDtype dtype, const uint8_t* exponents, size_t n);

// Writes the ranks of n exponents (a multiple of kGroupElements) under `table`, two per byte,
// to `ranks`; appends the escaped elements to *escapes.
void WriteRanks(const ExponentTable& table, const uint8_t* exponents, size_t n,
                std::byte* ranks, Escapes* escapes);

// The inverse, without the escapes: an escaped element gets exponent 0. n is a multiple of
// kGroupElements.
void MergeExponents(KvDtype dtype, const ExponentTable& table, const std::byte* const* planes,
                    size_t n, std::byte* out);

// Sets the exponent of element `i` of `out` (whose exponent field is 0).
void SetExponent(KvDtype dtype, std::byte* out, size_t i, uint8_t exponent);

}  // namespace kvtier::compression

#endif  // KVTIER_SRC_SERVICES_COMPRESSION_EXPONENT_SPLIT_H_
