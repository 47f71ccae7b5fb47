#include "src/services/compression/dtype_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kvtier::compression {
namespace {

// An independent oracle: every non-negative finite value of a format, sorted, rounded to by
// nearest-neighbour search with ties to the even pattern. Past the largest finite value the
// format either saturates or rounds to infinity as if infinity were the next power of two
// (IEEE: the threshold is max + half an ulp, and a tie goes to the even pattern, infinity).
struct Oracle {
  std::vector<double> values;     // Ascending; ends with infinity's stand-in unless saturating.
  std::vector<uint32_t> patterns;
  std::vector<double> finite;     // The finite values only, for midpoints.
  int sign_shift = 0;

  uint32_t Round(float x) const {
    const uint32_t sign_bit = std::signbit(x) ? 1u : 0u;
    const double a = std::fabs(static_cast<double>(x));
    uint32_t best;
    if (a >= values.back()) {
      best = patterns.back();
    } else {
      const size_t hi = std::upper_bound(values.begin(), values.end(), a) - values.begin();
      const size_t lo = hi - 1;  // values[lo] <= a < values[hi]
      const double dlo = a - values[lo], dhi = values[hi] - a;
      best = dlo < dhi   ? patterns[lo]
             : dhi < dlo ? patterns[hi]
                         : ((patterns[lo] & 1) == 0 ? patterns[lo] : patterns[hi]);
    }
    return best | (sign_bit << sign_shift);
  }
};

// `inf_value` 0 means the format saturates.
template <typename Decode>
Oracle MakeOracle(int total_bits, Decode decode, uint32_t inf_pattern, double inf_value) {
  Oracle o;
  o.sign_shift = total_bits - 1;
  for (uint32_t pattern = 0; pattern < (1u << (total_bits - 1)); ++pattern) {
    const float f = decode(pattern);
    if (std::isfinite(f)) {
      o.values.push_back(f);
      o.patterns.push_back(pattern);
    }
  }
  o.finite = o.values;
  if (inf_value > 0) {
    o.values.push_back(inf_value);
    o.patterns.push_back(inf_pattern);
  }
  return o;
}

Oracle Bf16Oracle() {
  return MakeOracle(16, [](uint32_t p) { return Bf16ToFloat(static_cast<uint16_t>(p)); }, 0x7F80,
                    std::ldexp(1.0, 128));
}

Oracle Fp16Oracle() {
  return MakeOracle(16, [](uint32_t p) { return Fp16ToFloat(static_cast<uint16_t>(p)); }, 0x7C00,
                    65536.0);
}

Oracle Fp8Oracle() {
  return MakeOracle(8, [](uint32_t p) { return Fp8E4M3ToFloat(static_cast<uint8_t>(p)); }, 0, 0);
}

// Floats that stress rounding: every midpoint of the format and its float neighbours, plus
// random bit patterns and random values spread over the format's range.
std::vector<float> StressInputs(const Oracle& o, float range) {
  std::vector<float> xs;
  for (size_t i = 0; i + 1 < o.finite.size(); ++i) {
    const float mid = static_cast<float>((o.finite[i] + o.finite[i + 1]) / 2);  // Exact.
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, range * 4)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-40.0f, std::log2(range) + 2.0f);
  for (int i = 0; i < 200000; ++i) {
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
    xs.push_back((rng() & 1 ? -1.0f : 1.0f) * std::exp2(exponent(rng)));
  }
  for (float x : {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()}) {
    xs.push_back(x);
  }
  return xs;
}

