// Lossless compression of KV-cache blocks, specialised by element type.
//
// Codec 1 splits a block into byte planes. fp32 gives four (byte b of each element to plane
// b). fp8 e4m3 goes in pairs of elements: one plane of their low nibbles (last exponent bit
// and mantissa) and one of their high nibbles (sign and exponent), so the entropy coder,
// whose speed is per symbol, sees one symbol per two elements. bf16 and fp16 give two planes
// (high and low bytes), fp8 e5m2 and opaque bytes one.
// Codec 2, for bf16 and fp16, takes the exponents out instead: each is replaced by its rank
// among the block's 15 most frequent exponents, two ranks to a byte, the rest of the element
// going to raw planes (exponent_split.h). The entropy coder then codes one symbol per two
// elements, which doubles decoding speed; the ratio is the same or better.
// Each coded plane is entropy-coded with zstd's Huffman stage alone (no LZ match search:
// real KV has no repeats worth its cost) and kept only where that pays; a sampled entropy
// estimate skips near-random planes without running zstd. When nothing pays the whole block
// is stored raw. Bytes past the last whole group of elements are stored raw.
//
// Payload format (little-endian), written down so that any reader can check it:
//   u8[2] magic "KZ"
//   u8    codec      0 = stored, 1 = byte planes + zstd, 2 = exponent ranks + zstd
//   u8    dtype      KvDtype value, or 0 for opaque bytes (one plane)
//   u32   raw_size   bytes of the uncompressed block, at most kMaxKvPayloadBytes
//   u8    planes     P: 0 for codec 0. Codec 1: the dtype's plane count (2 for bf16, fp16
//                    and fp8 e4m3, 4 for fp32, 1 otherwise; fp8 e4m3 payloads of an earlier
//                    writer may have 1, a plane of whole bytes). Codec 2: 2 for bf16, 3 for
//                    fp16.
//   u8    frame_log  F: each coded plane is a series of zstd frames, each covering 2^F
//                    elements (the last fewer): codec 1, F in [10, 17], 0 = one frame per
//                    plane (earlier writers); codec 2, F in [10, 18]; 0 for codec 0
//   u8[2] reserved   zero
//   P x u32          plane descriptors: bit 31 set = plane stored raw, bits 0-30 = its bytes
//   codec 2 only:
//     u8     K       exponents ranked, 1 to 15
//     u8[15]         the exponent of rank r at byte r (r < K), zero past K
//     u32    X       escaped elements (rank 15), at most N
//     X x u32        their element indices, strictly increasing, each < N
//     X x u8         their exponents
//   plane bytes, in order, each coded plane as zstd frames recording their content sizes,
//   or raw:
//     codec 1: N = raw_size / P groups of P bytes; plane b holds byte b of every group
//       (b = 0 least significant); for fp8 e4m3, plane 0 byte i = low nibbles of elements
//       2i and 2i+1 (2i in bits 0-3), plane 1 byte i = their high nibbles (2i in bits 0-3)
//     codec 2: N = 16 * floor(raw_size / 32) elements; plane 0 byte i = ranks of elements
//       2i (bits 0-3) and 2i+1 (bits 4-7); bf16 plane 1 byte i = sign << 7 | mantissa of
//       element i; fp16 plane 1 byte i = low 8 mantissa bits of element i, plane 2 = 3 bits
//       per element at bit 3i (sign << 2 | top 2 mantissa bits)
//   tail bytes (raw_size minus the bytes of the N groups or elements), raw
// Codec 0 is the header followed by exactly raw_size bytes.
//
// Decoding never trusts the header: an unknown codec or dtype is InvalidArgument (a newer
// writer, or a corrupt header), any size inconsistency, a truncated or padded payload, an
// out-of-range exponent or escape, or a failing zstd frame is DataLoss. Nothing is allocated
// for the output before the sizes add up, so a lying header cannot make the decoder allocate
// more than kMaxKvPayloadBytes. Coded planes are decoded a frame at a time into cache-sized
// scratch and interleaved from there.

#ifndef KVTIER_SRC_SERVICES_COMPRESSION_KV_CODEC_H_
#define KVTIER_SRC_SERVICES_COMPRESSION_KV_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "src/services/compression/exponent_split.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace kvtier::compression {

enum class KvCodecId : uint8_t {
  kStored = 0,
  kBytePlanesZstd = 1,
  kExponentRanksZstd = 2,
};

inline constexpr size_t kKvPayloadHeaderBytes = 12;
// The dtype of blocks whose element type is unknown: coded as one plane of bytes.
inline constexpr KvDtype kOpaqueBytes = static_cast<KvDtype>(0);
inline constexpr size_t kMaxKvPayloadBytes = size_t{1} << 30;

