#include "src/common/copy.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

// Every skew between destination and source, around each size where the copy changes ways
// (memcpy, pieces of 2 KiB, memcpy again from 1 MiB), lands exactly the source's bytes and
// nothing past the end.
TEST(CopyBytesTest, EverySkewAndSizeCopiesExactlyTheBytes) {
  const size_t sizes[] = {0,      1,      63,       2047,     2048,     2049,    4096,
                          262144, 262161, 1048575, 1048576, 1048577};
  std::vector<std::byte> source(1048577 + 64);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 131 + 7);
  std::vector<std::byte> dest(source.size() + 128);
  for (size_t n : sizes) {
    for (size_t skew : {0, 1, 16, 31, 32, 48, 63}) {
      std::fill(dest.begin(), dest.end(), std::byte{0xEE});
      CopyBytes(dest.data() + skew, source.data(), n);
      ASSERT_TRUE(std::equal(source.begin(), source.begin() + static_cast<ptrdiff_t>(n),
                             dest.begin() + static_cast<ptrdiff_t>(skew)))
          << "size " << n << ", skew " << skew;
      EXPECT_EQ(dest[skew + n], std::byte{0xEE}) << "wrote past the end: size " << n;
      if (skew > 0) {
        EXPECT_EQ(dest[skew - 1], std::byte{0xEE}) << "wrote before the start";
      }
    }
  }
}

// The same for the copy into G2: around the size where it starts streaming, with every
// alignment of the destination (the stores need 16 bytes) and of the source.
TEST(CopyBytesTest, TheUncachedCopyCopiesExactlyTheBytesWhateverTheAlignment) {
  const size_t sizes[] = {0, 1, 15, 16, 63, 64, 4095, 4096, 4097, 4160, 65536 + 37, 2097152};
  std::vector<std::byte> source(2097152 + 64);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 131 + 7);
  std::vector<std::byte> dest(source.size() + 128);
  for (size_t n : sizes) {
    for (size_t skew : {0, 1, 8, 15, 16, 17, 63}) {
      for (size_t from : {0, 3}) {
        std::fill(dest.begin(), dest.end(), std::byte{0xEE});
        CopyBytesUncached(dest.data() + skew, source.data() + from, n);
        ASSERT_TRUE(std::equal(source.begin() + static_cast<ptrdiff_t>(from),
                               source.begin() + static_cast<ptrdiff_t>(from + n),
                               dest.begin() + static_cast<ptrdiff_t>(skew)))
            << "size " << n << ", destination skew " << skew << ", source skew " << from;
        EXPECT_EQ(dest[skew + n], std::byte{0xEE}) << "wrote past the end: size " << n;
        if (skew > 0) {
          EXPECT_EQ(dest[skew - 1], std::byte{0xEE}) << "wrote before the start";
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvtier
