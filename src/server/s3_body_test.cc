#include "src/server/s3_body.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/server/s3_service.h"

namespace kvtier::server {
namespace {

// A body of `size` random bytes, as pieces of `piece` bytes spread over a buffer with gaps
// between them (framing), with `expected` the checksums a client sent for it.
struct Body {
  std::vector<std::byte> buffer;
  std::vector<std::byte> payload;
  S3Body body;
  Body(size_t size, size_t piece) {
    std::mt19937 rng(static_cast<uint32_t>(size * 31 + piece));
    for (size_t i = 0; i < size; ++i) payload.push_back(static_cast<std::byte>(rng()));
    buffer.resize(size + 2 * (size / piece + 1));
    size_t at = 0;
    std::vector<std::pair<size_t, size_t>> where;
    for (size_t i = 0; i < size; i += piece) {
      const size_t n = std::min(piece, size - i);
      std::memcpy(buffer.data() + at, payload.data() + i, n);
      where.emplace_back(at, n);
      at += n + 2;
    }
    for (const auto& [offset, n] : where) body.pieces.push_back(std::span(buffer).subspan(offset, n));
    body.size = size;
    for (S3ChecksumAlgorithm a : {S3ChecksumAlgorithm::kCrc64Nvme, S3ChecksumAlgorithm::kMd5}) {
      S3Checksum c(a);
      c.Update(payload);
      body.expected.emplace_back(a, c.FinishBase64());
    }
  }
};

TEST(S3BodyTest, CopiesAcrossExtentsCheckingOnTheWay) {
  for (size_t piece : {size_t{1000}, size_t{65536}, size_t{100000}, size_t{1} << 21}) {
    Body b((1 << 21) + 17, piece);
    // The destination: a header's room, then uneven extents, as a G2 allocation has them.
    std::vector<std::byte> out(b.body.size + 44 + 3, std::byte{0x5a});
    const std::array<std::span<std::byte>, 3> extents = {std::span(out).first(70000),
                                                         std::span(out).subspan(70000, 1 << 20),
                                                         std::span(out).subspan(70000 + (1 << 20))};
    S3BodyChecks checks(b.body, /*digest=*/true);
    CopyChecked(b.body, extents, 44, &checks);
    ASSERT_FALSE(checks.Finish()) << piece;
    EXPECT_EQ(checks.digest(), ContentDigest(b.payload)) << "the ETag, however the body came";
    EXPECT_EQ(0, std::memcmp(out.data() + 44, b.payload.data(), b.payload.size())) << piece;
    EXPECT_EQ(out[43], std::byte{0x5a}) << "nothing before the offset";
    EXPECT_EQ(out[44 + b.payload.size()], std::byte{0x5a}) << "nothing after the body";
    // The general path: joined in place, the same checks and digest.
    std::array<uint8_t, 16> digest{};
    std::span<std::byte> joined;
    ASSERT_FALSE(JoinChecked(b.body, &joined, &digest));
    EXPECT_EQ(digest, ContentDigest(b.payload));
    EXPECT_EQ(0, std::memcmp(joined.data(), b.payload.data(), b.payload.size()));
  }
}

TEST(S3BodyTest, AMismatchIsBadDigestAndAWrongSignedHashIsItsOwnError) {
  Body b(300001, 4096);
  b.body.expected[0].second = "AAAAAAAAAAA=";
  std::vector<std::byte> out(b.body.size);
  S3BodyChecks checks(b.body, /*digest=*/false);
  CopyChecked(b.body, std::array{std::span(out)}, 0, &checks);
  std::optional<S3Error> e = checks.Finish();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "BadDigest");
  Body signed_body(1000, 100);
  signed_body.body.payload_sha256 = std::string(64, '0');
  std::span<std::byte> joined;
  e = JoinChecked(signed_body.body, &joined);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "XAmzContentSHA256Mismatch");
}

}  // namespace
}  // namespace kvtier::server