struct KvCodecOptions {
  // zstd level for the planes; matters only with match_search. 1 is the fastest level that
  // still entropy-codes literals (negative levels skip that, and the exponent plane then
  // barely shrinks); higher levels search harder for matches, at a large cost in speed.
  int zstd_level = 1;
  // Each coded plane is cut into zstd frames of `block_bytes`, each with its own entropy
  // tables, so they follow local statistics (one layer's exponents), and each decoded into
  // scratch that stays in cache. Rounded up to a power of two in [1 KiB, 128 KiB] (zstd's
  // block size limit).
  size_t block_bytes = 32 * 1024;
  // A plane is kept zstd-coded only when that saves at least this fraction of its size;
  // otherwise it is stored raw, which decodes at memcpy speed.
  double min_saving = 0.02;
  // Whether zstd searches the planes for repeats. Off, every plane is coded as literals only
  // (Huffman alone): twice as fast to compress. Repeats are rare in real KV; the reference
  // model's greedy continuations do loop, so on its KV match search gains ratio (bf16 1.70:1
  // against 1.47:1 in `kvtier kv bench-compress`).
  bool match_search = false;
  // Whether bf16 and fp16 blocks use codec 2 (exponent ranks) rather than codec 1 (byte
  // planes). Blocks with many exponents outside the 15 most frequent use codec 1 anyway.
  bool split_exponents = true;
};

// Description of a payload, from its header alone.
struct KvPayloadInfo {
  KvCodecId codec = KvCodecId::kStored;
  KvDtype dtype = KvDtype::kBf16;
  size_t raw_size = 0;
  // Elements per zstd frame of a coded plane (all but the last frame hold exactly this many).
  size_t frame_elements = 0;
  // Per plane: stored bytes and whether the plane is stored raw (empty for kStored).
  std::vector<uint32_t> plane_bytes;
  std::vector<bool> plane_raw;
  // Codec 2: the elements whose exponent is listed apart.
  size_t escapes = 0;
};

// Compresses and decompresses KV blocks, reusing its zstd contexts and scratch planes from
// call to call: after warm-up the span overloads allocate nothing.
// Not thread-safe: use one per thread (CompressKv/DecompressKv keep one per thread).
class KvCodec {
 public:
  explicit KvCodec(const KvCodecOptions& options = {});
  ~KvCodec();
  KvCodec(const KvCodec&) = delete;
  KvCodec& operator=(const KvCodec&) = delete;

  // Largest payload Compress() writes for `raw_size` input bytes.
  static size_t MaxCompressedSize(size_t raw_size);

  // Compresses `in`, a block of `dtype` elements, into `out` and returns the payload size.
  // REQUIRES: out.size() >= MaxCompressedSize(in.size()), else InvalidArgument.
  // InvalidArgument for an unknown dtype or in.size() > kMaxKvPayloadBytes.
  Result<size_t> Compress(KvDtype dtype, std::span<const std::byte> in, std::span<std::byte> out);
  // As above into *out, resized to the payload.
  Result<size_t> Compress(KvDtype dtype, std::span<const std::byte> in, std::vector<std::byte>* out);

  // Parses and checks the header (not the plane contents).
  static Result<KvPayloadInfo> Inspect(std::span<const std::byte> payload);

  // Decompresses `payload` into `out`, which must be exactly Inspect(payload)->raw_size
  // bytes (else InvalidArgument). On error `out` holds unspecified bytes.
  Status Decompress(std::span<const std::byte> payload, std::span<std::byte> out);
  // As above into *out, resized to the raw size.
  Status Decompress(std::span<const std::byte> payload, std::vector<std::byte>* out);

 private:
  // Codes `plane` as zstd frames of `frame_bytes` into `out`, or copies it there raw when
  // that does not pay; *written = bytes used.
  Status CompressPlane(std::span<const std::byte> plane, size_t frame_bytes,
                       std::span<std::byte> out, size_t* written, bool* raw);
  // Codec 2 into `out`; 0 when the block is left to codec 1 (too small, too many escapes, or
  // nothing saved).
  Result<size_t> CompressExponentRanks(KvDtype dtype, std::span<const std::byte> in,
                                       std::span<std::byte> out);

  KvCodecOptions options_;
  int frame_log_ = 0;  // log2 of options_.block_bytes.
  ZSTD_CCtx_s* cctx_ = nullptr;
  ZSTD_DCtx_s* dctx_ = nullptr;
  std::vector<std::byte> scratch_;  // Planes of the block being (de)compressed.
  Escapes escapes_;                 // Of the block being compressed with codec 2.
};

// KvCodec::Compress / Decompress with a default-configured codec kept per thread.
Result<size_t> CompressKv(KvDtype dtype, std::span<const std::byte> in,
                          std::vector<std::byte>* out);
Status DecompressKv(std::span<const std::byte> in, std::vector<std::byte>* out);

}  // namespace kvtier::compression

#endif  // KVTIER_SRC_SERVICES_COMPRESSION_KV_CODEC_H_
