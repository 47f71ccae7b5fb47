#include "src/server/s3_auth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "src/common/sigv4.h"
#include "src/server/aws_chunked.h"
#include "src/server/http_request.h"
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

// A reflected CRC a bit at a time, from its definition: what the tables and the carry-less
// folding of long inputs must both give.
template <typename T>
T BitwiseCrc(T polynomial, T crc, std::span<const std::byte> data) {
  crc = ~crc;
  for (std::byte b : data) {
    crc ^= static_cast<T>(std::to_integer<uint8_t>(b));
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ polynomial : crc >> 1;
  }
  return ~crc;
}

TEST(S3ChecksumTest, LongInputsOfEveryLengthAndSplitMatchTheDefinition) {
  std::string data(4200, '\0');
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (char& c : data) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>(state >> 56);
  }
  // 256 bytes and more take 512-bit folding where the CPU has it (VPCLMULQDQ), 64 to 255 the
  // 128-bit one: their loops, each remainder after them, and the tables' tail.
  for (size_t length : {0, 1, 15, 16, 63, 64, 65, 79, 80, 127, 128, 129, 255, 256, 257, 272, 319,
                        320, 321, 511, 512, 513, 767, 1000, 1024, 2047, 2049, 4095, 4200}) {
    for (size_t offset : {0, 1, 7}) {
      if (offset + length > data.size()) continue;
      const auto piece = Bytes(std::string_view(data).substr(offset, length));
      SCOPED_TRACE("length " + std::to_string(length) + " at offset " + std::to_string(offset));
      EXPECT_EQ(Crc32(0, piece), BitwiseCrc<uint32_t>(0xEDB88320u, 0, piece));
      EXPECT_EQ(Crc32c(0, piece), BitwiseCrc<uint32_t>(0x82F63B78u, 0, piece));
      EXPECT_EQ(Crc64Nvme(0, piece), BitwiseCrc<uint64_t>(0x9A6C9329AC4BC9B5ull, 0, piece));
      // Continued from a CRC, as a body arriving in pieces is checked.
      EXPECT_EQ(Crc64Nvme(0x0123456789ABCDEFull, piece),
                BitwiseCrc<uint64_t>(0x9A6C9329AC4BC9B5ull, 0x0123456789ABCDEFull, piece));
      EXPECT_EQ(Crc32(0xDEADBEEFu, piece), BitwiseCrc<uint32_t>(0xEDB88320u, 0xDEADBEEFu, piece));
    }
  }
}

// `body` laid out as a chunked HTTP body is in its input: pieces of `piece` bytes with framing
// between them ("~~" here), which the decoder must read across and never take for payload.
struct Pieces {
  std::string buffer;
  std::vector<std::span<std::byte>> pieces;
  Pieces(std::string_view body, size_t piece) {
    std::vector<std::pair<size_t, size_t>> at;
    for (size_t i = 0; i < body.size(); i += piece) {
      const size_t n = std::min(piece, body.size() - i);
      at.emplace_back(buffer.size(), n);
      buffer += body.substr(i, n);
      buffer += "~~";
    }
    for (const auto& [offset, n] : at) {
      pieces.push_back(std::as_writable_bytes(std::span(buffer.data() + offset, n)));
    }
  }
};

std::optional<S3Error> Decode(std::string_view body, size_t piece, ChunkSignatures* signatures,
                              AwsChunkedBody* out, std::string* payload) {
  Pieces p(body, piece);
  std::optional<S3Error> e = DecodeAwsChunked(p.pieces, signatures, false, out);
  const std::span<std::byte> joined = JoinInPlace(out->data);
  payload->assign(reinterpret_cast<const char*>(joined.data()), joined.size());
  return e;
}

TEST(AwsChunkedTest, DecodesUnsignedChunksWithATrailerAcrossPieces) {
  const std::string body =
      "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";
  // Every split: a CRLF, a size, a trailer broken between two pieces of a chunked HTTP body.
  for (size_t piece = 1; piece <= body.size(); ++piece) {
    AwsChunkedBody out;
    std::string payload;
    ASSERT_FALSE(Decode(body, piece, nullptr, &out, &payload)) << piece;
    EXPECT_EQ(payload, "hello world") << piece;
    EXPECT_EQ(out.size, 11u) << piece;
    ASSERT_EQ(out.trailers.size(), 1u) << piece;
    EXPECT_EQ(out.trailers[0].first, "x-amz-checksum-crc32");
    EXPECT_EQ(out.trailers[0].second, "DUoRhQ==");
  }
  // In one piece, the payload is located where it lies, in as many pieces as chunks.
  AwsChunkedBody out;
  Pieces one(body, body.size());
  ASSERT_FALSE(DecodeAwsChunked(one.pieces, nullptr, false, &out));
  ASSERT_EQ(out.data.size(), 2u);
  EXPECT_EQ(out.data[0].data(), one.pieces[0].data() + 3);
}

