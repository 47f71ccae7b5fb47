// Byte planes: how the KV codec (kv_codec.h, codec 1) cuts a block into planes and
// interleaves them back. Every group of `planes` bytes gives one byte to each plane: byte b of
// a bf16, fp16 or fp32 element goes to plane b. fp8 e4m3 elements go in pairs: plane 0 takes
// both low nibbles (the exponent's last bit and the mantissa: near-random) and plane 1 both
// high nibbles (sign and exponent), so the entropy coder, whose speed is per symbol, codes one
// symbol per two elements. SSE2 does 16 groups per step where the CPU has it.
//
// Thread safety: the functions are reentrant.

#ifndef KVTIER_SRC_SERVICES_COMPRESSION_BYTE_PLANES_H_
#define KVTIER_SRC_SERVICES_COMPRESSION_BYTE_PLANES_H_

#include <cstddef>

#include "kvtier/block_key.h"

namespace kvtier::compression {

struct PlaneLayout {
  size_t planes = 0;  // Also the bytes per group. 0: unknown dtype.
  bool nibbles = false;
};

// The layout a writer uses for `dtype` (kOpaqueBytes: one plane).
PlaneLayout WriterLayout(KvDtype dtype);
// The layout of a payload of `dtype` written with `planes` planes; {0} if they do not match.
PlaneLayout ReaderLayout(KvDtype dtype, size_t planes);

// Cuts n groups of `in` into layout.planes planes of n bytes each, contiguous at `planes`.
void SplitIntoPlanes(PlaneLayout layout, const std::byte* in, size_t n, std::byte* planes);
// The inverse: n groups into `out` from the planes at planes[0 .. layout.planes).
void MergeFromPlanes(PlaneLayout layout, const std::byte* const* planes, size_t n,
                     std::byte* out);

}  // namespace kvtier::compression

#endif  // KVTIER_SRC_SERVICES_COMPRESSION_BYTE_PLANES_H_
