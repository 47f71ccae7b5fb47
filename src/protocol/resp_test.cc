#include "src/protocol/resp.h"

#include <gtest/gtest.h>

namespace kvtier::protocol {
namespace {

using State = RespParse::State;

TEST(RespTest, ParsesMultiBulkCommands) {
  std::string in = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nxx\r\n*1\r\n";
  std::vector<std::string_view> args;
  RespParse r = ParseRespCommand(in, {}, &args);
  ASSERT_EQ(r.state, State::kCommand);
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[0], "SET");
  EXPECT_EQ(args[2], "v\r\nxx");  // Bulk strings are binary-safe.
  EXPECT_EQ(in.substr(r.consumed), "*1\r\n");
}

TEST(RespTest, ParsesInlineCommands) {
  std::vector<std::string_view> args;
  RespParse r = ParseRespCommand("PING  hello\r\nGET", {}, &args);
  ASSERT_EQ(r.state, State::kCommand);
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[1], "hello");
  EXPECT_EQ(r.consumed, 13u);
}

TEST(RespTest, EveryTruncationNeedsMore) {
  std::string in = "*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n";
  std::vector<std::string_view> args;
  for (size_t n = 1; n < in.size(); ++n) {
    RespParse r = ParseRespCommand(std::string_view(in).substr(0, n), {}, &args);
    EXPECT_EQ(r.state, State::kNeedMore) << n;
  }
  RespParse r = ParseRespCommand(in.substr(0, 20), {}, &args);
  EXPECT_EQ(r.bytes_needed, in.size());  // Knows the whole size once the bulk header is in.
}

TEST(RespTest, OversizedBulkAndLyingCountsAreErrors) {
  RespLimits limits;
  limits.max_bulk_bytes = 100;
  limits.max_args = 10;
  std::vector<std::string_view> args;
  RespParse big = ParseRespCommand("*2\r\n$3\r\nSET\r\n$101\r\n", limits, &args);
  EXPECT_EQ(big.state, State::kError);
  EXPECT_EQ(big.error, "Protocol error: invalid bulk length");
  RespParse many = ParseRespCommand("*11\r\n", limits, &args);
  EXPECT_EQ(many.state, State::kError);
  EXPECT_EQ(many.error, "Protocol error: invalid multibulk length");
  RespParse neg = ParseRespCommand("*1\r\n$-5\r\n", limits, &args);
  EXPECT_EQ(neg.state, State::kError);
  RespParse dollar = ParseRespCommand("*1\r\n:5\r\n", limits, &args);
  EXPECT_EQ(dollar.state, State::kError);
  EXPECT_EQ(dollar.error, "Protocol error: expected '$', got ':'");
}

TEST(RespTest, BulkMustEndWithCrLf) {
  std::vector<std::string_view> args;
  RespParse r = ParseRespCommand("*1\r\n$1\r\nab\r\n", {}, &args);
  EXPECT_EQ(r.state, State::kError);
}

TEST(RespTest, OverlongInlineLineIsAnError) {
  RespLimits limits;
  limits.max_inline_bytes = 8;
  std::vector<std::string_view> args;
  RespParse r = ParseRespCommand("GET aaaaaaaaaaaaa", limits, &args);
  EXPECT_EQ(r.state, State::kError);
}

TEST(RespTest, ReplyWriters) {
  std::string out;
  AppendSimpleString("OK", &out);
  AppendError("ERR bad\r\nthing", &out);
  AppendInteger(-3, &out);
  AppendBulk("ab", &out);
  AppendNullBulk(&out);
  AppendArrayHeader(2, &out);
  EXPECT_EQ(out, "+OK\r\n-ERR bad  thing\r\n:-3\r\n$2\r\nab\r\n$-1\r\n*2\r\n");
}

}  // namespace
}  // namespace kvtier::protocol
