#include "src/services/compression/kv_codec.h"

// ZSTD_c_literalCompressionMode (stable since 1.5.0), ZSTD_registerSequenceProducer (1.5.4).
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "src/services/compression/byte_planes.h"
#include "src/services/compression/exponent_split.h"

namespace kvtier::compression {
namespace {

constexpr std::byte kMagic0{'K'};
constexpr std::byte kMagic1{'Z'};
constexpr uint32_t kRawPlaneFlag = 0x80000000u;
constexpr int kMinFrameLog = 10;  // 1 KiB
constexpr int kMaxFrameLog = 17;  // 128 KiB, zstd's block size limit: one block per frame.
// Codec 2 frames count elements; its rank plane holds half a byte per element.
constexpr int kMaxRanksFrameLog = kMaxFrameLog + 1;
// Codec 2 pays for its table only on blocks of at least this many elements, and only while
// at most one element in kMaxEscapeShare is escaped.
constexpr size_t kMinRanksElements = 1024;
constexpr size_t kMaxEscapeShare = 64;
constexpr size_t kRanksTableBytes = 16;  // K, then the exponents of ranks 0-14.
// Samples of frames: planes (and blocks) of more than kSampleMinFrames frames are judged by
// one frame in kSampleShare, spread evenly; smaller ones are coded whole.
constexpr size_t kSampleMinFrames = 2;
constexpr size_t kSampleShare = 4;
// Plain zstd over isolated frames misses the matches it would find across them: the whole
// block is coded with it when the sampled frames come within this fraction of the planes.
constexpr double kWholeBlockMargin = 0.03;

// Frame f of the `frames` frames of a sample of `count` frames spread evenly (their centres).
size_t SampledFrame(size_t i, size_t count, size_t frames) {
  return (2 * i + 1) * frames / (2 * count);
}
size_t SampleCount(size_t frames) { return std::max<size_t>(1, frames / kSampleShare); }
size_t FrameCount(size_t bytes, size_t frame_bytes) {
  return (bytes + frame_bytes - 1) / frame_bytes;
}

void PutU32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

uint32_t GetU32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

void WriteHeader(std::byte* p, KvCodecId codec, KvDtype dtype, size_t raw_size, uint8_t planes,
                 uint8_t frame_log) {
  p[0] = kMagic0;
  p[1] = kMagic1;
  p[2] = static_cast<std::byte>(codec);
  p[3] = static_cast<std::byte>(dtype);
  PutU32(p + 4, static_cast<uint32_t>(raw_size));
  p[8] = static_cast<std::byte>(planes);
  p[9] = static_cast<std::byte>(frame_log);
  p[10] = p[11] = std::byte{0};
}

Status DataLoss(const std::string& what) { return Status::DataLoss("kv payload: " + what); }

// Whether entropy coding `plane` can plausibly save `min_saving` of it, judged by the order-0
// entropy of a sample: 64 runs of 256 bytes spread evenly over the plane. Mantissa planes are
// near-random; without this test zstd spends as long finding that out as it spends coding an
// exponent plane. The plug-in estimate is biased low (by ~0.01 bit/byte for this sample
// size), so the test errs towards trying. Small planes are always tried.
bool WorthCoding(std::span<const std::byte> plane, double min_saving) {
  constexpr size_t kRuns = 64, kRunBytes = 256, kSample = kRuns * kRunBytes;
  if (plane.size() < 4 * kSample) return true;
  std::array<uint32_t, 256> count{};
  const size_t stride = (plane.size() - kRunBytes) / (kRuns - 1);
  for (size_t r = 0; r < kRuns; ++r) {
    const std::byte* run = plane.data() + r * stride;
    for (size_t i = 0; i < kRunBytes; ++i) count[static_cast<uint8_t>(run[i])]++;
  }
  double bits = 0;
  for (uint32_t c : count) {
    if (c != 0) bits -= c * std::log2(static_cast<double>(c) / kSample);
  }
  return bits / (8.0 * kSample) < 1.0 - min_saving;
}

// zstd's block-level sequence producer that parses every block as literals only. A KV plane
// has almost no repeats for LZ to find (a match search over it finds nothing and costs most
// of the compression time); what it has is a skewed byte distribution, which zstd's Huffman
// stage codes. The frames stay standard zstd frames.
size_t LiteralsOnly(void* /*state*/, ZSTD_Sequence* out, size_t capacity, const void* /*src*/,
                    size_t src_size, const void* /*dict*/, size_t /*dict_size*/, int /*level*/,
                    size_t /*window*/) {
  if (capacity < 1) return ZSTD_SEQUENCE_PRODUCER_ERROR;
  out[0] = ZSTD_Sequence{0, static_cast<unsigned>(src_size), 0, 0};
  return 1;
}

// The planes of a payload and how many bytes each holds per 8 elements (codec 2) or per 8
// groups of bytes (codec 1, one byte per group each).
struct PlaneShape {
  size_t planes = 0;
  std::array<size_t, 4> per8{};
  size_t Bytes(size_t b, size_t elements) const { return elements * per8[b] / 8; }
};

PlaneShape BytePlaneShape(size_t planes) { return {planes, {8, 8, 8, 8}}; }

PlaneShape ExponentRankShape(KvDtype dtype) {
  PlaneShape shape{ExponentSplitPlanes(dtype), {}};
  for (size_t b = 0; b < shape.planes; ++b) shape.per8[b] = PlaneBytesPer8(dtype, b);
  return shape;
}

// Codec 2: the elements of whole groups. The end of the plane descriptors: codec 1 planes
// or the codec 2 ranks table start there.
size_t RankedElements(size_t raw_size) { return raw_size / (2 * kGroupElements) * kGroupElements; }
size_t PlaneTableEnd(size_t planes) { return kKvPayloadHeaderBytes + 4 * planes; }

// Decodes the planes of `n` elements a frame at a time, the first plane starting at `pos`:
// each coded plane's next frame goes into `scratch` (or, given `direct`, the only plane
// straight to direct + start), then merge(planes, start, len) gets the frame's planes.
template <typename MergeFn>
Status DecodeFrames(ZSTD_DCtx* dctx, std::vector<std::byte>* scratch,
                    std::span<const std::byte> payload, size_t pos, const KvPayloadInfo& info,
                    const PlaneShape& shape, size_t n, std::byte* direct, MergeFn merge) {
  const size_t frame = info.frame_elements;
  std::array<size_t, 4> scratch_at{};
  size_t scratch_bytes = 0;
  for (size_t b = 0; b < shape.planes; ++b) {
    scratch_at[b] = scratch_bytes;
    scratch_bytes += shape.Bytes(b, frame);
  }
  if (direct == nullptr && scratch->size() < scratch_bytes) scratch->resize(scratch_bytes);
  std::array<const std::byte*, 4> src{}, end{};
  for (size_t b = 0; b < shape.planes; ++b) {
    src[b] = payload.data() + pos;
    pos += info.plane_bytes[b];
    end[b] = payload.data() + pos;
  }
  for (size_t start = 0; start < n; start += frame) {
    const size_t len = std::min(frame, n - start);
    std::array<const std::byte*, 4> planes{};
    for (size_t b = 0; b < shape.planes; ++b) {
      if (info.plane_raw[b]) {
        planes[b] = src[b] + shape.Bytes(b, start);
        continue;
      }
      const size_t bytes = shape.Bytes(b, len);
      const auto left = static_cast<size_t>(end[b] - src[b]);
      const size_t frame_bytes = ZSTD_findFrameCompressedSize(src[b], left);
      if (ZSTD_isError(frame_bytes)) {
        return DataLoss("plane " + std::to_string(b) + ": " + ZSTD_getErrorName(frame_bytes));
      }
      std::byte* dst = direct != nullptr ? direct + start : scratch->data() + scratch_at[b];
      const size_t rc = ZSTD_decompressDCtx(dctx, dst, bytes, src[b], frame_bytes);
      if (ZSTD_isError(rc)) return DataLoss(std::string("zstd: ") + ZSTD_getErrorName(rc));
      if (rc != bytes) return DataLoss("plane " + std::to_string(b) + " decodes to the wrong size");
      src[b] += frame_bytes;
      planes[b] = dst;
    }
    merge(planes.data(), start, len);
  }
  for (size_t b = 0; b < shape.planes; ++b) {
    if (!info.plane_raw[b] && src[b] != end[b]) {
      return DataLoss("plane " + std::to_string(b) + " has bytes past its last frame");
    }
  }
  return Status::OK();
}

}  // namespace

KvCodec::KvCodec(const KvCodecOptions& options)
    : options_(options),
      literals_cctx_(ZSTD_createCCtx()),
      lz_cctx_(ZSTD_createCCtx()),
      dctx_(ZSTD_createDCtx()) {
  frame_log_ = kMinFrameLog;
  while (frame_log_ < kMaxFrameLog && (size_t{1} << frame_log_) < options_.block_bytes) ++frame_log_;
  options_.block_bytes = size_t{1} << frame_log_;
  options_.min_saving = std::clamp(options_.min_saving, 0.0, 1.0);
  options_.zstd_level = std::clamp(options_.zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  for (ZSTD_CCtx* cctx : {literals_cctx_, lz_cctx_}) {
    if (cctx == nullptr) continue;
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, options_.zstd_level);
    // Negative (fastest) levels skip entropy-coding literals by default, and the literals are
    // everything a KV plane has to offer; keep Huffman on for them.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
  }
  if (literals_cctx_ != nullptr) {
    ZSTD_registerSequenceProducer(literals_cctx_, nullptr, &LiteralsOnly);
  }
}

KvCodec::~KvCodec() {
  ZSTD_freeCCtx(literals_cctx_);
  ZSTD_freeCCtx(lz_cctx_);
  ZSTD_freeDCtx(dctx_);
}

size_t KvCodec::MaxCompressedSize(size_t raw_size) {
  // Codecs 1 and 2 never write more than their header plus the raw bytes (codec 1 stores a
  // plane that does not shrink raw; codec 2 gives way to codec 1 when it would write more);
  // codecs 0 and 3 write less than that (codec 3 only where it beats the one chosen before).
  return kKvPayloadHeaderBytes + 4 * sizeof(uint32_t) + raw_size;
}

Result<size_t> KvCodec::CompressFrameLz(std::span<const std::byte> frame, size_t capacity) {
  const size_t bound = ZSTD_compressBound(frame.size());
  if (lz_frame_.size() < bound) lz_frame_.resize(bound);
  const size_t rc = ZSTD_compress2(lz_cctx_, lz_frame_.data(), std::min(capacity, bound),
                                   frame.data(), frame.size());
  if (!ZSTD_isError(rc)) return rc;
  if (ZSTD_getErrorCode(rc) == ZSTD_error_dstSize_tooSmall) return size_t{0};
  return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(rc));
}

