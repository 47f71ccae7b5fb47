#include "src/server/s3_auth.h"

#include <gtest/gtest.h>

#include <string>

#include "src/common/sigv4.h"
#include "src/server/s3_checksum.h"

namespace kvtier::server {
namespace {

std::span<const std::byte> Bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

TEST(S3ChecksumTest, CrcsMatchTheirCheckValues) {
  EXPECT_EQ(Crc32(0, Bytes("123456789")), 0xCBF43926u);
  EXPECT_EQ(Crc32c(0, Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc64Nvme(0, Bytes("123456789")), 0xAE8B14860A799888ull);
  // Pieces give what the whole gives, across the 8-byte steps.
  const std::string text = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(Crc64Nvme(Crc64Nvme(0, Bytes(text.substr(0, 13))), Bytes(text.substr(13))),
            Crc64Nvme(0, Bytes(text)));
  S3Checksum sha(S3ChecksumAlgorithm::kSha256);
  sha.Update(Bytes(""));
  EXPECT_EQ(sha.FinishBase64(), "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
  S3Checksum crc(S3ChecksumAlgorithm::kCrc32);
  crc.Update(Bytes("123456789"));
  EXPECT_EQ(crc.FinishBase64(), "y/Q5Jg==");
}

TEST(AwsChunkedTest, DecodesUnsignedChunksWithATrailer) {
  std::string body = "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";
  AwsChunkedBody out;
  ASSERT_FALSE(DecodeAwsChunked(std::as_writable_bytes(std::span(body.data(), body.size())), nullptr,
                                false, &out));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data.data()), out.data.size()), "hello world");
  ASSERT_EQ(out.trailers.size(), 1u);
  EXPECT_EQ(out.trailers[0].first, "x-amz-checksum-crc32");
}

TEST(AwsChunkedTest, RefusesMalformedBodies) {
  for (std::string body : {"5\r\nhel", "zz\r\n", "5\r\nhelloXX0\r\n\r\n", "3\r\nabc\r\n0\r\n\r\nextra",
                           "3;foo=bar\r\nabc\r\n0\r\n\r\n"}) {
    AwsChunkedBody out;
    std::optional<S3Error> e =
        DecodeAwsChunked(std::as_writable_bytes(std::span(body.data(), body.size())), nullptr, false, &out);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, 400) << body;
  }
}

TEST(AwsChunkedTest, ChecksEveryChunkSignatureInChain) {
  S3Auth auth;
  auth.signing_key = s3::SigningKey("secret", "20240101", "us-east-1", "s3");
  auth.amz_date = "20240101T000000Z";
  auth.scope = "20240101/us-east-1/s3/aws4_request";
  auth.seed_signature = std::string(64, 'a');
  // Sign the chunks as a client does.
  ChunkSignatures signer(auth);
  auto sign = [&](std::string_view previous, std::string_view data) {
    return s3::HexEncode(s3::HmacSha256(
        auth.signing_key, "AWS4-HMAC-SHA256-PAYLOAD\n" + auth.amz_date + "\n" + auth.scope + "\n" +
                              std::string(previous) + "\n" + s3::Sha256Hex({}) + "\n" +
                              s3::Sha256Hex(Bytes(data))));
  };
  const std::string s1 = sign(auth.seed_signature, "abc");
  const std::string s2 = sign(s1, "");
  std::string body = "3;chunk-signature=" + s1 + "\r\nabc\r\n0;chunk-signature=" + s2 + "\r\n\r\n";
  std::string tampered = body;
  tampered[tampered.find("abc")] = 'x';
  AwsChunkedBody out;
  ChunkSignatures good(auth);
  EXPECT_FALSE(DecodeAwsChunked(std::as_writable_bytes(std::span(body.data(), body.size())), &good, false, &out));
  ChunkSignatures bad(auth);
  std::optional<S3Error> e =
      DecodeAwsChunked(std::as_writable_bytes(std::span(tampered.data(), tampered.size())), &bad, false, &out);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "SignatureDoesNotMatch");
}

TEST(S3AuthTest, PercentDecodeRefusesBrokenEscapes) {
  EXPECT_EQ(PercentDecode("a%20b%2Fc"), "a b/c");
  EXPECT_FALSE(PercentDecode("a%2"));
  EXPECT_FALSE(PercentDecode("a%zz"));
}

}  // namespace
}  // namespace kvtier::server
