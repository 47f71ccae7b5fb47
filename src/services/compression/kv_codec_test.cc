#include "src/services/compression/kv_codec.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "src/model/kv_capture.h"
#include "src/model/model_test_util.h"
#include "src/services/compression/dtype_convert.h"

namespace kvtier::compression {
namespace {

constexpr KvDtype kAllDtypes[] = {KvDtype::kBf16, KvDtype::kFp16, KvDtype::kFp32,
                                  KvDtype::kFp8E4M3, KvDtype::kFp8E5M2};

// KV-like values (Gaussian, a per-channel scale) with NaN, infinities, signed zeros and
// subnormals sprinkled in, encoded as `dtype` (e5m2 as the high byte of fp16).
std::vector<std::byte> KvLikeBlock(KvDtype dtype, size_t elements, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::nanf(""), -std::nanf(""), inf, -inf, 0.0f, -0.0f,
                            1e-40f,        -1e-42f,        6e-8f, -3e-5f, 0x1p-9f};
  std::vector<float> values(elements);
  for (size_t i = 0; i < elements; ++i) {
    values[i] = normal(rng) * static_cast<float>(1 + (i % 32)) * 0.1f;
    if (i % 97 == 0) values[i] = specials[(i / 97) % std::size(specials)];
  }
  std::vector<std::byte> block(elements * KvDtypeBytes(dtype));
  if (dtype == KvDtype::kFp8E5M2) {
    for (size_t i = 0; i < elements; ++i) {
      block[i] = static_cast<std::byte>(FloatToFp16(values[i]) >> 8);
    }
    return block;
  }
  const float scale = dtype == KvDtype::kFp8E4M3 ? Fp8E4M3Scale(values) : 1.0f;
  EXPECT_TRUE(EncodeFromFloat32(dtype, values, scale, block).ok());
  return block;
}

std::vector<std::byte> RoundTrip(KvCodec& codec, KvDtype dtype, std::span<const std::byte> in,
                                 KvPayloadInfo* info) {
  std::vector<std::byte> payload;
  Result<size_t> size = codec.Compress(dtype, in, &payload);
  EXPECT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(payload.size(), size.ok() ? *size : 0);
  EXPECT_LE(payload.size(), KvCodec::MaxCompressedSize(in.size()));
  Result<KvPayloadInfo> inspected = KvCodec::Inspect(payload);
  EXPECT_TRUE(inspected.ok()) << inspected.status().ToString();
  if (inspected.ok() && info != nullptr) *info = *inspected;
  std::vector<std::byte> back;
  const Status status = codec.Decompress(payload, &back);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return back;
}

TEST(KvCodecTest, RoundTripsEveryDtypeIncludingNanInfAndSubnormals) {
  KvCodec codec;
  for (KvDtype dtype : kAllDtypes) {
    for (size_t elements : {size_t{1}, size_t{3}, size_t{1000}, size_t{70001}}) {
      const std::vector<std::byte> block = KvLikeBlock(dtype, elements, 11);
      KvPayloadInfo info;
      EXPECT_EQ(RoundTrip(codec, dtype, block, &info), block)
          << static_cast<int>(dtype) << " x " << elements;
      EXPECT_EQ(info.dtype, dtype);
      EXPECT_EQ(info.raw_size, block.size());
      if (elements == 1000) {
        // Enough data for the planes to pay, too little for exponent ranks: byte planes, the
        // exponent-carrying one zstd-coded. fp8 e4m3 goes in nibble planes, element pairs
        // giving one byte to each.
        ASSERT_EQ(info.codec, KvCodecId::kBytePlanesZstd) << static_cast<int>(dtype);
        ASSERT_EQ(info.plane_raw.size(), dtype == KvDtype::kFp8E4M3 ? 2 : KvDtypeBytes(dtype));
        EXPECT_FALSE(info.plane_raw.back());
      }
      if (elements == 70001 && HasExponentSplit(dtype)) {
        // bf16 and fp16 go by exponent ranks, the rank plane coded, the rest raw; NaN, Inf
        // and subnormals have exponents outside the ranked run: they are escaped.
        ASSERT_EQ(info.codec, KvCodecId::kExponentRanksZstd) << static_cast<int>(dtype);
        ASSERT_EQ(info.plane_raw.size(), ExponentSplitPlanes(dtype));
        EXPECT_FALSE(info.plane_raw[0]);
        EXPECT_TRUE(info.plane_raw[1]);
        EXPECT_GT(info.escapes, 0u);
      }
    }
  }
}

KvCodecOptions BytePlanesOnly() {
  KvCodecOptions options;
  options.split_exponents = false;
  return options;
}

TEST(KvCodecTest, OddSizesKeepTheirTailBytes) {
  KvCodec codec, byte_planes(BytePlanesOnly());
  for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kFp16, KvDtype::kFp32}) {
    const std::vector<std::byte> whole = KvLikeBlock(dtype, 5000, 3);
    // Exponent ranks take elements 16 at a time: cut up to a whole group and a byte.
    for (size_t cut = 1; cut < 2 * 16 + 2; ++cut) {
      std::span<const std::byte> odd = std::span(whole).first(whole.size() - cut);
      std::vector<std::byte> expect(odd.begin(), odd.end());
      KvPayloadInfo info;
      EXPECT_EQ(RoundTrip(codec, dtype, odd, &info), expect) << cut;
      EXPECT_EQ(info.codec, HasExponentSplit(dtype) ? KvCodecId::kExponentRanksZstd
                                                    : KvCodecId::kBytePlanesZstd);
      EXPECT_EQ(RoundTrip(byte_planes, dtype, odd, &info), expect) << cut;
      EXPECT_EQ(info.codec, KvCodecId::kBytePlanesZstd);
    }
  }
}