Status KvCodec::CompressPlane(std::span<const std::byte> plane, size_t frame_bytes,
                              std::span<std::byte> out, size_t* written, bool* raw,
                              std::span<size_t> frame_sizes) {
  // zstd gets only the room a worthwhile result needs: running out of it means "store raw".
  const size_t budget =
      std::min(out.size(), static_cast<size_t>(static_cast<double>(plane.size()) *
                                               (1.0 - options_.min_saving)));
  const size_t frames = FrameCount(plane.size(), frame_bytes);
  *raw = true;
  *written = plane.size();
  // Skewed bytes pay as literals; near-random ones (a mantissa) only through repeats, which
  // only the match search finds. A frame where it finds none costs little more than its size:
  // zstd stores such blocks raw.
  const bool skewed = budget > 0 && WorthCoding(plane, options_.min_saving);
  const bool search = budget > 0 && options_.match_search;
  if (skewed || search) {
    plane_frames_.assign(frames, 0);
    size_t pos = 0;
    bool fits = true;
    // Neighbouring frames of a plane are alike: once the search beat the literals on a frame
    // of a skewed plane, the next frames go to the search alone (half the work), back to both
    // at the first frame the search cannot fit.
    bool search_won = false;
    for (size_t f = 0; f < frames && fits; ++f) {
      const std::span<const std::byte> frame =
          plane.subspan(f * frame_bytes, std::min(frame_bytes, plane.size() - f * frame_bytes));
      size_t size = 0;  // 0: no coding fits.
      auto literals = [&]() -> Status {
        const size_t rc = ZSTD_compress2(literals_cctx_, out.data() + pos, budget - pos,
                                         frame.data(), frame.size());
        if (!ZSTD_isError(rc)) {
          size = rc;
        } else if (ZSTD_getErrorCode(rc) != ZSTD_error_dstSize_tooSmall) {
          return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(rc));
        }
        return Status::OK();
      };
      const bool literals_first = skewed && !(search && search_won);
      if (literals_first) KVTIER_RETURN_IF_ERROR(literals());
      if (search) {
        // Kept only where it is smaller than the literals.
        Result<size_t> lz = CompressFrameLz(frame, size != 0 ? size - 1 : budget - pos);
        if (!lz.ok()) return lz.status();
        if (*lz != 0) {
          std::memcpy(out.data() + pos, lz_frame_.data(), *lz);
          size = *lz;
        }
        search_won = skewed && *lz != 0;
        if (skewed && !literals_first && *lz == 0) KVTIER_RETURN_IF_ERROR(literals());
      }
      fits = size != 0;
      plane_frames_[f] = size;
      pos += size;
    }
    if (fits) {
      for (size_t f = 0; f < frames; ++f) frame_sizes[f] += plane_frames_[f];
      *raw = false;
      *written = pos;
      return Status::OK();
    }
  }
  if (out.size() < plane.size()) return Status::Internal("kv codec: no room for a raw plane");
  std::memcpy(out.data(), plane.data(), plane.size());
  for (size_t f = 0; f < frames; ++f) {
    frame_sizes[f] += std::min(frame_bytes, plane.size() - f * frame_bytes);
  }
  return Status::OK();
}

