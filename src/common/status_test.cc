#include "kvtier/status.h"

#include <gtest/gtest.h>

#include <string>

namespace kvtier {
namespace {

TEST(StatusTest, OkCarriesNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorKeepsCodeAndMessageThroughCopies) {
  Status s = Status::InvalidArgument("key must be 32 bytes");
  Status copy = s;
  EXPECT_FALSE(copy.ok());
  EXPECT_EQ(copy.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(copy.ToString(), "INVALID_ARGUMENT: key must be 32 bytes");
  EXPECT_EQ(copy, s);
}

TEST(StatusTest, RetryabilityFollowsTheCode) {
  EXPECT_TRUE(Status::Unavailable("x").IsRetryable());
  EXPECT_TRUE(Status::ResourceExhausted("x").IsRetryable());
  EXPECT_FALSE(Status::InvalidArgument("x").IsRetryable());
  EXPECT_FALSE(Status::DataLoss("x").IsRetryable());
}

TEST(ResultTest, HoldsValueOrError) {
  Result<std::string> good = std::string("v");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, "v");
  EXPECT_TRUE(good.status().ok());

  Result<std::string> bad = Status::NotFound("gone");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

TEST(ResultTest, OkStatusWithoutValueBecomesInternalError) {
  Result<int> r = Status::OK();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace kvtier
