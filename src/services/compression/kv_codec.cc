#include "src/services/compression/kv_codec.h"

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_literalCompressionMode (stable since 1.5.0).
#include <zstd.h>
#include <zstd_errors.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

namespace kvtier::compression {
namespace {

constexpr std::byte kMagic0{'K'};
constexpr std::byte kMagic1{'Z'};
constexpr uint32_t kRawPlaneFlag = 0x80000000u;
constexpr size_t kMinBlockBytes = 1024;
constexpr size_t kMaxBlockBytes = 128 * 1024;

void PutU32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

uint32_t GetU32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Byte planes of an element of `dtype`; 0 for an unknown dtype.
size_t PlaneCount(KvDtype dtype) { return dtype == kOpaqueBytes ? 1 : KvDtypeBytes(dtype); }

void WriteHeader(std::byte* p, KvCodecId codec, KvDtype dtype, size_t raw_size, uint8_t planes) {
  p[0] = kMagic0;
  p[1] = kMagic1;
  p[2] = static_cast<std::byte>(codec);
  p[3] = static_cast<std::byte>(dtype);
  PutU32(p + 4, static_cast<uint32_t>(raw_size));
  p[8] = static_cast<std::byte>(planes);
  p[9] = p[10] = p[11] = std::byte{0};
}

// Plane b of n elements of width W: byte b of each element, contiguous.
template <size_t W>
void SplitPlanes(const std::byte* in, size_t n, std::byte* planes) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < W; ++b) planes[b * n + i] = in[i * W + b];
  }
}

template <size_t W>
void MergePlanes(const std::byte* const* planes, size_t n, std::byte* out) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < W; ++b) out[i * W + b] = planes[b][i];
  }
}

#if defined(__SSE2__)
// Interleaving is decompression's last pass over every byte; done a byte at a time through
// the plane pointers it ran at a fifth of memcpy speed. SSE2 (baseline on x86-64) unpacks 16
// elements per step.
void MergePlanes2(const std::byte* const* planes, size_t n, std::byte* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[0] + i));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[1] + i));
    __m128i* o = reinterpret_cast<__m128i*>(out + 2 * i);
    _mm_storeu_si128(o, _mm_unpacklo_epi8(lo, hi));
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi8(lo, hi));
  }
  MergePlanes<2>(std::array<const std::byte*, 2>{planes[0] + i, planes[1] + i}.data(), n - i,
                 out + 2 * i);
}

void MergePlanes4(const std::byte* const* planes, size_t n, std::byte* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[0] + i));
    const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[1] + i));
    const __m128i b2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[2] + i));
    const __m128i b3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[3] + i));
    const __m128i lo01 = _mm_unpacklo_epi8(b0, b1), hi01 = _mm_unpackhi_epi8(b0, b1);
    const __m128i lo23 = _mm_unpacklo_epi8(b2, b3), hi23 = _mm_unpackhi_epi8(b2, b3);
    __m128i* o = reinterpret_cast<__m128i*>(out + 4 * i);
    _mm_storeu_si128(o, _mm_unpacklo_epi16(lo01, lo23));
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(lo01, lo23));
    _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(hi01, hi23));
    _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(hi01, hi23));
  }
  MergePlanes<4>(std::array<const std::byte*, 4>{planes[0] + i, planes[1] + i, planes[2] + i,
                                                 planes[3] + i}.data(),
                 n - i, out + 4 * i);
}
#else
void MergePlanes2(const std::byte* const* planes, size_t n, std::byte* out) {
  MergePlanes<2>(planes, n, out);
}
void MergePlanes4(const std::byte* const* planes, size_t n, std::byte* out) {
  MergePlanes<4>(planes, n, out);
}
#endif

void Split(size_t width, const std::byte* in, size_t n, std::byte* planes) {
  switch (width) {
    case 2: SplitPlanes<2>(in, n, planes); break;
    case 4: SplitPlanes<4>(in, n, planes); break;
    default: std::memcpy(planes, in, n * width); break;
  }
}

void Merge(size_t width, const std::byte* const* planes, size_t n, std::byte* out) {
  switch (width) {
    case 2: MergePlanes2(planes, n, out); break;
    case 4: MergePlanes4(planes, n, out); break;
    default: std::memcpy(out, planes[0], n * width); break;
  }
}

Status DataLoss(const std::string& what) { return Status::DataLoss("kv payload: " + what); }

}  // namespace