TEST(KvCodecTest, EmptyAndTinyInputsAreStored) {
  KvCodec codec;
  KvPayloadInfo info;
  EXPECT_TRUE(RoundTrip(codec, KvDtype::kBf16, {}, &info).empty());
  EXPECT_EQ(info.codec, KvCodecId::kStored);
  const std::vector<std::byte> one = {std::byte{0x42}};
  EXPECT_EQ(RoundTrip(codec, KvDtype::kFp32, one, &info), one);
  EXPECT_EQ(info.codec, KvCodecId::kStored);
}

TEST(KvCodecTest, RandomBytesAreStoredRaw) {
  KvCodec codec;
  std::mt19937 rng(5);
  std::vector<std::byte> noise(1 << 18);
  for (std::byte& b : noise) b = static_cast<std::byte>(rng());
  for (KvDtype dtype : kAllDtypes) {
    KvPayloadInfo info;
    EXPECT_EQ(RoundTrip(codec, dtype, noise, &info), noise);
    EXPECT_EQ(info.codec, KvCodecId::kStored) << static_cast<int>(dtype);
  }
}

TEST(KvCodecTest, IncompressiblePlanesAreStoredRawNextToCodedOnes) {
  KvCodec byte_planes(BytePlanesOnly());
  const std::vector<std::byte> block = KvLikeBlock(KvDtype::kBf16, 1 << 16, 9);
  KvPayloadInfo info;
  EXPECT_EQ(RoundTrip(byte_planes, KvDtype::kBf16, block, &info), block);
  ASSERT_EQ(info.codec, KvCodecId::kBytePlanesZstd);
  EXPECT_EQ(info.plane_raw, (std::vector<bool>{true, false}));  // Mantissa raw, exponent coded.
  EXPECT_EQ(info.plane_bytes[0], 1u << 16);
  EXPECT_LT(info.plane_bytes[1], 1u << 15);
  // Exponent ranks: ranks coded (4 bits each before coding), sign and mantissa raw.
  KvCodec codec;
  EXPECT_EQ(RoundTrip(codec, KvDtype::kBf16, block, &info), block);
  ASSERT_EQ(info.codec, KvCodecId::kExponentRanksZstd);
  EXPECT_EQ(info.plane_raw, (std::vector<bool>{false, true}));
  EXPECT_LT(info.plane_bytes[0], 1u << 15);
  EXPECT_EQ(info.plane_bytes[1], 1u << 16);
}