Result<size_t> KvCodec::PreferWholeBlock(KvDtype dtype, std::span<const std::byte> in,
                                         size_t frame_input, std::span<std::byte> out,
                                         size_t planes_size) {
  if (!options_.whole_block_zstd || planes_size <= kKvPayloadHeaderBytes + 1) return planes_size;
  const size_t frames = frame_sizes_.size();
  if (frames > kSampleMinFrames) {
    // The sampled frames' planes against plain zstd over the same bytes.
    const size_t count = SampleCount(frames);
    size_t planes_bytes = 0, zstd_bytes = 0;
    for (size_t i = 0; i < count; ++i) {
      const size_t f = SampledFrame(i, count, frames);
      const size_t at = f * frame_input;
      Result<size_t> size =
          CompressFrameLz(in.subspan(at, std::min(frame_input, in.size() - at)), SIZE_MAX);
      if (!size.ok()) return size.status();
      planes_bytes += frame_sizes_[f];
      zstd_bytes += *size;
    }
    if (static_cast<double>(zstd_bytes) >=
        static_cast<double>(planes_bytes) * (1.0 + kWholeBlockMargin)) {
      return planes_size;
    }
  }
  // Only a strictly smaller frame replaces the planes.
  const size_t capacity = planes_size - kKvPayloadHeaderBytes - 1;
  if (scratch_.size() < capacity) scratch_.resize(capacity);
  const size_t rc = ZSTD_compress2(lz_cctx_, scratch_.data(), capacity, in.data(), in.size());
  if (ZSTD_isError(rc)) {
    if (ZSTD_getErrorCode(rc) == ZSTD_error_dstSize_tooSmall) return planes_size;
    return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(rc));
  }
  WriteHeader(out.data(), KvCodecId::kWholeBlockZstd, dtype, in.size(), 0, 0);
  std::memcpy(out.data() + kKvPayloadHeaderBytes, scratch_.data(), rc);
  return kKvPayloadHeaderBytes + rc;
}

