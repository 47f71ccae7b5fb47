#include "src/server/s3_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kvtier::server {
namespace {

TEST(S3ProtocolTest, PathsSplitIntoADecodedBucketAndKey) {
  std::optional<S3Path> object = SplitS3Path("/kv-blocks/layer/0/block%201");
  ASSERT_TRUE(object.has_value());
  EXPECT_EQ(object->bucket, "kv-blocks");
  EXPECT_EQ(object->key, "layer/0/block 1");
  std::optional<S3Path> bucket = SplitS3Path("/kv-blocks");
  ASSERT_TRUE(bucket.has_value());
  EXPECT_EQ(bucket->bucket, "kv-blocks");
  EXPECT_EQ(bucket->key, "");
  std::optional<S3Path> service = SplitS3Path("/");
  ASSERT_TRUE(service.has_value());
  EXPECT_EQ(service->bucket, "");
  EXPECT_EQ(service->key, "");
  EXPECT_FALSE(SplitS3Path("").has_value());
  EXPECT_FALSE(SplitS3Path("kv-blocks/k").has_value());
  EXPECT_FALSE(SplitS3Path("/b/%zz").has_value());  // Not percent-encoding.
}

TEST(S3ProtocolTest, DeleteObjectsDocumentsGiveTheirKeysInOrder) {
  std::optional<S3DeleteRequest> d = ParseDeleteXml(
      "<Delete><Quiet>true</Quiet><Object><Key>a&amp;b</Key></Object>"
      "<Object><Key>c</Key></Object></Delete>");
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->quiet);
  EXPECT_EQ(d->keys, (std::vector<std::string>{"a&b", "c"}));
  std::optional<S3DeleteRequest> loud = ParseDeleteXml("<Delete><Object><Key>k</Key></Object></Delete>");
  ASSERT_TRUE(loud.has_value());
  EXPECT_FALSE(loud->quiet);
  EXPECT_FALSE(ParseDeleteXml("<Delete><Object><Key>unclosed</Object></Delete>").has_value());
  // No keys is a document the handler refuses (1 to 1000 keys), not a malformed one.
  ASSERT_TRUE(ParseDeleteXml("<Delete></Delete>").has_value());
}

TEST(S3ProtocolTest, CompleteUploadDocumentsGiveTheirPartsOrRefuse) {
  using Parts = std::vector<std::pair<uint32_t, std::string>>;
  std::optional<Parts> parts = ParseCompleteUploadXml(
      "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag></Part>"
      "<Part><ETag>e2</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>");
  ASSERT_TRUE(parts.has_value());
  EXPECT_EQ(*parts, (Parts{{1, "\"e1\""}, {2, "e2"}}));
  for (const char* bad : {
           "<CompleteMultipartUpload></CompleteMultipartUpload>",  // No part.
           "<Part><PartNumber>1</PartNumber><ETag>e</ETag>",        // Unclosed.
           "<Part><PartNumber>1</PartNumber></Part>",               // No ETag.
           "<Part><PartNumber>x</PartNumber><ETag>e</ETag></Part>",
           "<Part><PartNumber>123456</PartNumber><ETag>e</ETag></Part>",
       }) {
    EXPECT_FALSE(ParseCompleteUploadXml(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace kvtier::server