// Exponents in two clusters far apart are no run of 15: the ranks go through the table, and
// what falls outside it is escaped, on every path of the merge (16 elements past the last
// whole 32 included) and across frames.
TEST(KvCodecTest, ExponentRanksRoundTripScatteredExponentsAndEscapes) {
  KvCodec codec;
  for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kFp16}) {
    std::mt19937 rng(8);
    std::vector<float> values(50000 + 16);
    for (size_t i = 0; i < values.size(); ++i) {
      const int exponent = rng() % 2 == 0 ? -14 + static_cast<int>(rng() % 6)
                                          : 2 + static_cast<int>(rng() % 8);
      values[i] = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, exponent) *
                  (rng() % 2 == 0 ? 1.0f : -1.0f);
      if (i % 211 == 0) values[i] = std::ldexp(1.0f, -4 + static_cast<int>(i % 3));  // Rare.
    }
    std::vector<std::byte> block(values.size() * 2);
    ASSERT_TRUE(EncodeFromFloat32(dtype, values, 1.0f, block).ok());
    KvPayloadInfo info;
    EXPECT_EQ(RoundTrip(codec, dtype, block, &info), block) << static_cast<int>(dtype);
    EXPECT_EQ(info.codec, KvCodecId::kExponentRanksZstd);
    EXPECT_GT(info.escapes, 0u);
    // Every path through the merge, whatever the frame size.
    KvCodecOptions small;
    small.block_bytes = 4096;
    KvCodec framed(small);
    EXPECT_EQ(RoundTrip(framed, dtype, block, &info), block);
    EXPECT_EQ(info.frame_elements, 8192u);
    ASSERT_FALSE(info.plane_raw[0]);
    // Claiming larger frames makes the first frame's size wrong.
    std::vector<std::byte> payload, out;
    ASSERT_TRUE(framed.Compress(dtype, block, &payload).ok());
    payload[9] = std::byte{14};
    EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kDataLoss);
  }
}

// When many elements would be escaped (exponents spread over more than 15 values), codec 2
// gives way to byte planes, which still compress.
TEST(KvCodecTest, SpreadExponentsFallBackToBytePlanes) {
  KvCodec codec;
  std::mt19937 rng(10);
  std::vector<float> values(40000);
  for (float& v : values) v = std::ldexp(1.0f, static_cast<int>(rng() % 30) - 15);
  std::vector<std::byte> block(values.size() * 2);
  ASSERT_TRUE(EncodeFromFloat32(KvDtype::kBf16, values, 1.0f, block).ok());
  KvPayloadInfo info;
  EXPECT_EQ(RoundTrip(codec, KvDtype::kBf16, block, &info), block);
  EXPECT_EQ(info.codec, KvCodecId::kBytePlanesZstd);
}

TEST(KvCodecTest, OneCodecHandlesGrowingAndShrinkingBlocks) {
  KvCodec codec;
  for (size_t elements : {size_t{100000}, size_t{10}, size_t{300000}, size_t{4000}}) {
    const std::vector<std::byte> block = KvLikeBlock(KvDtype::kFp16, elements, 21);
    EXPECT_EQ(RoundTrip(codec, KvDtype::kFp16, block, nullptr), block);
  }
  // The per-thread convenience functions.
  const std::vector<std::byte> block = KvLikeBlock(KvDtype::kFp8E4M3, 50000, 22);
  std::vector<std::byte> payload, back;
  ASSERT_TRUE(CompressKv(KvDtype::kFp8E4M3, block, &payload).ok());
  ASSERT_TRUE(DecompressKv(payload, &back).ok());
  EXPECT_EQ(back, block);
}