KvCodec::KvCodec(const KvCodecOptions& options)
    : options_(options), cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()) {
  options_.block_bytes = std::clamp(options_.block_bytes, kMinBlockBytes, kMaxBlockBytes);
  options_.min_saving = std::clamp(options_.min_saving, 0.0, 1.0);
  options_.zstd_level = std::clamp(options_.zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  if (cctx_ != nullptr) {
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, options_.zstd_level);
    // Negative (fastest) levels skip entropy-coding literals by default, and the literals are
    // everything a KV plane has to offer; keep Huffman on for them.
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
  }
}

KvCodec::~KvCodec() {
  ZSTD_freeCCtx(cctx_);
  ZSTD_freeDCtx(dctx_);
}

size_t KvCodec::MaxCompressedSize(size_t raw_size) {
  // Codec 1 never writes more than its header plus the raw bytes (a plane that does not
  // shrink is stored raw); codec 0 writes less than that.
  return kKvPayloadHeaderBytes + 4 * sizeof(uint32_t) + raw_size;
}

Status KvCodec::CompressPlane(std::span<const std::byte> plane, std::span<std::byte> out,
                              size_t* written, bool* raw) {
  // zstd gets only the room a worthwhile result needs: running out of it means "store raw".
  const size_t budget = std::min(
      out.size(), static_cast<size_t>(static_cast<double>(plane.size()) * (1.0 - options_.min_saving)));
  *raw = true;
  *written = plane.size();
  if (budget > 0) {
    ZSTD_CCtx_reset(cctx_, ZSTD_reset_session_only);
    size_t rc = ZSTD_CCtx_setPledgedSrcSize(cctx_, plane.size());
    if (ZSTD_isError(rc)) return Status::Internal(ZSTD_getErrorName(rc));
    ZSTD_outBuffer dst{out.data(), budget, 0};
    bool fits = true;
    for (size_t at = 0; at < plane.size() && fits; at += options_.block_bytes) {
      const size_t len = std::min(options_.block_bytes, plane.size() - at);
      const bool last = at + len == plane.size();
      ZSTD_inBuffer src{plane.data() + at, len, 0};
      do {
        rc = ZSTD_compressStream2(cctx_, &dst, &src, last ? ZSTD_e_end : ZSTD_e_flush);
        if (ZSTD_isError(rc)) {
          if (ZSTD_getErrorCode(rc) != ZSTD_error_dstSize_tooSmall) {
            return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(rc));
          }
          fits = false;
        } else if (rc != 0 && dst.pos == dst.size) {
          fits = false;
        }
      } while (fits && rc != 0);
    }
    if (fits) {
      *raw = false;
      *written = dst.pos;
      return Status::OK();
    }
  }
  std::memcpy(out.data(), plane.data(), plane.size());
  return Status::OK();
}