Result<size_t> KvCodec::CompressExponentRanks(KvDtype dtype, std::span<const std::byte> in,
                                              std::span<std::byte> out) {
  const size_t n = RankedElements(in.size());
  if (n < kMinRanksElements) return size_t{0};
  const PlaneShape shape = ExponentRankShape(dtype);
  // The planes, then the exponents (one byte per element).
  std::array<std::byte*, 3> planes{};
  size_t split_bytes = 0;
  for (size_t b = 0; b < shape.planes; ++b) split_bytes += shape.Bytes(b, n);
  if (scratch_.size() < split_bytes + n) scratch_.resize(split_bytes + n);
  split_bytes = 0;
  for (size_t b = 0; b < shape.planes; ++b) {
    planes[b] = scratch_.data() + split_bytes;
    split_bytes += shape.Bytes(b, n);
  }
  auto* exponents = reinterpret_cast<uint8_t*>(scratch_.data() + split_bytes);
  SplitOffExponents(dtype, in.data(), n, planes.data(), exponents);
  const ExponentTable table = RankExponents(dtype, exponents, n);
  escapes_.clear();
  WriteRanks(table, exponents, n, planes[0], &escapes_);
  const size_t x = escapes_.index.size();
  if (x > n / kMaxEscapeShare) return size_t{0};
  // The ranks table and the escapes.
  std::byte* p = out.data() + PlaneTableEnd(shape.planes);
  p[0] = static_cast<std::byte>(table.count);
  std::memcpy(p + 1, table.exponent.data(), kRanksTableBytes - 1);
  PutU32(p + kRanksTableBytes, static_cast<uint32_t>(x));
  p += kRanksTableBytes + 4;
  for (size_t i = 0; i < x; ++i) {
    PutU32(p + 4 * i, escapes_.index[i]);
    p[4 * x + i] = static_cast<std::byte>(escapes_.exponent[i]);
  }
  size_t pos = static_cast<size_t>(p + 5 * x - out.data());
  // Each plane's frames cover 2^(frame_log_ + 1) elements: the rank plane's, block_bytes.
  const size_t frame = 2 * options_.block_bytes;
  frame_sizes_.assign(FrameCount(n, frame), 0);
  for (size_t b = 0; b < shape.planes; ++b) {
    size_t written = 0;
    bool raw = false;
    KVTIER_RETURN_IF_ERROR(CompressPlane({planes[b], shape.Bytes(b, n)}, shape.Bytes(b, frame),
                                         out.subspan(pos), &written, &raw, frame_sizes_));
    PutU32(out.data() + kKvPayloadHeaderBytes + 4 * b,
           static_cast<uint32_t>(written) | (raw ? kRawPlaneFlag : 0));
    pos += written;
  }
  const size_t tail = in.size() - 2 * n;
  if (pos + tail >= kKvPayloadHeaderBytes + in.size()) return size_t{0};
  std::memcpy(out.data() + pos, in.data() + 2 * n, tail);
  WriteHeader(out.data(), KvCodecId::kExponentRanksZstd, dtype, in.size(),
              static_cast<uint8_t>(shape.planes), static_cast<uint8_t>(frame_log_ + 1));
  return pos + tail;
}