TEST(KvCodecTest, CompressRejectsBadArguments) {
  KvCodec codec;
  std::vector<std::byte> in(100), out(KvCodec::MaxCompressedSize(100));
  EXPECT_EQ(codec.Compress(static_cast<KvDtype>(99), in, std::span(out)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.Compress(KvDtype::kBf16, in, std::span(out).first(out.size() - 1))
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

// A bf16 payload of 20000.5 elements: byte planes (codec 1) or exponent ranks (codec 2).
std::vector<std::byte> SamplePayload(bool ranks = false) {
  KvCodecOptions options;
  options.split_exponents = ranks;
  KvCodec codec(options);
  std::vector<std::byte> payload;
  const std::vector<std::byte> block = KvLikeBlock(KvDtype::kBf16, 20001, 4);
  EXPECT_TRUE(codec.Compress(KvDtype::kBf16, std::span(block).first(block.size() - 1), &payload)
                  .ok());
  return payload;
}

TEST(KvCodecTest, EveryTruncationOrExtensionIsDataLoss) {
  KvCodec codec;
  std::vector<std::byte> out;
  for (KvCodecId id : {KvCodecId::kBytePlanesZstd, KvCodecId::kExponentRanksZstd}) {
    const std::vector<std::byte> payload = SamplePayload(id == KvCodecId::kExponentRanksZstd);
    ASSERT_EQ(KvCodec::Inspect(payload)->codec, id);
    for (size_t size = 0; size < payload.size(); ++size) {
      const Status status = codec.Decompress(std::span(payload).first(size), &out);
      ASSERT_EQ(status.code(), StatusCode::kDataLoss) << size << ": " << status.ToString();
    }
    std::vector<std::byte> longer = payload;
    longer.push_back(std::byte{0});
    EXPECT_EQ(codec.Decompress(longer, &out).code(), StatusCode::kDataLoss);
  }
  // A stored payload too.
  std::vector<std::byte> stored;
  ASSERT_TRUE(codec.Compress(KvDtype::kFp32, std::vector<std::byte>(7), &stored).ok());
  EXPECT_EQ(codec.Decompress(std::span(stored).first(stored.size() - 1), &out).code(),
            StatusCode::kDataLoss);
}

TEST(KvCodecTest, UnknownCodecOrDtypeIsInvalidArgument) {
  std::vector<std::byte> payload = SamplePayload();
  KvCodec codec;
  std::vector<std::byte> out;
  payload[2] = std::byte{7};
  EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(codec.Decompress(payload, &out).message().find("unknown codec id 7"),
            std::string_view::npos);
  payload = SamplePayload();
  payload[3] = std::byte{42};
  EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kInvalidArgument);
}

TEST(KvCodecTest, InconsistentHeadersAreDataLoss) {
  KvCodec codec;
  std::vector<std::byte> out;
  auto expect_data_loss = [&](size_t offset, std::byte value) {
    std::vector<std::byte> payload = SamplePayload();
    payload[offset] = value;
    EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kDataLoss) << offset;
  };
  expect_data_loss(0, std::byte{'X'});   // Magic.
  expect_data_loss(3, std::byte{3});     // fp32 dtype: plane count no longer matches.
  expect_data_loss(3, std::byte{5});     // fp8 e5m2 dtype: one plane.
  expect_data_loss(4, std::byte{0x00});  // Raw size.
  expect_data_loss(7, std::byte{0x40});  // Raw size beyond the limit.
  expect_data_loss(8, std::byte{4});     // Plane count.
  expect_data_loss(9, std::byte{9});     // Frame size below 1 KiB.
  expect_data_loss(9, std::byte{18});    // Frame size above 128 KiB.
  expect_data_loss(10, std::byte{1});    // Reserved.
  expect_data_loss(12, std::byte{0x01}); // First plane's size.
  expect_data_loss(15, std::byte{0x00}); // First plane's raw flag.
  // Output span of the wrong size.
  const std::vector<std::byte> payload = SamplePayload();
  std::vector<std::byte> small(10);
  EXPECT_EQ(codec.Decompress(payload, std::span(small)).code(), StatusCode::kInvalidArgument);
}

TEST(KvCodecTest, InconsistentExponentRankHeadersAreDataLoss) {
  const std::vector<std::byte> clean = SamplePayload(true);
  Result<KvPayloadInfo> info = KvCodec::Inspect(clean);
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->codec, KvCodecId::kExponentRanksZstd);
  ASSERT_GE(info->escapes, 2u);
  KvCodec codec;
  std::vector<std::byte> out;
  ASSERT_TRUE(codec.Decompress(clean, &out).ok());
  auto expect_data_loss = [&](size_t offset, std::byte value) {
    std::vector<std::byte> payload = clean;
    payload[offset] = value;
    EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kDataLoss) << offset;
  };
  constexpr size_t kTable = kKvPayloadHeaderBytes + 2 * 4;  // bf16: two plane descriptors.
  constexpr size_t kIndices = kTable + 16 + 4;
  expect_data_loss(3, std::byte{2});          // fp16 dtype: three planes.
  expect_data_loss(3, std::byte{4});          // fp8 e4m3: no exponent ranks.
  expect_data_loss(8, std::byte{3});          // Plane count.
  expect_data_loss(9, std::byte{0});          // Frames are required.
  expect_data_loss(9, std::byte{19});         // Frames above the limit.
  expect_data_loss(kTable, std::byte{0});     // No ranks.
  expect_data_loss(kTable, std::byte{16});    // More ranks than nibbles allow.
  expect_data_loss(kTable + 16, std::byte{0xff});   // Escape count beyond the payload.
  expect_data_loss(kIndices + 3, std::byte{0x7f});  // Escape index beyond the block.
  // The second escape repeats the first: indices must increase.
  std::vector<std::byte> payload = clean;
  std::copy_n(clean.begin() + kIndices, 4, payload.begin() + kIndices + 4);
  EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kDataLoss);
}

