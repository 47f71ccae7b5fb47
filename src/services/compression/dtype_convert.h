// Exact conversions between float32 and the KV-cache element types: bf16, fp16 and
// fp8-e4m3 (the "fn" variant of OCP FP8: no infinities, one NaN encoding per sign, finite
// range +-448).
//
// Float32 -> narrower type rounds to nearest, ties to even, with subnormals produced and
// read exactly. NaN stays NaN (sign and the payload's top bits kept, made quiet where the
// format has a quiet bit). bf16/fp16 overflow to infinity as IEEE rounding does. fp8-e4m3
// saturates: anything beyond +-448, infinities included, becomes +-448, the choice engines
// make when they quantize KV. Narrow -> float32 is exact.
//
// fp8 values carry a per-tensor scale, as engines quantize KV: q = e4m3(x / scale),
// x' = float(q) * scale, with scale = amax / 448 over the tensor's finite values.
//
// All functions are pure and thread-safe.

#ifndef KVTIER_SRC_SERVICES_COMPRESSION_DTYPE_CONVERT_H_
#define KVTIER_SRC_SERVICES_COMPRESSION_DTYPE_CONVERT_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::compression {

inline constexpr float kFp8E4M3Max = 448.0f;

uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t bits);

uint16_t FloatToFp16(float value);
float Fp16ToFloat(uint16_t bits);

uint8_t FloatToFp8E4M3(float value);
float Fp8E4M3ToFloat(uint8_t bits);

// amax / 448 over the finite values of `values`; 1 when there is none or amax is 0, so the
// scale is always finite and positive.
float Fp8E4M3Scale(std::span<const float> values);

// Encodes `in` as `dtype` into `out` (little-endian elements). `scale` divides each value
// first for kFp8E4M3 and must be 1 for the other types. InvalidArgument when
// out.size() != in.size() * KvDtypeBytes(dtype) or the scale is not finite and positive
// (or not 1 where unused); Unimplemented for kFp8E5M2.
Status EncodeFromFloat32(KvDtype dtype, std::span<const float> in, float scale,
                         std::span<std::byte> out);

// The inverse of EncodeFromFloat32: out = decoded elements of `in`, times `scale` for fp8.
// Same errors, with in.size() != out.size() * KvDtypeBytes(dtype).
Status DecodeToFloat32(KvDtype dtype, std::span<const std::byte> in, float scale,
                       std::span<float> out);

}  // namespace kvtier::compression

#endif  // KVTIER_SRC_SERVICES_COMPRESSION_DTYPE_CONVERT_H_
