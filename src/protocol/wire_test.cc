#include "src/protocol/wire.h"

#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace kvtier::protocol {
namespace {

std::string Frame(uint8_t opcode, uint64_t id, std::string_view body, uint8_t version = kVersion) {
  FrameHeader h;
  h.version = version;
  h.opcode = opcode;
  h.request_id = id;
  h.body_length = static_cast<uint32_t>(body.size());
  std::byte head[kHeaderSize];
  EncodeHeader(h, head);
  std::string out(reinterpret_cast<const char*>(head), kHeaderSize);
  out += body;
  return out;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(WireTest, HeaderLayoutIsLittleEndianWithMagicKVT1) {
  std::string f = Frame(0x11, 0x0102030405060708ull, "abc");
  ASSERT_EQ(f.size(), kHeaderSize + 3);
  EXPECT_EQ(f.substr(0, 4), "KVT1");
  EXPECT_EQ(static_cast<uint8_t>(f[4]), kVersion);
  EXPECT_EQ(static_cast<uint8_t>(f[5]), 0x11);
  EXPECT_EQ(static_cast<uint8_t>(f[8]), 0x08);   // request id, least significant byte first
  EXPECT_EQ(static_cast<uint8_t>(f[15]), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(f[16]), 3);     // body length
}

TEST(WireTest, DecodesAFrameAndReportsItsSize) {
  std::string f = Frame(0x12, 7, "hello") + "trailing";
  DecodedFrame d = DecodeFrame(Bytes(f), 1024);
  ASSERT_EQ(d.state, DecodedFrame::State::kFrame);
  EXPECT_EQ(d.header.opcode, 0x12);
  EXPECT_EQ(d.header.request_id, 7u);
  EXPECT_EQ(d.frame_size, kHeaderSize + 5);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(d.body.data()), d.body.size()), "hello");
}

TEST(WireTest, TruncatedFramesNeedMoreAtEveryLength) {
  std::string f = Frame(0x11, 1, "0123456789");
  for (size_t n = 0; n < f.size(); ++n) {
    DecodedFrame d = DecodeFrame(Bytes(f).first(n), 1024);
    EXPECT_EQ(d.state, DecodedFrame::State::kNeedMore) << n;
    if (n >= kHeaderSize) {
      EXPECT_EQ(d.frame_size, f.size());
    }
  }
}

TEST(WireTest, BadMagicIsAnErrorFromTheFirstByte) {
  std::string http = "GET / HTTP/1.1\r\n\r\n";
  DecodedFrame d = DecodeFrame(Bytes(http).first(1), 1024);
  EXPECT_EQ(d.state, DecodedFrame::State::kError);
  EXPECT_EQ(d.error.code(), StatusCode::kInvalidArgument);
}

TEST(WireTest, UnsupportedVersionIsFailedPrecondition) {
  std::string f = Frame(0x11, 1, "", 9);
  DecodedFrame d = DecodeFrame(Bytes(f), 1024);
  EXPECT_EQ(d.state, DecodedFrame::State::kError);
  EXPECT_EQ(d.error.code(), StatusCode::kFailedPrecondition);
}

TEST(WireTest, LyingLengthOverTheLimitFailsBeforeTheBodyArrives) {
  std::string f = Frame(0x12, 1, "");
  f[16] = '\xff';
  f[17] = '\xff';
  f[18] = '\xff';
  f[19] = '\x7f';
  DecodedFrame d = DecodeFrame(Bytes(f), 64 << 20);
  EXPECT_EQ(d.state, DecodedFrame::State::kError);
  EXPECT_EQ(d.error.code(), StatusCode::kResourceExhausted);
}

TEST(WireTest, UnknownOpcodesAreFramesNotFramingErrors) {
  std::string f = Frame(0x66, 3, "x");
  DecodedFrame d = DecodeFrame(Bytes(f), 1024);
  ASSERT_EQ(d.state, DecodedFrame::State::kFrame);
  EXPECT_FALSE(IsRequestOpcode(0x66));
  EXPECT_EQ(OpcodeName(0x66), "UNKNOWN");
}

TEST(WireTest, ReaderFailsStickyPastTheEnd) {
  std::string s = "\x01\x02";
  BodyReader r(Bytes(s));
  EXPECT_EQ(r.U16(), 0x0201);
  EXPECT_EQ(r.U32(), 0u);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.U8(), 0);
}

TEST(WireTest, StatusRoundTripsAndUnknownCodesDecodeAsUnknown) {
  std::string body;
  BodyWriter w(&body);
  w.StatusValue(Status::NotFound("no such block"));
  BodyReader r(Bytes(body));
  Status s = r.StatusValue();
  EXPECT_TRUE(r.done());
  EXPECT_EQ(s, Status::NotFound("no such block"));
  EXPECT_EQ(StatusCodeFromWire(200), StatusCode::kUnknown);
}

}  // namespace
}  // namespace kvtier::protocol