TEST(AwsChunkedTest, AStreamKeepsLinesAcrossCallsAndFindsPayloadWhereverItLies) {
  // An S3 PUT received in place: framing in small reads, a chunk's data read into G2.
  AwsChunkedStream stream;
  AwsChunkedStream::Step step;
  std::string framing = "5\r";
  ASSERT_FALSE(stream.Next(std::as_writable_bytes(std::span(framing.data(), framing.size())), &step));
  EXPECT_EQ(step.consumed, 2u);
  EXPECT_FALSE(step.chunk_began);
  EXPECT_EQ(stream.run(), 0u);
  framing = "\nhe";
  ASSERT_FALSE(stream.Next(std::as_writable_bytes(std::span(framing.data(), framing.size())), &step));
  EXPECT_TRUE(step.chunk_began);  // It stops after the header, for its signature.
  EXPECT_EQ(step.consumed, 1u);
  EXPECT_EQ(stream.chunk_size(), 5u);
  EXPECT_EQ(stream.run(), 5u);
  std::string in_place = "hello";
  ASSERT_FALSE(stream.Next(std::as_writable_bytes(std::span(in_place.data(), in_place.size())), &step));
  EXPECT_EQ(step.data.data(), reinterpret_cast<std::byte*>(in_place.data()));
  EXPECT_EQ(step.data.size(), 5u);
  EXPECT_EQ(stream.run(), 0u);
  framing = "\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";
  std::span<std::byte> rest = std::as_writable_bytes(std::span(framing.data(), framing.size()));
  while (!rest.empty() && !stream.done()) {
    ASSERT_FALSE(stream.Next(rest, &step));
    rest = rest.subspan(step.consumed);
  }
  EXPECT_TRUE(stream.done());
  EXPECT_TRUE(rest.empty());
  EXPECT_EQ(stream.payload_bytes(), 5u);
  ASSERT_EQ(stream.trailers().size(), 1u);
  EXPECT_EQ(stream.trailers()[0].second, "DUoRhQ==");
}

TEST(AwsChunkedTest, RefusesMalformedBodies) {
  // Cut short, not hex, no CRLF after data, bytes after the end, an unknown extension, a bare
  // LF, a trailer line longer than any checksum's.
  for (std::string body : std::initializer_list<std::string>{
           "5\r\nhel", "zz\r\n", "5\r\nhelloXX0\r\n\r\n", "3\r\nabc\r\n0\r\n\r\nextra",
           "3;foo=bar\r\nabc\r\n0\r\n\r\n", "3\nabc\r\n0\r\n\r\n",
           "3\r\nabc\r\n0\r\n" + std::string(5000, 'x') + ":y\r\n\r\n"}) {
    for (size_t piece : {size_t{1}, size_t{2}, size_t{7}, body.size()}) {
      AwsChunkedBody out;
      std::string payload;
      std::optional<S3Error> e = Decode(body, piece, nullptr, &out, &payload);
      ASSERT_TRUE(e.has_value()) << body << " in pieces of " << piece;
      EXPECT_EQ(e->status, 400) << body;
    }
  }
}

TEST(AwsChunkedTest, ChecksEveryChunkSignatureInChain) {
  S3Auth auth;
  auth.signing_key = s3::SigningKey("secret", "20240101", "us-east-1", "s3");
  auth.amz_date = "20240101T000000Z";
  auth.scope = "20240101/us-east-1/s3/aws4_request";
  auth.seed_signature = std::string(64, 'a');
  // Sign the chunks as a client does.
  auto sign = [&](std::string_view previous, std::string_view data) {
    return s3::HexEncode(s3::HmacSha256(
        auth.signing_key, "AWS4-HMAC-SHA256-PAYLOAD\n" + auth.amz_date + "\n" + auth.scope + "\n" +
                              std::string(previous) + "\n" + s3::Sha256Hex({}) + "\n" +
                              s3::Sha256Hex(Bytes(data))));
  };
  const std::string s1 = sign(auth.seed_signature, "abcdefgh");
  const std::string s2 = sign(s1, "");
  std::string body =
      "8;chunk-signature=" + s1 + "\r\nabcdefgh\r\n0;chunk-signature=" + s2 + "\r\n\r\n";
  std::string tampered = body;
  tampered[tampered.find("abc")] = 'x';
  // A chunk's data split between pieces is signed as one.
  for (size_t piece : {size_t{3}, size_t{50}, body.size()}) {
    AwsChunkedBody out;
    std::string payload;
    ChunkSignatures good(auth);
    EXPECT_FALSE(Decode(body, piece, &good, &out, &payload)) << piece;
    EXPECT_EQ(payload, "abcdefgh");
    ChunkSignatures bad(auth);
    AwsChunkedBody bad_out;
    std::optional<S3Error> e = Decode(tampered, piece, &bad, &bad_out, &payload);
    ASSERT_TRUE(e.has_value()) << piece;
    EXPECT_EQ(e->code, "SignatureDoesNotMatch");
  }
}

TEST(S3AuthTest, PercentDecodeRefusesBrokenEscapes) {
  EXPECT_EQ(PercentDecode("a%20b%2Fc"), "a b/c");
  EXPECT_FALSE(PercentDecode("a%2"));
  EXPECT_FALSE(PercentDecode("a%zz"));
}

}  // namespace
}  // namespace kvtier::server