Result<size_t> KvCodec::Compress(KvDtype dtype, std::span<const std::byte> in,
                                 std::span<std::byte> out) {
  const PlaneLayout layout = WriterLayout(dtype);
  const size_t width = layout.planes;
  if (width == 0) {
    return Status::InvalidArgument("unknown KV dtype " + std::to_string(static_cast<int>(dtype)));
  }
  if (in.size() > kMaxKvPayloadBytes) {
    return Status::InvalidArgument("KV block of " + std::to_string(in.size()) +
                                   " bytes exceeds the codec's limit");
  }
  if (out.size() < MaxCompressedSize(in.size())) {
    return Status::InvalidArgument("output buffer smaller than MaxCompressedSize()");
  }
  if (literals_cctx_ == nullptr || lz_cctx_ == nullptr) {
    return Status::ResourceExhausted("cannot allocate a zstd context");
  }
  if (options_.split_exponents && HasExponentSplit(dtype)) {
    Result<size_t> size = CompressExponentRanks(dtype, in, out);
    if (!size.ok()) return size;
    // 0: codec 1 instead. Codec 2 frames hold 2 * block_bytes elements of 2 bytes.
    if (*size != 0) return PreferWholeBlock(dtype, in, 4 * options_.block_bytes, out, *size);
  }
  const size_t n = in.size() / width;
  const size_t tail = in.size() - n * width;
  const size_t stored_size = kKvPayloadHeaderBytes + in.size();
  frame_sizes_.assign(FrameCount(n, options_.block_bytes), 0);
  if (n > 0) {
    // A single plane is the input itself.
    std::span<const std::byte> planes = in.first(n * width);
    if (width > 1) {
      if (scratch_.size() < n * width) scratch_.resize(n * width);
      SplitIntoPlanes(layout, in.data(), n, scratch_.data());
      planes = std::span(scratch_).first(n * width);
    }
    size_t pos = kKvPayloadHeaderBytes + 4 * width;
    for (size_t b = 0; b < width; ++b) {
      size_t written = 0;
      bool raw = false;
      KVTIER_RETURN_IF_ERROR(CompressPlane(planes.subspan(b * n, n), options_.block_bytes,
                                           out.subspan(pos), &written, &raw, frame_sizes_));
      PutU32(out.data() + kKvPayloadHeaderBytes + 4 * b,
             static_cast<uint32_t>(written) | (raw ? kRawPlaneFlag : 0));
      pos += written;
    }
    if (pos + tail < stored_size) {
      std::memcpy(out.data() + pos, in.data() + n * width, tail);
      WriteHeader(out.data(), KvCodecId::kBytePlanesZstd, dtype, in.size(),
                  static_cast<uint8_t>(width), static_cast<uint8_t>(frame_log_));
      return PreferWholeBlock(dtype, in, options_.block_bytes * width, out, pos + tail);
    }
  }
  WriteHeader(out.data(), KvCodecId::kStored, dtype, in.size(), 0, 0);
  if (!in.empty()) std::memcpy(out.data() + kKvPayloadHeaderBytes, in.data(), in.size());
  return PreferWholeBlock(dtype, in, options_.block_bytes * width, out, stored_size);
}

