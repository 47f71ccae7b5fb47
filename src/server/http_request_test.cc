#include "src/server/http_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier::server {
namespace {

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

TEST(HttpRequestParserTest, ParsesAHeadThatArrivesByteByByte) {
  const std::string request = "PUT /bucket/key%20x?uploads&a=b HTTP/1.1\r\nHost: h\r\n"
                              "X-Amz-Date:  20240101T000000Z \r\nContent-Length: 5\r\n\r\nhello";
  HttpRequestParser p({});
  HttpRequestParser::State state = HttpRequestParser::State::kHead;
  for (size_t n = 1; n <= request.size(); ++n) state = p.Parse(Bytes(request.substr(0, n)));
  ASSERT_EQ(state, HttpRequestParser::State::kComplete);
  EXPECT_EQ(p.request().method, "PUT");
  EXPECT_EQ(p.request().path, "/bucket/key%20x");
  EXPECT_EQ(p.request().query, "uploads&a=b");
  ASSERT_NE(p.request().Header("x-amz-date"), nullptr);
  EXPECT_EQ(*p.request().Header("x-amz-date"), "20240101T000000Z");
  EXPECT_EQ(p.consumed(), request.size());
  std::string copy = request;
  std::span<std::byte> body = p.Body(std::as_writable_bytes(std::span(copy.data(), copy.size())));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(body.data()), body.size()), "hello");
}

TEST(HttpRequestParserTest, AChunkedBodyTakenAsItComesIsLocatedWhereverItLies) {
  // The S3 handler's framed bodies (s3_put_in_place.h): the head and a chunk header in the input,
  // then the chunk's data read elsewhere (in place) and handed over, then the framing after it.
  std::string input = "PUT /b/k HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r";
  HttpRequestParser p({});
  ASSERT_EQ(p.Parse(Bytes(input)), HttpRequestParser::State::kBody);
  EXPECT_EQ(p.BodyRun(), 0u);  // Inside the chunk's header.
  std::vector<std::span<std::byte>> body;
  size_t read = 0;
  std::string lf = "\nhe";
  ASSERT_EQ(p.ParseNext(std::as_writable_bytes(std::span(lf.data(), lf.size())), &body, &read),
            HttpRequestParser::State::kBody);
  EXPECT_EQ(read, lf.size());
  ASSERT_EQ(body.size(), 1u);
  EXPECT_EQ(body[0].data(), reinterpret_cast<std::byte*>(lf.data() + 1));
  EXPECT_EQ(p.BodyRun(), 3u);
  std::string in_place = "llo";
  body.clear();
  p.ParseNext(std::as_writable_bytes(std::span(in_place.data(), in_place.size())), &body, &read);
  ASSERT_EQ(body.size(), 1u);
  EXPECT_EQ(body[0].data(), reinterpret_cast<std::byte*>(in_place.data()));
  EXPECT_EQ(p.BodyRun(), 0u);
  std::string rest = "\r\n0\r\n\r\nGET /next";
  body.clear();
  EXPECT_EQ(p.ParseNext(std::as_writable_bytes(std::span(rest.data(), rest.size())), &body, &read),
            HttpRequestParser::State::kComplete);
  EXPECT_TRUE(body.empty());
  EXPECT_EQ(read, rest.find("GET"));  // The next request is left unread.
  EXPECT_EQ(p.request().body_bytes, 5u);
}

TEST(HttpRequestParserTest, AnIncompleteBodySaysWhereItBegins) {
  // What the S3 handler needs to receive the rest of a body in place (s3_put_in_place.h).
  const std::string head = "PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n";
  for (const std::string& arrived : {std::string(), std::string("0"), std::string("0123")}) {
    HttpRequestParser p({});
    ASSERT_EQ(p.Parse(Bytes(head + arrived)), HttpRequestParser::State::kBody) << arrived;
    EXPECT_EQ(p.head_size(), head.size()) << arrived;
    EXPECT_EQ(p.request().body_bytes, arrived.size());
  }
}

TEST(HttpRequestParserTest, JoinsAChunkedBodyInPlaceAndStopsAtTheNextRequest) {
  std::string input = "PUT /b/k HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
  HttpRequestParser p({});
  ASSERT_EQ(p.Parse(Bytes(input)), HttpRequestParser::State::kComplete);
  EXPECT_TRUE(p.request().chunked);
  std::span<std::byte> body = p.Body(std::as_writable_bytes(std::span(input.data(), input.size())));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(body.data()), body.size()), "abcdefg");
  const size_t first = p.consumed();
  EXPECT_EQ(input.substr(first, 3), "GET");
  p.Reset();
  ASSERT_EQ(p.Parse(Bytes(input.substr(first))), HttpRequestParser::State::kComplete);
  EXPECT_EQ(p.request().method, "GET");
}

TEST(HttpRequestParserTest, RefusesWhatIsOverTheLimitsOrMalformed) {
  HttpRequestParser big({.max_head_bytes = 64, .max_headers = 4, .max_body_bytes = 10});
  EXPECT_EQ(big.Parse(Bytes("PUT / HTTP/1.1\r\nContent-Length: 11\r\n\r\n")),
            HttpRequestParser::State::kError);
  EXPECT_EQ(big.error_status(), 413);
  big.Reset();
  EXPECT_EQ(big.Parse(Bytes("GET / HTTP/1.1\r\nX: " + std::string(100, 'a'))), HttpRequestParser::State::kError);
  EXPECT_EQ(big.error_status(), 431);
  big.Reset();
  EXPECT_EQ(big.Parse(Bytes("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n")),
            HttpRequestParser::State::kError);
  EXPECT_EQ(big.error_status(), 431);
  HttpRequestParser p({});
  EXPECT_EQ(p.Parse(Bytes("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")),
            HttpRequestParser::State::kError);
  EXPECT_EQ(p.error_status(), 400);
}

}  // namespace
}  // namespace kvtier::server
