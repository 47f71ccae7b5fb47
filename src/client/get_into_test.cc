#include "src/client/get_into.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/protocol/wire.h"

namespace kvtier::client {
namespace {

// A reply body served from memory, counting what was read; fails reads past `fail_after`.
class FakeConnection {
 public:
  explicit FakeConnection(std::string body, size_t fail_after = SIZE_MAX)
      : body_(std::move(body)), fail_after_(fail_after) {}
  BodyRead reader() {
    return [this](std::byte* out, size_t n) -> Status {
      if (pos_ + n > body_.size() || pos_ + n > fail_after_) return Status::Unavailable("connection reset");
      std::memcpy(out, body_.data() + pos_, n);
      pos_ += n;
      return Status::OK();
    };
  }
  size_t read() const { return pos_; }
  size_t size() const { return body_.size(); }

 private:
  std::string body_;
  size_t fail_after_;
  size_t pos_ = 0;
};

std::string Reply(const std::vector<Status>& items, const std::vector<std::string>& values) {
  std::string body;
  protocol::BodyWriter w(&body);
  w.StatusValue(Status::OK());
  w.U32(static_cast<uint32_t>(items.size()));
  size_t v = 0;
  for (const Status& s : items) {
    w.StatusValue(s);
    if (s.ok()) w.U64(values[v++].size());
  }
  for (const std::string& value : values) body += value;
  return body;
}

std::span<std::byte> Span(std::string* s) { return {reinterpret_cast<std::byte*>(s->data()), s->size()}; }

TEST(GetIntoTest, ValuesLandInTheirBuffersAndEveryByteIsConsumed) {
  std::string big(100000, 'b');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31);
  FakeConnection conn(Reply({Status::OK(), Status::NotFound("miss"), Status::OK(), Status::OK()},
                            {"first", big, "too long"}));
  std::string a(5, '.'), b(10, '.'), c(100000, '.'), d(3, '.');
  std::vector<std::span<std::byte>> outs = {Span(&a), Span(&b), Span(&c), Span(&d)};
  std::vector<Result<size_t>> results;
  ASSERT_TRUE(ReadGetManyInto(conn.size(), conn.reader(), outs, &results).ok());
  EXPECT_EQ(conn.read(), conn.size());
  ASSERT_TRUE(results[0].ok());
  EXPECT_EQ(*results[0], 5u);
  EXPECT_EQ(a, "first");
  EXPECT_EQ(results[1].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b, "..........");
  ASSERT_TRUE(results[2].ok());
  EXPECT_EQ(c, big);
  EXPECT_EQ(results[3].status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(d, "...") << "a value that does not fit is not written";
}

TEST(GetIntoTest, AFailedRequestFailsEveryItem) {
  std::string body;
  protocol::BodyWriter w(&body);
  w.StatusValue(Status::InvalidArgument("too many keys"));
  FakeConnection conn(body);
  std::string a(4, '.');
  std::vector<std::span<std::byte>> outs = {Span(&a), Span(&a)};
  std::vector<Result<size_t>> results;
  ASSERT_TRUE(ReadGetManyInto(conn.size(), conn.reader(), outs, &results).ok());
  for (const auto& r : results) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(GetIntoTest, MalformedRepliesAreInternalAndConsumedWhole) {
  std::string good = Reply({Status::OK(), Status::OK()}, {"abc", "defg"});
  std::vector<std::string> bad = {
      Reply({Status::OK()}, {"abc"}),                  // One item for two keys.
      good.substr(0, good.size() - 1),                 // Values shorter than the list says.
      good + "x",                                      // Trailing bytes.
      good.substr(0, 9),                               // Cut inside the item list.
  };
  {  // Sizes that add up past 2^64 to the bytes that follow (found by the fuzzer).
    std::string body;
    protocol::BodyWriter w(&body);
    w.StatusValue(Status::OK());
    w.U32(2);
    w.StatusValue(Status::OK());
    w.U64(0x8000000000000004ull);
    w.StatusValue(Status::OK());
    w.U64(0x8000000000000000ull);
    body += "abcd";
    bad.push_back(body);
  }
  for (const std::string& body : bad) {
    FakeConnection conn(body);
    std::string a(8, '.'), b(8, '.');
    std::vector<std::span<std::byte>> outs = {Span(&a), Span(&b)};
    std::vector<Result<size_t>> results;
    ASSERT_TRUE(ReadGetManyInto(conn.size(), conn.reader(), outs, &results).ok());
    EXPECT_EQ(conn.read(), conn.size()) << "the connection stays in step";
    for (const auto& r : results) EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  }
}

TEST(GetIntoTest, AReadFailureIsReturnedAndFailsEveryItem) {
  std::string value(50000, 'v');
  std::string body = Reply({Status::OK()}, {value});
  for (size_t cut : {size_t{2}, size_t{20}, body.size() - 1}) {
    FakeConnection conn(body, cut);
    std::string a(50000, '.');
    std::vector<std::span<std::byte>> outs = {Span(&a)};
    std::vector<Result<size_t>> results;
    Status s = ReadGetManyInto(conn.size(), conn.reader(), outs, &results);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << cut;
    EXPECT_EQ(results[0].status().code(), StatusCode::kUnavailable) << cut;
  }
}

}  // namespace
}  // namespace kvtier::client