// Planes are coded as a series of zstd frames; each must hold the header's frame size.
TEST(KvCodecTest, PlanesAreFramedAndEveryFrameIsChecked) {
  KvCodecOptions options = BytePlanesOnly();
  options.block_bytes = 4096;
  KvCodec codec(options);
  const std::vector<std::byte> block = KvLikeBlock(KvDtype::kBf16, 50000, 5);
  std::vector<std::byte> payload;
  ASSERT_TRUE(codec.Compress(KvDtype::kBf16, block, &payload).ok());
  Result<KvPayloadInfo> info = KvCodec::Inspect(payload);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->frame_elements, 4096u);
  ASSERT_FALSE(info->plane_raw[1]);
  std::vector<std::byte> out;
  ASSERT_TRUE(KvCodec().Decompress(payload, &out).ok());  // Any reader, whatever its options.
  EXPECT_EQ(out, block);
  // Claiming larger frames makes the first frame's size wrong.
  payload[9] = std::byte{13};
  EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kDataLoss);
  // Frame log 0, one frame per plane, as payloads written before framing: here the plane's
  // first frame then holds too few elements.
  payload[9] = std::byte{0};
  EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kDataLoss);
}

// Before fp8 e4m3 was split into nibble planes its payloads had one plane of whole bytes.
TEST(KvCodecTest, Fp8PayloadsWithOneBytePlaneStillDecode) {
  const std::vector<std::byte> block = KvLikeBlock(KvDtype::kFp8E4M3, 3001, 6);
  std::vector<std::byte> payload(kKvPayloadHeaderBytes + 4);
  payload[0] = std::byte{'K'};
  payload[1] = std::byte{'Z'};
  payload[2] = static_cast<std::byte>(KvCodecId::kBytePlanesZstd);
  payload[3] = static_cast<std::byte>(KvDtype::kFp8E4M3);
  const uint32_t size = static_cast<uint32_t>(block.size());
  std::memcpy(payload.data() + 4, &size, 4);  // Little-endian host, as the test machines are.
  payload[8] = std::byte{1};
  const uint32_t raw_plane = size | 0x80000000u;
  std::memcpy(payload.data() + kKvPayloadHeaderBytes, &raw_plane, 4);
  payload.insert(payload.end(), block.begin(), block.end());
  std::vector<std::byte> out;
  ASSERT_TRUE(KvCodec().Decompress(payload, &out).ok());
  EXPECT_EQ(out, block);
}

// Corrupting coded bytes is the checksum service's to detect; the codec must only not crash
// and not overrun: each flip yields DataLoss or a block of the right size.
TEST(KvCodecTest, CorruptPlaneBytesNeverCrash) {
  KvCodec codec;
  std::vector<std::byte> out;
  for (bool ranks : {false, true}) {
    const std::vector<std::byte> clean = SamplePayload(ranks);
    for (size_t i = 12; i < clean.size(); i += ranks ? 3 : 7) {
      std::vector<std::byte> payload = clean;
      payload[i] ^= std::byte{0x5A};
      const Status status = codec.Decompress(payload, &out);
      if (status.ok()) {
        EXPECT_EQ(out.size(), 40001u);
      } else {
        EXPECT_EQ(status.code(), StatusCode::kDataLoss) << i << ": " << status.ToString();
      }
    }
  }
}

// Plain zstd -1's frame of `block`: what the codec must never store larger.
size_t PlainZstdSize(std::span<const std::byte> block) {
  std::vector<std::byte> frame(ZSTD_compressBound(block.size()));
  return ZSTD_compress(frame.data(), frame.size(), block.data(), block.size(), 1);
}

// Random bytes repeated farther apart than a frame of planes reaches: only a match search
// over the whole block finds the repeats.
std::vector<std::byte> FarRepeats(size_t chunk, size_t copies) {
  std::mt19937 rng(12);
  std::vector<std::byte> once(chunk);
  for (std::byte& b : once) b = static_cast<std::byte>(rng());
  std::vector<std::byte> block;
  for (size_t i = 0; i < copies; ++i) block.insert(block.end(), once.begin(), once.end());
  return block;
}

