// SigV4 against AWS's published examples: the Signature Version 4 test suite (credentials
// AKIDEXAMPLE, 2015-08-30T12:36:00Z, us-east-1, service "service") and the S3 API reference's
// "GET Object" example (examplebucket, 2013-05-24).

#include "src/common/sigv4.h"

#include <gtest/gtest.h>

namespace kvtier::s3 {
namespace {

const Credentials kSuite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
constexpr char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

SigV4Request SuiteRequest(std::string method, std::string uri,
                          std::vector<std::pair<std::string, std::string>> query = {}) {
  SigV4Request r;
  r.method = std::move(method);
  r.canonical_uri = std::move(uri);
  r.query = std::move(query);
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  r.payload_sha256_hex = kEmptySha;
  return r;
}

TEST(SigV4Test, GetVanilla) {
  const SigV4Signature s =
      SignV4(SuiteRequest("GET", "/"), kSuite, "us-east-1", "service", "20150830T123600Z");
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n" +
                std::string(kEmptySha));
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(s.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4Test, QueryOrderKeyCase) {
  const SigV4Signature s = SignV4(
      SuiteRequest("GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}}), kSuite,
      "us-east-1", "service", "20150830T123600Z");
  EXPECT_EQ(s.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4Test, PostVanilla) {
  const SigV4Signature s =
      SignV4(SuiteRequest("POST", "/"), kSuite, "us-east-1", "service", "20150830T123600Z");
  EXPECT_EQ(s.signature, "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

TEST(SigV4Test, Utf8Path) {
  const SigV4Signature s = SignV4(SuiteRequest("GET", UriEncode("/\xe1\x88\xb4", false)), kSuite,
                                  "us-east-1", "service", "20150830T123600Z");
  EXPECT_EQ(s.signature, "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
}

// S3 API reference, "Authenticating Requests: Using the Authorization Header", GET Object.
TEST(SigV4Test, S3GetObjectExample) {
  SigV4Request r;
  r.method = "GET";
  r.canonical_uri = "/test.txt";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", kEmptySha},
               {"x-amz-date", "20130524T000000Z"}};
  r.payload_sha256_hex = kEmptySha;
  const SigV4Signature s =
      SignV4(r, {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""},
             "us-east-1", "s3", "20130524T000000Z");
  EXPECT_EQ(s.signed_headers, "host;range;x-amz-content-sha256;x-amz-date");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, EncodingAndDates) {
  EXPECT_EQ(UriEncode("a b/c~d*", false), "a%20b/c~d%2A");
  EXPECT_EQ(UriEncode("a/b", true), "a%2Fb");
  EXPECT_EQ(CanonicalQuery({{"prefix", "kvtier-g4/v1/"}, {"list-type", "2"}}),
            "list-type=2&prefix=kvtier-g4%2Fv1%2F");
  EXPECT_EQ(AmzDate(1440938160ull * 1000000), "20150830T123600Z");
  EXPECT_EQ(Sha256Hex({}), kEmptySha);
}

}  // namespace
}  // namespace kvtier::s3