template <typename Encode>
void ExpectMatchesOracle(const Oracle& o, float range, Encode encode) {
  int mismatches = 0;
  for (float x : StressInputs(o, range)) {
    if (!std::isfinite(x)) continue;  // Covered by InfinityAndNaN.
    const uint32_t want = o.Round(x);
    const uint32_t got = encode(x);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << std::hexfloat << x << ": got 0x" << std::hex << got << ", want 0x" << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(DtypeConvertTest, KnownValues) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToFp16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(0x1p-24f), 0x0001);
  EXPECT_EQ(FloatToFp16(0x1p-25f), 0x0000);               // Tie: to even (zero).
  EXPECT_EQ(FloatToFp16(0x1.8p-24f), 0x0002);             // Tie: to even (2).
  EXPECT_EQ(FloatToFp16(65519.996f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7C00);               // Tie past max: infinity.
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(-448.0f), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToFp8E4M3(0x1p-9f), 0x01);               // Smallest subnormal.
  EXPECT_EQ(FloatToFp8E4M3(0x1p-10f), 0x00);              // Tie: to even (zero).
  EXPECT_EQ(FloatToFp8E4M3(0x1.8p-9f), 0x02);             // Tie: to even (2).
  EXPECT_EQ(FloatToFp8E4M3(0x1.ep-7f), 0x08);             // Rounds up into the normals.
  EXPECT_EQ(FloatToFp8E4M3(1e6f), 0x7E);                  // Saturates.
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 0x1p-6f);
  EXPECT_EQ(Fp16ToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(Fp16ToFloat(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(Fp16ToFloat(0x8000)));
}

TEST(DtypeConvertTest, InfinityAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FloatToBf16(inf), 0x7F80);
  EXPECT_EQ(FloatToBf16(-inf), 0xFF80);
  EXPECT_EQ(FloatToFp16(inf), 0x7C00);
  EXPECT_EQ(FloatToFp16(-inf), 0xFC00);
  EXPECT_EQ(FloatToFp8E4M3(inf), 0x7E);   // e4m3fn has no infinity: saturate.
  EXPECT_EQ(FloatToFp8E4M3(-inf), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(nan), 0x7F);
  EXPECT_EQ(FloatToFp8E4M3(-nan), 0xFF);
  EXPECT_TRUE(std::isinf(Bf16ToFloat(0x7F80)));
  EXPECT_TRUE(std::isinf(Fp16ToFloat(0xFC00)));
  // Signalling NaNs stay NaN even when their payload lies in bits the format drops.
  const float snan_low = std::bit_cast<float>(0x7F800001u);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(snan_low))));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(snan_low))));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(FloatToFp8E4M3(snan_low))));
  EXPECT_TRUE(std::signbit(Bf16ToFloat(FloatToBf16(-nan))));
  EXPECT_TRUE(std::signbit(Fp16ToFloat(FloatToFp16(-nan))));
}

TEST(DtypeConvertTest, EveryPatternRoundTripsExactly) {
  for (uint32_t p = 0; p < 0x10000; ++p) {
    const uint16_t bits = static_cast<uint16_t>(p);
    const float b = Bf16ToFloat(bits);
    const float h = Fp16ToFloat(bits);
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(b))));
    } else {
      EXPECT_EQ(FloatToBf16(b), bits) << std::hex << p;
    }
    if (std::isnan(h)) {
      EXPECT_EQ(FloatToFp16(h), bits | 0x0200) << std::hex << p;  // Made quiet, payload kept.
    } else {
      EXPECT_EQ(FloatToFp16(h), bits) << std::hex << p;
    }
  }
  for (uint32_t p = 0; p < 0x100; ++p) {
    const uint8_t bits = static_cast<uint8_t>(p);
    const float f = Fp8E4M3ToFloat(bits);
    EXPECT_EQ((bits & 0x7F) == 0x7F, std::isnan(f)) << p;
    EXPECT_EQ(FloatToFp8E4M3(f), bits) << p;
  }
}

TEST(DtypeConvertTest, Bf16RoundsToNearestEven) {
  ExpectMatchesOracle(Bf16Oracle(), std::numeric_limits<float>::max(), FloatToBf16);
}

