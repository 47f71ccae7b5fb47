#include "src/common/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <random>
#include <vector>

namespace kvtier {
namespace {

// Stored checksums must not change with the CPU: whichever XXH3 implementation runs must give
// the portable one's values (the empty input's is XXH3-64's published one).
TEST(ChecksumTest, ValuesAreXxh3OnEveryPath) {
  EXPECT_EQ(Checksum64({}), 0x2D06800538D394C2ull);
  std::vector<std::byte> data(70000);
  std::mt19937 rng(2);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  for (size_t len : {size_t{1}, size_t{16}, size_t{17}, size_t{128}, size_t{129}, size_t{240},
                     size_t{241}, size_t{1024}, size_t{1025}, size_t{65536}, data.size()}) {
    const std::span<const std::byte> part = std::span(data).first(len);
    EXPECT_EQ(Checksum64(part), XXH3_64bits(part.data(), part.size())) << len;
    Checksum64Stream stream;
    stream.Update(part);
    EXPECT_EQ(stream.Value(), XXH3_64bits(part.data(), part.size())) << len;
    XXH128_canonical_t portable;
    XXH128_canonicalFromHash(&portable, XXH3_128bits(part.data(), part.size()));
    EXPECT_TRUE(std::ranges::equal(Digest128(part), portable.digest)) << len;
  }
}

TEST(ChecksumTest, StreamOverPiecesEqualsOneShot) {
  std::vector<std::byte> data(3 << 20);
  std::mt19937 rng(1);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  const uint64_t whole = Checksum64(data);
  const std::array<uint8_t, 16> digest = Digest128(data);
  // Pieces of every shape: empty, one byte, odd sizes, larger than XXH3's internal buffer.
  for (size_t piece : {size_t{1}, size_t{7}, size_t{255}, size_t{4096}, size_t{131072},
                       data.size()}) {
    Checksum64Stream stream;
    Digest128Stream digest_stream;
    stream.Update({});
    digest_stream.Update({});
    for (size_t at = 0; at < data.size(); at += piece) {
      stream.Update(std::span(data).subspan(at, std::min(piece, data.size() - at)));
      digest_stream.Update(std::span(data).subspan(at, std::min(piece, data.size() - at)));
    }
    EXPECT_EQ(stream.Value(), whole) << "pieces of " << piece;
    EXPECT_EQ(digest_stream.Value(), digest) << "pieces of " << piece;
  }
  EXPECT_EQ(Digest128Stream().Value(), Digest128({}));
  Checksum64Stream empty;
  EXPECT_EQ(empty.Value(), Checksum64({}));
  data[12345] ^= std::byte{1};
  Checksum64Stream changed;
  changed.Update(data);
  EXPECT_NE(changed.Value(), whole);
}

}  // namespace
}  // namespace kvtier
