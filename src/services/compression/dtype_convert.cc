#include "src/services/compression/dtype_convert.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

namespace kvtier::compression {
namespace {

static_assert(std::endian::native == std::endian::little,
              "KV elements are stored little-endian and converted in place");

constexpr uint32_t kFloatAbsMask = 0x7FFFFFFF;
constexpr uint32_t kFloatInf = 0x7F800000;

// A binary floating-point format narrower than float32, with an implicit leading bit.
struct NarrowFormat {
  int mantissa_bits;
  int exponent_bias;
  uint32_t max_finite;  // Bit pattern (sign excluded) of the largest finite value.
  bool has_infinity;    // If so, its pattern is max_finite + 1; else overflow saturates.
  uint32_t quiet_nan;   // Pattern (sign excluded) of the NaN to produce.
};

constexpr NarrowFormat kFp16Format{10, 15, 0x7BFF, true, 0x7E00};
constexpr NarrowFormat kFp8E4M3Format{3, 7, 0x7E, false, 0x7F};

// Rounds the non-negative finite float with bits `abs_bits` to `f`, ties to even.
constexpr uint32_t RoundFiniteAbs(uint32_t abs_bits, const NarrowFormat& f) {
  const int shift = 23 - f.mantissa_bits;
  const uint32_t rebias = static_cast<uint32_t>(127 - f.exponent_bias);
  const uint32_t exponent = abs_bits >> 23;
  uint32_t r = 0;
  if (exponent > rebias) {
    // Normal in the target: rebias the exponent, round the dropped mantissa bits.
    const uint32_t rebased = abs_bits - (rebias << 23);
    r = (rebased + (1u << (shift - 1)) - 1 + ((rebased >> shift) & 1)) >> shift;
  } else {
    // Subnormal (or zero) in the target: the value in units of the smallest subnormal.
    const uint32_t mantissa = (abs_bits & 0x7FFFFF) | (exponent != 0 ? 0x800000u : 0u);
    const int sub_shift = 151 - f.exponent_bias - f.mantissa_bits -
                          static_cast<int>(exponent != 0 ? exponent : 1);
    if (sub_shift < 32) {
      r = mantissa >> sub_shift;
      const uint32_t rest = mantissa & ((1u << sub_shift) - 1);
      const uint32_t half = 1u << (sub_shift - 1);
      if (rest > half || (rest == half && (r & 1) != 0)) ++r;
    }
  }
  if (r > f.max_finite) r = f.has_infinity ? f.max_finite + 1 : f.max_finite;
  return r;
}

constexpr uint32_t FloatToNarrow(float value, const NarrowFormat& f, int total_bits) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 31) << (total_bits - 1);
  const uint32_t abs_bits = bits & kFloatAbsMask;
  if (abs_bits > kFloatInf) {
    // Keep the payload's top bits where they fit; the quiet bit is part of quiet_nan.
    return sign | f.quiet_nan | ((abs_bits & 0x7FFFFF) >> (23 - f.mantissa_bits));
  }
  if (abs_bits == kFloatInf) {
    return sign | (f.has_infinity ? f.max_finite + 1 : f.max_finite);
  }
  return sign | RoundFiniteAbs(abs_bits, f);
}

constexpr float Fp8E4M3Decode(uint8_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits >> 7) << 31;
  const uint32_t exponent = (bits >> 3) & 0xF;
  const uint32_t mantissa = bits & 0x7;
  if ((bits & 0x7F) == 0x7F) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) / 512.0f;  // mantissa x 2^-9
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 120) << 23) | (mantissa << 20));
}

constexpr std::array<float, 256> MakeFp8E4M3Table() {
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i) table[i] = Fp8E4M3Decode(static_cast<uint8_t>(i));
  return table;
}

constexpr std::array<float, 256> kFp8E4M3Table = MakeFp8E4M3Table();

