// S3's wire vocabulary, for kvtierd's S3 endpoint (s3_handler.cc): errors as XML and from
// Store statuses, dates, XML text, ETag lists, byte ranges, and the reply a handler sends.

#ifndef KVTIER_SRC_SERVER_S3_PROTOCOL_H_
#define KVTIER_SRC_SERVER_S3_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/server/s3_auth.h"
#include "src/server/s3_service.h"

namespace kvtier::server {

std::string XmlEscape(std::string_view s);
std::string XmlUnescape(std::string_view s);
// The text of the first <name>…</name> in `xml`, unescaped.
std::optional<std::string> XmlElement(std::string_view xml, std::string_view name);

// The wall clock, in microseconds since the Unix epoch.
uint64_t UnixMicros();
// "Wed, 21 Oct 2015 07:28:00 GMT"
std::string HttpDate(uint64_t unix_us);
// "2015-10-21T07:28:00.000Z"
std::string IsoDate(uint64_t unix_us);

// One table from Store statuses to S3 errors; NotFound is `not_found_code`.
S3Error S3ErrorOf(const Status& s, std::string_view not_found_code = "NoSuchKey");
// S3's <Error> document for `e` on `resource`.
std::string S3ErrorXml(const S3Error& e, std::string_view resource);

// Whether an If-Match / If-None-Match list ("\"etag\", \"etag2\"" or "*") names `etag`.
bool EtagListMatches(std::string_view list, std::string_view etag);

// S3's limit on the length of an object's key.
inline constexpr size_t kMaxS3KeyBytes = 1024;

// A path-style request's bucket and key, percent-decoded: the key "" for a bucket's path, both
// "" for the service's ("/").
struct S3Path {
  std::string bucket;
  std::string key;
};
// nullopt when `path` (as sent, percent-encoded) does not decode or does not start with '/'.
std::optional<S3Path> SplitS3Path(std::string_view path);

// "bytes=a-b", "bytes=a-", "bytes=-n" within an object of `size` bytes: (offset, length);
// nullopt when unsatisfiable. A range S3 ignores (malformed, several ranges) is the whole.
std::optional<std::pair<uint64_t, uint64_t>> ParseS3Range(std::string_view range, uint64_t size);

// What the handler sends: status, headers, and a body of its own or from the Store.
struct S3Reply {
  S3Reply(int status_code = 200, std::vector<std::pair<std::string, std::string>> header_list = {},
          std::string text = "")
      : status(status_code), headers(std::move(header_list)), body(std::move(text)) {}
  // A reply to HEAD: headers only, Content-Length `length`.
  static S3Reply Head(int status_code,
                      std::vector<std::pair<std::string, std::string>> header_list,
                      uint64_t length) {
    S3Reply r(status_code, std::move(header_list));
    r.head_length = length;
    return r;
  }

  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // A body from the Store instead: `length` bytes of `lease` from `offset`.
  BlockHandle lease;
  size_t lease_offset = 0;
  size_t lease_length = 0;
  // HEAD: Content-Length says this, no body is sent.
  std::optional<uint64_t> head_length;
};

// The answer to a PutObject or UploadPart of `request` stored as `etag`: its ETag and the
// checksums the client sent, echoed as S3 does.
S3Reply StoredReply(const HttpRequest& request, const std::string& etag);

// An S3 error as the reply that carries it.
S3Reply S3ErrorReply(const S3Error& e, std::string_view resource);
// A multipart upload's Store status as S3's error: NoSuchUpload for NotFound.
S3Error S3UploadError(const Status& s);
// S3's multipart rules: part numbers 1 to 10000, every part but the last at least 5 MiB.
constexpr uint32_t kMaxParts = 10000;
constexpr uint64_t kMinPartBytes = 5 << 20;
// UploadPart's partNumber, 1 to kMaxParts in decimal; nullopt for anything else.
std::optional<uint32_t> ParsePartNumber(std::string_view text);
// The value of `name` in a request's decoded query (S3Auth::query); nullopt when absent.
std::optional<std::string> QueryValue(const S3Auth& auth, std::string_view name);

// DeleteObjects' document, <Delete><Quiet>true</Quiet><Object><Key>k</Key></Object>…:
// the keys, in order; nullopt when malformed.
struct S3DeleteRequest {
  std::vector<std::string> keys;
  bool quiet = false;
};
std::optional<S3DeleteRequest> ParseDeleteXml(std::string_view xml);
// CompleteMultipartUpload's, <CompleteMultipartUpload><Part><PartNumber>1</PartNumber>
// <ETag>"…"</ETag></Part>…: (part number, ETag) in order; nullopt when malformed or empty.
std::optional<std::vector<std::pair<uint32_t, std::string>>> ParseCompleteUploadXml(
    std::string_view xml);

// ListBuckets' document: `owner`'s buckets.
std::string ListAllMyBucketsXml(std::string_view owner,
                                const std::vector<S3Service::Bucket>& buckets);

// One page of a ListObjectsV2 listing, as the handler collected it.
struct S3Listing {
  std::string bucket, prefix, delimiter, token, start_after;
  size_t max = 0;
  std::vector<std::pair<std::string, S3ObjectHeader>> objects;  // Name and header.
  std::vector<std::string> prefixes;                            // Common prefixes.
  bool truncated = false;
  std::string last;  // The last name listed: the next page's continuation token.
};
std::string ListBucketResultXml(const S3Listing& listing);

}  // namespace kvtier::server

#endif  // KVTIER_SRC_SERVER_S3_PROTOCOL_H_