Result<size_t> KvCodec::Compress(KvDtype dtype, std::span<const std::byte> in,
                                 std::span<std::byte> out) {
  const size_t width = PlaneCount(dtype);
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
  if (cctx_ == nullptr) return Status::ResourceExhausted("cannot allocate a zstd context");
  const size_t n = in.size() / width;
  const size_t tail = in.size() - n * width;
  const size_t stored_size = kKvPayloadHeaderBytes + in.size();
  if (n > 0) {
    // A single plane is the input itself.
    std::span<const std::byte> planes = in.first(n * width);
    if (width > 1) {
      if (scratch_.size() < n * width) scratch_.resize(n * width);
      Split(width, in.data(), n, scratch_.data());
      planes = std::span(scratch_).first(n * width);
    }
    size_t pos = kKvPayloadHeaderBytes + 4 * width;
    for (size_t b = 0; b < width; ++b) {
      size_t written = 0;
      bool raw = false;
      KVTIER_RETURN_IF_ERROR(
          CompressPlane(planes.subspan(b * n, n), out.subspan(pos), &written, &raw));
      PutU32(out.data() + kKvPayloadHeaderBytes + 4 * b,
             static_cast<uint32_t>(written) | (raw ? kRawPlaneFlag : 0));
      pos += written;
    }
    if (pos + tail < stored_size) {
      std::memcpy(out.data() + pos, in.data() + n * width, tail);
      WriteHeader(out.data(), KvCodecId::kBytePlanesZstd, dtype, in.size(),
                  static_cast<uint8_t>(width));
      return pos + tail;
    }
  }
  WriteHeader(out.data(), KvCodecId::kStored, dtype, in.size(), 0);
  if (!in.empty()) std::memcpy(out.data() + kKvPayloadHeaderBytes, in.data(), in.size());
  return stored_size;
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
  if (codec > static_cast<uint8_t>(KvCodecId::kBytePlanesZstd)) {
    return Status::InvalidArgument("kv payload: unknown codec id " + std::to_string(codec));
  }
  info.codec = static_cast<KvCodecId>(codec);
  info.dtype = static_cast<KvDtype>(p[3]);
  const size_t width = PlaneCount(info.dtype);
  if (width == 0) {
    return Status::InvalidArgument("kv payload: unknown dtype " +
                                   std::to_string(static_cast<int>(p[3])));
  }
  info.raw_size = GetU32(p + 4);
  const size_t planes = static_cast<uint8_t>(p[8]);
  if (p[9] != std::byte{0} || p[10] != std::byte{0} || p[11] != std::byte{0}) {
    return DataLoss("reserved header bytes are not zero");
  }
  if (info.raw_size > kMaxKvPayloadBytes) return DataLoss("raw size exceeds the limit");
  if (info.codec == KvCodecId::kStored) {
    if (planes != 0) return DataLoss("stored payload with planes");
    if (payload.size() != kKvPayloadHeaderBytes + info.raw_size) {
      return DataLoss("stored payload is " + std::to_string(payload.size()) +
                      " bytes, its header implies " +
                      std::to_string(kKvPayloadHeaderBytes + info.raw_size));
    }
    return info;
  }
  if (planes != width) return DataLoss("plane count does not match the dtype");
  const size_t table_end = kKvPayloadHeaderBytes + 4 * planes;
  if (payload.size() < table_end) return DataLoss("truncated plane table");
  const size_t n = info.raw_size / width;
  size_t pos = table_end;
  for (size_t b = 0; b < planes; ++b) {
    const uint32_t desc = GetU32(p + kKvPayloadHeaderBytes + 4 * b);
    const size_t bytes = desc & ~kRawPlaneFlag;
    const bool raw = (desc & kRawPlaneFlag) != 0;
    if (bytes > payload.size() - pos) return DataLoss("truncated plane " + std::to_string(b));
    if (raw && bytes != n) return DataLoss("raw plane size does not match the raw size");
    if (!raw && ZSTD_getFrameContentSize(p + pos, bytes) != n) {
      return DataLoss("plane " + std::to_string(b) + " is not a zstd frame of the right size");
    }
    info.plane_bytes.push_back(static_cast<uint32_t>(bytes));
    info.plane_raw.push_back(raw);
    pos += bytes;
  }
  if (payload.size() - pos != info.raw_size - n * width) {
    return DataLoss("payload is " + std::to_string(payload.size()) + " bytes, its planes end at " +
                    std::to_string(pos) + " with a tail of " +
                    std::to_string(info.raw_size - n * width));
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
  const size_t width = PlaneCount(info->dtype);
  const size_t n = info->raw_size / width;
  // A single plane decodes straight into `out`; several go through scratch and are merged.
  if (width > 1 && scratch_.size() < n * width) scratch_.resize(n * width);
  std::byte* const plane_area = width > 1 ? scratch_.data() : out.data();
  const std::byte* planes[4] = {};
  size_t pos = kKvPayloadHeaderBytes + 4 * width;
  for (size_t b = 0; b < width; ++b) {
    const std::byte* src = payload.data() + pos;
    const size_t bytes = info->plane_bytes[b];
    if (info->plane_raw[b]) {
      planes[b] = src;
    } else {
      std::byte* dst = plane_area + b * n;
      const size_t rc = ZSTD_decompressDCtx(dctx_, dst, n, src, bytes);
      if (ZSTD_isError(rc)) return DataLoss(std::string("zstd: ") + ZSTD_getErrorName(rc));
      if (rc != n) return DataLoss("plane " + std::to_string(b) + " decodes to the wrong size");
      planes[b] = dst;
    }
    pos += bytes;
  }
  if (n > 0 && planes[0] != out.data()) Merge(width, planes, n, out.data());
  const size_t tail = info->raw_size - n * width;
  if (tail > 0) std::memcpy(out.data() + n * width, payload.data() + pos, tail);
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
