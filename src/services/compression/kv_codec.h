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
// Each coded plane is cut into zstd frames. A frame of a skewed plane (an exponent plane) is
// coded twice, with zstd's Huffman stage alone and with its LZ match search, and the smaller
// kept (after a frame the search won, the next frames get the search alone, until one it
// cannot fit): repeats are rare in a large model's KV, but where they occur (a greedy loop, or
// fp8's coarse steps quantising near-repeats to exact ones) the search finds them. A near-random
// plane (a mantissa; a sampled entropy estimate tells the two kinds apart) is coded with the
// search alone, which only repeats make pay. A plane is kept coded only where that saves
// min_saving, else stored raw.
// Codec 3 stores the whole block as one zstd frame of its raw bytes (LZ at the configured
// level), for blocks that plain zstd stores smaller than the planes do: a sample of frames is
// coded both ways, and where plain zstd comes within 3% the whole block is, and the smaller
// kept. A block ends up larger than zstd alone would store it only where that sample
// misleads. When nothing pays the whole block is stored raw. Bytes past the last whole group
// of elements are stored raw.
//
// Payload format (little-endian), written down so that any reader can check it:
//   u8[2] magic "KZ"
//   u8    codec      0 = stored, 1 = byte planes + zstd, 2 = exponent ranks + zstd,
//                    3 = whole block, one zstd frame
//   u8    dtype      KvDtype value, or 0 for opaque bytes (one plane)
//   u32   raw_size   bytes of the uncompressed block, at most kMaxKvPayloadBytes
//   u8    planes     P: 0 for codecs 0 and 3. Codec 1: the dtype's plane count (2 for bf16,
//                    fp16 and fp8 e4m3, 4 for fp32, 1 otherwise; fp8 e4m3 payloads of an
//                    earlier writer may have 1, a plane of whole bytes). Codec 2: 2 for bf16,
//                    3 for fp16.
//   u8    frame_log  F: each coded plane is a series of zstd frames, each covering 2^F
//                    elements (the last fewer): codec 1, F in [10, 17], 0 = one frame per
//                    plane (earlier writers); codec 2, F in [10, 18]; 0 for codecs 0, 3
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
// Codec 0 is the header followed by exactly raw_size bytes. Codec 3 is the header followed by
// exactly one zstd frame that records its content size, raw_size, and ends the payload.
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
  kWholeBlockZstd = 3,
};

inline constexpr size_t kKvPayloadHeaderBytes = 12;
// The dtype of blocks whose element type is unknown: coded as one plane of bytes.
inline constexpr KvDtype kOpaqueBytes = static_cast<KvDtype>(0);
inline constexpr size_t kMaxKvPayloadBytes = size_t{1} << 30;

struct KvCodecOptions {
  // zstd level of the match search and of codec 3 (literals alone do not depend on it). 1 is
  // the fastest level that still entropy-codes literals (negative levels skip that, and the
  // exponent plane then barely shrinks); higher levels search harder for matches, at a large
  // cost in speed.
  int zstd_level = 1;
  // Each coded plane is cut into zstd frames of `block_bytes`, each with its own entropy
  // tables, so they follow local statistics (one layer's exponents), and each decoded into
  // scratch that stays in cache. Rounded up to a power of two in [1 KiB, 128 KiB] (zstd's
  // block size limit).
  size_t block_bytes = 32 * 1024;
  // A plane is kept zstd-coded only when that saves at least this fraction of its size;
  // otherwise it is stored raw, which decodes at memcpy speed.
  double min_saving = 0.02;
  // Whether zstd also searches the planes for repeats (LZ at zstd_level): each frame of a
  // skewed plane is coded with and without the search and the smaller kept, and near-random
  // planes (mantissas), which only repeats can shrink, are searched too. Off, every
  // plane is coded as literals only (Huffman alone), about twice as fast to compress. Repeats
  // are rare in a large model's KV and the search then finds nothing and loses nothing; the
  // reference model's greedy continuations loop, and on its KV (`kvtier kv bench-compress`)
  // the search takes fp8 e4m3 from 1.17:1 to 1.40:1 and bf16 from 1.48:1 to 1.68:1.
  bool match_search = true;
  // Whether a block may be stored as one zstd frame of its raw bytes (codec 3) when that is
  // smaller than the planes. Decided from a sample of frames (one in four) coded both ways,
  // so a block the planes clearly win costs a quarter of a zstd pass more; where plain zstd
  // comes close the whole block is coded both ways and the smaller kept. Codec 3 decodes at
  // zstd's speed (about 1.8 GB/s per core against the planes' 4 to 9).
  bool whole_block_zstd = true;
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
  // that does not pay; *written = bytes used. Adds each frame's stored bytes to
  // frame_sizes[frame] (one entry per frame).
  Status CompressPlane(std::span<const std::byte> plane, size_t frame_bytes,
                       std::span<std::byte> out, size_t* written, bool* raw,
                       std::span<size_t> frame_sizes);
  // Codes one frame with the match search into lz_frame_; its size, or 0 when it does not
  // fit `capacity`.
  Result<size_t> CompressFrameLz(std::span<const std::byte> frame, size_t capacity);
  // Codec 2 into `out`; 0 when the block is left to codec 1 (too small, too many escapes, or
  // nothing saved).
  Result<size_t> CompressExponentRanks(KvDtype dtype, std::span<const std::byte> in,
                                       std::span<std::byte> out);
  // Replaces the `planes_size`-byte payload of codec 1 or 2 in `out` by codec 3 when plain
  // zstd stores `in` smaller; frame_sizes_ holds the planes' bytes per frame, each frame
  // covering `frame_input` bytes of `in`. Returns the payload size.
  Result<size_t> PreferWholeBlock(KvDtype dtype, std::span<const std::byte> in,
                                  size_t frame_input, std::span<std::byte> out,
                                  size_t planes_size);

  KvCodecOptions options_;
  int frame_log_ = 0;  // log2 of options_.block_bytes.
  ZSTD_CCtx_s* literals_cctx_ = nullptr;  // Huffman stage alone.
  ZSTD_CCtx_s* lz_cctx_ = nullptr;        // With the match search, at options_.zstd_level.
  ZSTD_DCtx_s* dctx_ = nullptr;
  std::vector<std::byte> scratch_;    // Planes of the block being (de)compressed.
  std::vector<std::byte> lz_frame_;   // One frame coded with the match search.
  std::vector<size_t> frame_sizes_;   // Per frame of the block being compressed: stored bytes.
  std::vector<size_t> plane_frames_;  // Per frame of the plane being compressed: coded bytes.
  Escapes escapes_;                   // Of the block being compressed with codec 2.
};

// KvCodec::Compress / Decompress with a default-configured codec kept per thread.
Result<size_t> CompressKv(KvDtype dtype, std::span<const std::byte> in,
                          std::vector<std::byte>* out);
Status DecompressKv(std::span<const std::byte> in, std::vector<std::byte>* out);

}  // namespace kvtier::compression

#endif  // KVTIER_SRC_SERVICES_COMPRESSION_KV_CODEC_H_