Result<size_t> KvCodec::Compress(KvDtype dtype, std::span<const std::byte> in,
                                 std::vector<std::byte>* out) {
  out->resize(MaxCompressedSize(in.size()));
  Result<size_t> size = Compress(dtype, in, std::span(*out));
  out->resize(size.ok() ? *size : 0);
  return size;
}

Result<KvPayloadInfo> KvCodec::Inspect(std::span<const std::byte> payload) {
  if (payload.size() < kKvPayloadHeaderBytes) return DataLoss("truncated header");
  const std::byte* p = payload.data();
  if (p[0] != kMagic0 || p[1] != kMagic1) return DataLoss("bad magic");
  KvPayloadInfo info;
  const auto codec = static_cast<uint8_t>(p[2]);
  if (codec > static_cast<uint8_t>(KvCodecId::kWholeBlockZstd)) {
    return Status::InvalidArgument("kv payload: unknown codec id " + std::to_string(codec));
  }
  info.codec = static_cast<KvCodecId>(codec);
  info.dtype = static_cast<KvDtype>(p[3]);
  if (WriterLayout(info.dtype).planes == 0) {
    return Status::InvalidArgument("kv payload: unknown dtype " +
                                   std::to_string(static_cast<int>(p[3])));
  }
  info.raw_size = GetU32(p + 4);
  const size_t planes = static_cast<uint8_t>(p[8]);
  const int frame_log = static_cast<uint8_t>(p[9]);
  if (p[10] != std::byte{0} || p[11] != std::byte{0}) {
    return DataLoss("reserved header bytes are not zero");
  }
  if (info.raw_size > kMaxKvPayloadBytes) return DataLoss("raw size exceeds the limit");
  if (info.codec == KvCodecId::kStored) {
    if (planes != 0 || frame_log != 0) return DataLoss("stored payload with planes");
    if (payload.size() != kKvPayloadHeaderBytes + info.raw_size) {
      return DataLoss("stored payload is " + std::to_string(payload.size()) +
                      " bytes, its header implies " +
                      std::to_string(kKvPayloadHeaderBytes + info.raw_size));
    }
    return info;
  }
  if (info.codec == KvCodecId::kWholeBlockZstd) {
    if (planes != 0 || frame_log != 0) return DataLoss("whole-block payload with planes");
    const std::byte* frame = p + kKvPayloadHeaderBytes;
    const size_t frame_bytes = payload.size() - kKvPayloadHeaderBytes;
    if (ZSTD_getFrameContentSize(frame, frame_bytes) != info.raw_size) {
      return DataLoss("whole block is not a zstd frame of the raw size");
    }
    const size_t coded = ZSTD_findFrameCompressedSize(frame, frame_bytes);
    if (ZSTD_isError(coded)) return DataLoss(std::string("zstd: ") + ZSTD_getErrorName(coded));
    if (coded != frame_bytes) return DataLoss("bytes past the whole block's zstd frame");
    return info;
  }
  // n: the elements (codec 2) or groups of bytes (codec 1) the planes hold.
  PlaneShape shape;
  size_t n = 0, planes_bytes = 0;
  int max_frame_log = kMaxFrameLog;
  if (info.codec == KvCodecId::kBytePlanesZstd) {
    const size_t width = ReaderLayout(info.dtype, planes).planes;
    if (width == 0) return DataLoss("plane count does not match the dtype");
    shape = BytePlaneShape(width);
    n = info.raw_size / width;
    planes_bytes = n * width;
  } else {
    if (!HasExponentSplit(info.dtype) || planes != ExponentSplitPlanes(info.dtype)) {
      return DataLoss("plane count does not match the dtype");
    }
    shape = ExponentRankShape(info.dtype);
    n = RankedElements(info.raw_size);
    planes_bytes = 2 * n;
    max_frame_log = kMaxRanksFrameLog;
    if (frame_log == 0) return DataLoss("exponent-rank payload without a frame size");
  }
  size_t pos = kKvPayloadHeaderBytes + 4 * planes;
  if (payload.size() < pos) return DataLoss("truncated plane table");
  // Frame log 0: each coded plane is one frame (payloads written before planes were framed).
  if (frame_log != 0 && (frame_log < kMinFrameLog || frame_log > max_frame_log)) {
    return DataLoss("frame size 2^" + std::to_string(frame_log) + " out of range");
  }
  info.frame_elements = frame_log == 0 ? n : size_t{1} << frame_log;
  if (info.codec == KvCodecId::kExponentRanksZstd) {
    if (payload.size() - pos < kRanksTableBytes + 4) return DataLoss("truncated ranks table");
    const size_t ranks = static_cast<uint8_t>(p[pos]);
    if (ranks == 0 || ranks > kMaxRanks) return DataLoss("bad count of ranked exponents");
    for (size_t r = 0; r < kMaxRanks; ++r) {
      const auto e = static_cast<uint8_t>(p[pos + 1 + r]);
      if (r < ranks ? e >= ExponentLimit(info.dtype) : e != 0) {
        return DataLoss("ranked exponent " + std::to_string(r) + " out of range");
      }
    }
    info.escapes = GetU32(p + pos + kRanksTableBytes);
    pos += kRanksTableBytes + 4;
    if (info.escapes > n || (payload.size() - pos) / 5 < info.escapes) {
      return DataLoss("truncated or oversized escape list");
    }
    for (size_t i = 0; i < info.escapes; ++i) {
      const uint32_t index = GetU32(p + pos + 4 * i);
      const auto exponent = static_cast<uint8_t>(p[pos + 4 * info.escapes + i]);
      if (index >= n || (i > 0 && index <= GetU32(p + pos + 4 * (i - 1))) ||
          exponent >= ExponentLimit(info.dtype)) {
        return DataLoss("escape " + std::to_string(i) + " out of order or out of range");
      }
    }
    pos += 5 * info.escapes;
  }
  for (size_t b = 0; b < planes; ++b) {
    const uint32_t desc = GetU32(p + kKvPayloadHeaderBytes + 4 * b);
    const size_t bytes = desc & ~kRawPlaneFlag;
    const bool raw = (desc & kRawPlaneFlag) != 0;
    if (bytes > payload.size() - pos) return DataLoss("truncated plane " + std::to_string(b));
    if (raw && bytes != shape.Bytes(b, n)) {
      return DataLoss("raw plane size does not match the raw size");
    }
    if (!raw && ZSTD_getFrameContentSize(p + pos, bytes) !=
                    shape.Bytes(b, std::min(n, info.frame_elements))) {
      return DataLoss("plane " + std::to_string(b) + " is not a zstd frame of the right size");
    }
    info.plane_bytes.push_back(static_cast<uint32_t>(bytes));
    info.plane_raw.push_back(raw);
    pos += bytes;
  }
  if (payload.size() - pos != info.raw_size - planes_bytes) {
    return DataLoss("payload is " + std::to_string(payload.size()) + " bytes, its planes end at " +
                    std::to_string(pos) + " with a tail of " +
                    std::to_string(info.raw_size - planes_bytes));
  }
  return info;
}