TEST(KvCodecTest, BlocksPlainZstdStoresSmallerAreStoredAsOneZstdFrame) {
  KvCodec codec;
  for (KvDtype dtype : {KvDtype::kFp32, KvDtype::kBf16, kOpaqueBytes}) {
    const std::vector<std::byte> block = FarRepeats(200 * 1024, 3);
    KvPayloadInfo info;
    EXPECT_EQ(RoundTrip(codec, dtype, block, &info), block);
    EXPECT_EQ(info.codec, KvCodecId::kWholeBlockZstd) << static_cast<int>(dtype);
    EXPECT_TRUE(info.plane_bytes.empty());
    std::vector<std::byte> payload;
    ASSERT_TRUE(codec.Compress(dtype, block, &payload).ok());
    EXPECT_LT(payload.size(), block.size() / 2);
    EXPECT_LE(payload.size(), kKvPayloadHeaderBytes + PlainZstdSize(block));
  }
  // Off, the same block is left to the planes, which find nothing: stored.
  KvCodecOptions no_whole_block;
  no_whole_block.whole_block_zstd = false;
  KvCodec planes_only(no_whole_block);
  const std::vector<std::byte> block = FarRepeats(200 * 1024, 3);
  KvPayloadInfo info;
  EXPECT_EQ(RoundTrip(planes_only, KvDtype::kFp32, block, &info), block);
  EXPECT_EQ(info.codec, KvCodecId::kStored);
}

TEST(KvCodecTest, NoBlockIsStoredLargerThanPlainZstdStoresIt) {
  KvCodec codec;
  std::vector<std::vector<std::byte>> blocks;
  std::vector<KvDtype> dtypes;
  for (KvDtype dtype : kAllDtypes) {
    for (size_t elements : {size_t{70001}, size_t{1} << 18}) {
      blocks.push_back(KvLikeBlock(dtype, elements, 31));
      dtypes.push_back(dtype);
    }
  }
  // Repeats within a frame, as a greedy loop gives: the match search finds them in the planes.
  for (KvDtype dtype : {KvDtype::kFp8E4M3, KvDtype::kBf16}) {
    const std::vector<std::byte> row = KvLikeBlock(dtype, 4096, 32);
    std::vector<std::byte> looped;
    for (int i = 0; i < 24; ++i) looped.insert(looped.end(), row.begin(), row.end());
    blocks.push_back(looped);
    dtypes.push_back(dtype);
  }
  blocks.push_back(FarRepeats(200 * 1024, 3));
  dtypes.push_back(KvDtype::kFp32);
  const std::string dir = model::testing::TestModelDir();
  if (!dir.empty()) {
    Result<model::CapturedKv> kv = model::CaptureKv(dir, "Lily and Ben went to the park", 512);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kFp16, KvDtype::kFp32, KvDtype::kFp8E4M3}) {
      std::vector<std::byte> block(kv->v.size() * KvDtypeBytes(dtype));
      const float scale = dtype == KvDtype::kFp8E4M3 ? Fp8E4M3Scale(kv->v) : 1.0f;
      ASSERT_TRUE(EncodeFromFloat32(dtype, kv->v, scale, block).ok());
      blocks.push_back(block);
      dtypes.push_back(dtype);
    }
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::vector<std::byte> payload;
    ASSERT_TRUE(codec.Compress(dtypes[i], blocks[i], &payload).ok());
    EXPECT_LE(payload.size(), kKvPayloadHeaderBytes + PlainZstdSize(blocks[i]))
        << "block " << i << ", dtype " << static_cast<int>(dtypes[i]);
    std::vector<std::byte> back;
    ASSERT_TRUE(codec.Decompress(payload, &back).ok());
    EXPECT_EQ(back, blocks[i]) << i;
  }
}

std::vector<std::byte> WholeBlockPayload() {
  std::vector<std::byte> payload;
  EXPECT_TRUE(KvCodec().Compress(KvDtype::kFp32, FarRepeats(100 * 1024, 3), &payload).ok());
  EXPECT_EQ(KvCodec::Inspect(payload)->codec, KvCodecId::kWholeBlockZstd);
  return payload;
}