Status CheckScale(KvDtype dtype, float scale) {
  if (dtype == KvDtype::kFp8E4M3) {
    if (!(scale > 0.0f) || !std::isfinite(scale)) {
      return Status::InvalidArgument("fp8 scale must be finite and positive");
    }
  } else if (scale != 1.0f) {
    return Status::InvalidArgument("a scale other than 1 applies to fp8 only");
  }
  return Status::OK();
}

Status CheckSizes(KvDtype dtype, size_t floats, size_t bytes) {
  if (dtype == KvDtype::kFp8E5M2) {
    return Status::Unimplemented("fp8-e5m2 conversion is not implemented");
  }
  const uint32_t width = KvDtypeBytes(dtype);
  if (width == 0) {
    return Status::InvalidArgument("unknown KV dtype " + std::to_string(static_cast<int>(dtype)));
  }
  if (bytes != floats * width) {
    return Status::InvalidArgument(std::to_string(floats) + " values need " +
                                   std::to_string(floats * width) + " bytes, got " +
                                   std::to_string(bytes));
  }
  return Status::OK();
}

template <typename T>
void StoreAt(std::span<std::byte> out, size_t i, T value) {
  std::memcpy(out.data() + i * sizeof(T), &value, sizeof(T));
}

template <typename T>
T LoadAt(std::span<const std::byte> in, size_t i) {
  T value;
  std::memcpy(&value, in.data() + i * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & kFloatAbsMask) > kFloatInf) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

float Bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToFp16(float value) {
  return static_cast<uint16_t>(FloatToNarrow(value, kFp16Format, 16));
}

float Fp16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | kFloatInf | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // Exact: < 2^10 x 2^-24.
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint8_t FloatToFp8E4M3(float value) {
  return static_cast<uint8_t>(FloatToNarrow(value, kFp8E4M3Format, 8));
}

float Fp8E4M3ToFloat(uint8_t bits) { return kFp8E4M3Table[bits]; }

float Fp8E4M3Scale(std::span<const float> values) {
  float amax = 0.0f;
  for (float v : values) {
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  }
  const float scale = amax / kFp8E4M3Max;
  return scale > 0.0f ? scale : 1.0f;
}

Status EncodeFromFloat32(KvDtype dtype, std::span<const float> in, float scale,
                         std::span<std::byte> out) {
  KVTIER_RETURN_IF_ERROR(CheckSizes(dtype, in.size(), out.size()));
  KVTIER_RETURN_IF_ERROR(CheckScale(dtype, scale));
  switch (dtype) {
    case KvDtype::kBf16:
      for (size_t i = 0; i < in.size(); ++i) StoreAt(out, i, FloatToBf16(in[i]));
      break;
    case KvDtype::kFp16:
      for (size_t i = 0; i < in.size(); ++i) StoreAt(out, i, FloatToFp16(in[i]));
      break;
    case KvDtype::kFp32:
      if (!in.empty()) std::memcpy(out.data(), in.data(), in.size_bytes());
      break;
    case KvDtype::kFp8E4M3:
      for (size_t i = 0; i < in.size(); ++i) StoreAt(out, i, FloatToFp8E4M3(in[i] / scale));
      break;
    case KvDtype::kFp8E5M2:
      break;  // Rejected by CheckSizes.
  }
  return Status::OK();
}

Status DecodeToFloat32(KvDtype dtype, std::span<const std::byte> in, float scale,
                       std::span<float> out) {
  KVTIER_RETURN_IF_ERROR(CheckSizes(dtype, out.size(), in.size()));
  KVTIER_RETURN_IF_ERROR(CheckScale(dtype, scale));
  switch (dtype) {
    case KvDtype::kBf16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToFloat(LoadAt<uint16_t>(in, i));
      break;
    case KvDtype::kFp16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = Fp16ToFloat(LoadAt<uint16_t>(in, i));
      break;
    case KvDtype::kFp32:
      if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());
      break;
    case KvDtype::kFp8E4M3:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = Fp8E4M3ToFloat(LoadAt<uint8_t>(in, i)) * scale;
      }
      break;
    case KvDtype::kFp8E5M2:
      break;  // Rejected by CheckSizes.
  }
  return Status::OK();
}

}  // namespace kvtier::compression