Status KvCodec::Decompress(std::span<const std::byte> payload, std::span<std::byte> out) {
  Result<KvPayloadInfo> info = Inspect(payload);
  if (!info.ok()) return info.status();
  if (out.size() != info->raw_size) {
    return Status::InvalidArgument("output is " + std::to_string(out.size()) +
                                   " bytes, the payload holds " + std::to_string(info->raw_size));
  }
  if (info->codec == KvCodecId::kStored) {
    if (!out.empty()) std::memcpy(out.data(), payload.data() + kKvPayloadHeaderBytes, out.size());
    return Status::OK();
  }
  if (dctx_ == nullptr) return Status::ResourceExhausted("cannot allocate a zstd context");
  if (info->codec == KvCodecId::kWholeBlockZstd) {
    // Inspect checked that the payload is one frame of raw_size bytes.
    const size_t rc = ZSTD_decompressDCtx(dctx_, out.data(), out.size(),
                                          payload.data() + kKvPayloadHeaderBytes,
                                          payload.size() - kKvPayloadHeaderBytes);
    if (ZSTD_isError(rc)) return DataLoss(std::string("zstd: ") + ZSTD_getErrorName(rc));
    if (rc != out.size()) return DataLoss("whole block decodes to the wrong size");
    return Status::OK();
  }
  const size_t planes = info->plane_bytes.size();
  size_t planes_at = PlaneTableEnd(planes);
  size_t planes_bytes = 0;
  Status status;
  if (info->codec == KvCodecId::kBytePlanesZstd) {
    // Frame by frame: each coded plane's next frame is decoded into scratch small enough to
    // stay in cache, then the planes are interleaved into `out`. A single coded plane is
    // decoded straight into `out`.
    const PlaneLayout layout = ReaderLayout(info->dtype, planes);
    const size_t n = info->raw_size / planes;
    planes_bytes = n * planes;
    status = DecodeFrames(dctx_, &scratch_, payload, planes_at, *info, BytePlaneShape(planes), n,
                          planes == 1 ? out.data() : nullptr,
                          [&](const std::byte* const* frame, size_t start, size_t len) {
                            if (frame[0] != out.data() + start) {
                              MergeFromPlanes(layout, frame, len, out.data() + start * planes);
                            }
                          });
  } else {
    // Inspect checked the table and the escapes (increasing, each below n).
    const KvDtype dtype = info->dtype;
    const std::byte* t = payload.data() + planes_at;
    ExponentTable table;
    table.count = static_cast<uint8_t>(t[0]);
    std::memcpy(table.exponent.data(), t + 1, kRanksTableBytes - 1);
    const std::byte* index = t + kRanksTableBytes + 4;
    const std::byte* exponent = index + 4 * info->escapes;
    planes_at += kRanksTableBytes + 4 + 5 * info->escapes;
    const size_t n = RankedElements(info->raw_size);
    planes_bytes = 2 * n;
    size_t next = 0;
    status = DecodeFrames(dctx_, &scratch_, payload, planes_at, *info, ExponentRankShape(dtype), n,
                          nullptr, [&](const std::byte* const* frame, size_t start, size_t len) {
                            MergeExponents(dtype, table, frame, len, out.data() + 2 * start);
                            for (; next < info->escapes; ++next) {
                              const uint32_t i = GetU32(index + 4 * next);
                              if (i >= start + len) break;
                              SetExponent(dtype, out.data(), i,
                                          static_cast<uint8_t>(exponent[next]));
                            }
                          });
  }
  KVTIER_RETURN_IF_ERROR(status);
  for (size_t b = 0; b < planes; ++b) planes_at += info->plane_bytes[b];
  const size_t tail = info->raw_size - planes_bytes;
  if (tail > 0) std::memcpy(out.data() + planes_bytes, payload.data() + planes_at, tail);
  return Status::OK();
}

Status KvCodec::Decompress(std::span<const std::byte> payload, std::vector<std::byte>* out) {
  Result<KvPayloadInfo> info = Inspect(payload);
  if (!info.ok()) return info.status();
  out->resize(info->raw_size);
  return Decompress(payload, std::span(*out));
}

Result<size_t> CompressKv(KvDtype dtype, std::span<const std::byte> in,
                          std::vector<std::byte>* out) {
  thread_local KvCodec codec;
  return codec.Compress(dtype, in, out);
}

Status DecompressKv(std::span<const std::byte> in, std::vector<std::byte>* out) {
  thread_local KvCodec codec;
  return codec.Decompress(in, out);
}

}  // namespace kvtier::compression