TEST(DtypeConvertTest, Fp16RoundsToNearestEven) {
  ExpectMatchesOracle(Fp16Oracle(), 65504.0f, FloatToFp16);
}

TEST(DtypeConvertTest, Fp8E4M3RoundsToNearestEvenAndSaturates) {
  ExpectMatchesOracle(Fp8Oracle(), 448.0f, FloatToFp8E4M3);
}

TEST(DtypeConvertTest, Fp8ScaleIgnoresNonFiniteValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Fp8E4M3Scale(std::vector<float>{1.0f, -896.0f, inf, std::nanf("")}), 2.0f);
  EXPECT_EQ(Fp8E4M3Scale(std::vector<float>{0.0f, -0.0f}), 1.0f);
  EXPECT_EQ(Fp8E4M3Scale(std::vector<float>{}), 1.0f);
  EXPECT_EQ(Fp8E4M3Scale(std::vector<float>{1e-45f}), 1.0f);  // amax / 448 underflows to 0.
}

TEST(DtypeConvertTest, BulkConversionsRoundTripEveryDtype) {
  std::vector<float> values = {0.0f, -0.0f, 1.5f, -3.25f, 1e-8f, -7e-6f, 300.0f, 1e-40f};
  for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kFp16, KvDtype::kFp32, KvDtype::kFp8E4M3}) {
    const float scale = dtype == KvDtype::kFp8E4M3 ? Fp8E4M3Scale(values) : 1.0f;
    std::vector<std::byte> encoded(values.size() * KvDtypeBytes(dtype));
    ASSERT_TRUE(EncodeFromFloat32(dtype, values, scale, encoded).ok());
    std::vector<float> decoded(values.size());
    ASSERT_TRUE(DecodeToFloat32(dtype, encoded, scale, decoded).ok());
    for (size_t i = 0; i < values.size(); ++i) {
      float expect = values[i];
      if (dtype == KvDtype::kBf16) expect = Bf16ToFloat(FloatToBf16(values[i]));
      if (dtype == KvDtype::kFp16) expect = Fp16ToFloat(FloatToFp16(values[i]));
      if (dtype == KvDtype::kFp8E4M3) {
        expect = Fp8E4M3ToFloat(FloatToFp8E4M3(values[i] / scale)) * scale;
      }
      EXPECT_EQ(decoded[i], expect) << static_cast<int>(dtype) << " " << i;
    }
  }
  // The amax element of an fp8 tensor comes back exactly.
  std::vector<std::byte> fp8(values.size());
  const float scale = Fp8E4M3Scale(values);
  ASSERT_TRUE(EncodeFromFloat32(KvDtype::kFp8E4M3, values, scale, fp8).ok());
  EXPECT_EQ(static_cast<uint8_t>(fp8[6]), 0x7E);
}

TEST(DtypeConvertTest, BulkConversionsRejectBadArguments) {
  std::vector<float> values(4, 1.0f);
  std::vector<std::byte> bytes(7);
  EXPECT_EQ(EncodeFromFloat32(KvDtype::kBf16, values, 1.0f, bytes).code(),
            StatusCode::kInvalidArgument);
  bytes.resize(8);
  EXPECT_TRUE(EncodeFromFloat32(KvDtype::kBf16, values, 1.0f, bytes).ok());
  EXPECT_EQ(EncodeFromFloat32(KvDtype::kBf16, values, 2.0f, bytes).code(),
            StatusCode::kInvalidArgument);
  bytes.resize(4);
  for (float scale : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    EXPECT_EQ(EncodeFromFloat32(KvDtype::kFp8E4M3, values, scale, bytes).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(DecodeToFloat32(KvDtype::kFp8E4M3, bytes, scale, values).code(),
              StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(EncodeFromFloat32(KvDtype::kFp8E5M2, values, 1.0f, bytes).code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(EncodeFromFloat32(static_cast<KvDtype>(99), values, 1.0f, bytes).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::compression