TEST(KvCodecTest, TruncatedOrInconsistentWholeBlockPayloadsAreDataLoss) {
  const std::vector<std::byte> clean = WholeBlockPayload();
  KvCodec codec;
  std::vector<std::byte> out;
  ASSERT_TRUE(codec.Decompress(clean, &out).ok());
  for (size_t size = 0; size < clean.size(); size += size < 64 ? 1 : 97) {
    const Status status = codec.Decompress(std::span(clean).first(size), &out);
    ASSERT_EQ(status.code(), StatusCode::kDataLoss) << size << ": " << status.ToString();
  }
  std::vector<std::byte> longer = clean;
  longer.push_back(std::byte{0});
  EXPECT_EQ(codec.Decompress(longer, &out).code(), StatusCode::kDataLoss);
  auto expect_data_loss = [&](size_t offset, std::byte value) {
    std::vector<std::byte> payload = clean;
    payload[offset] = value;
    EXPECT_EQ(codec.Decompress(payload, &out).code(), StatusCode::kDataLoss) << offset;
  };
  expect_data_loss(4, clean[4] ^ std::byte{1});  // Raw size: no longer the frame's.
  expect_data_loss(7, std::byte{0x40});          // Raw size beyond the limit.
  expect_data_loss(8, std::byte{1});             // Planes.
  expect_data_loss(9, std::byte{10});            // Frame size.
  expect_data_loss(12, std::byte{0});            // zstd magic.
  // A frame that claims another content size than the header.
  std::vector<std::byte> other;
  ASSERT_TRUE(KvCodec().Compress(KvDtype::kFp32, FarRepeats(100 * 1024 + 4, 3), &other).ok());
  ASSERT_EQ(KvCodec::Inspect(other)->codec, KvCodecId::kWholeBlockZstd);
  std::copy_n(clean.begin() + 4, 4, other.begin() + 4);
  EXPECT_EQ(codec.Decompress(other, &out).code(), StatusCode::kDataLoss);
  // Flipped frame bytes: DataLoss or a block of the right size, never a crash.
  for (size_t i = kKvPayloadHeaderBytes; i < clean.size(); i += 13) {
    std::vector<std::byte> payload = clean;
    payload[i] ^= std::byte{0x5A};
    const Status status = codec.Decompress(payload, &out);
    if (status.ok()) {
      EXPECT_EQ(out.size(), 300u * 1024);
    } else {
      EXPECT_EQ(status.code(), StatusCode::kDataLoss) << i << ": " << status.ToString();
    }
  }
}

// What earlier writers stored (literals only, never codec 3) decodes with today's defaults.
TEST(KvCodecTest, PayloadsOfEarlierWritersStillDecode) {
  KvCodecOptions earlier;
  earlier.match_search = false;
  earlier.whole_block_zstd = false;
  KvCodec writer(earlier), reader;
  for (KvDtype dtype : kAllDtypes) {
    const std::vector<std::byte> block = KvLikeBlock(dtype, 50001, 33);
    std::vector<std::byte> payload, back;
    ASSERT_TRUE(writer.Compress(dtype, block, &payload).ok());
    EXPECT_NE(KvCodec::Inspect(payload)->codec, KvCodecId::kWholeBlockZstd);
    ASSERT_TRUE(reader.Decompress(payload, &back).ok()) << static_cast<int>(dtype);
    EXPECT_EQ(back, block);
  }
}

TEST(KvCodecTest, RealModelKvCompressesInEveryDtype) {
  const std::string dir = model::testing::TestModelDir();
  if (dir.empty()) GTEST_SKIP() << model::testing::kNoModelMessage;
  Result<model::CapturedKv> kv = model::CaptureKv(dir, "Once upon a time", 256);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  std::vector<float> values = kv->k;
  values.insert(values.end(), kv->v.begin(), kv->v.end());
  KvCodec codec;
  for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kFp16, KvDtype::kFp32, KvDtype::kFp8E4M3}) {
    std::vector<std::byte> block(values.size() * KvDtypeBytes(dtype));
    const float scale = dtype == KvDtype::kFp8E4M3 ? Fp8E4M3Scale(values) : 1.0f;
    ASSERT_TRUE(EncodeFromFloat32(dtype, values, scale, block).ok());
    KvPayloadInfo info;
    EXPECT_EQ(RoundTrip(codec, dtype, block, &info), block);
    EXPECT_EQ(info.codec, HasExponentSplit(dtype) ? KvCodecId::kExponentRanksZstd
                                                  : KvCodecId::kBytePlanesZstd)
        << static_cast<int>(dtype);
  }
}

}  // namespace
}  // namespace kvtier::compression
