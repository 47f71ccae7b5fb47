// The body of an S3 request: located in the connection's input under its framings (chunked
// HTTP, aws-chunked) without moving it, then checked against every checksum and signature the
// client sent while it is copied to where it is kept, so that each byte is read once, while it
// is in cache (docs/protocol.md, "What a request costs the server").
//
// Thread safety: a body and its checks belong to one request.

#ifndef KVTIER_SERVER_S3_BODY_H_
#define KVTIER_SERVER_S3_BODY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/common/checksum.h"
#include "src/server/http_request.h"
#include "src/server/s3_auth.h"
#include "src/server/s3_checksum.h"

namespace kvtier::server {

struct S3Body {
  std::vector<std::span<std::byte>> pieces;  // The payload where it lies in the input, in order.
  uint64_t size = 0;                         // The payload's bytes.
  // What the payload must match: every checksum sent in a header or a trailer (Content-MD5
  // included), and its SHA-256 where the request signed it (x-amz-content-sha256; "" if not).
  std::vector<std::pair<S3ChecksumAlgorithm, std::string>> expected;
  std::string payload_sha256;
};

// x-amz-decoded-content-length of `request`, when it is a length of at most `max_bytes`.
std::optional<uint64_t> DecodedLength(const HttpRequest& request, uint64_t max_bytes);

// Decodes the body of `request`, which lies in `http_pieces` (HttpRequestParser::BodyPieces), as
// `auth` says it was sent: aws-chunked with its chunk signatures checked, or as it is. nullopt
// with *out filled in; otherwise the S3 error (IncompleteBody, InvalidRequest,
// SignatureDoesNotMatch, AccessDenied). Nothing is checked against the payload's bytes yet.
std::optional<S3Error> DecodeS3Body(const HttpRequest& request,
                                    std::vector<std::span<std::byte>> http_pieces,
                                    const S3Auth& auth, S3Body* out);

// What the payload of `request` must match (S3Body::expected, S3Body::payload_sha256): the
// checksums sent in its headers, then those of `trailers`, Content-MD5 included, and the SHA-256
// it signed. InvalidRequest when x-amz-trailer names no checksum or one that `trailers` lack.
std::optional<S3Error> ExpectChecks(const HttpRequest& request, const S3Auth& auth,
                                    std::span<const std::pair<std::string, std::string>> trailers,
                                    S3Body* out);

// A body's checks, folded over its bytes as they go by.
class S3BodyChecks {
 public:
  // With `digest`, also the ContentDigest of the bytes (an object's ETag).
  S3BodyChecks(const S3Body& body, bool digest);

  void Update(std::span<const std::byte> bytes);
  // Ends the checks: nullopt when the bytes match every one; BadDigest or
  // XAmzContentSHA256Mismatch otherwise.
  std::optional<S3Error> Finish();
  // REQUIRES: constructed with `digest`, Finish() called.
  const std::array<uint8_t, 16>& digest() const { return digest_; }

 private:
  const S3Body& body_;
  std::vector<S3Checksum> checksums_;  // One per body_.expected.
  std::optional<S3Checksum> sha256_;
  std::unique_ptr<Digest128Stream> digest_stream_;
  std::array<uint8_t, 16> digest_{};
};

// Makes the payload contiguous in place (JoinInPlace: *joined) and checks it, taking its
// ContentDigest into *digest if given. The S3 error, as S3BodyChecks::Finish gives it, or nullopt.
std::optional<S3Error> JoinChecked(const S3Body& body, std::span<std::byte>* joined,
                                   std::array<uint8_t, 16>* digest = nullptr);

// Copies `bytes` into `out` (pieces of a destination, in order) from byte `offset` of it on,
// folding `checks` (if any) over each stretch while it is in cache. REQUIRES: room for them.
void CopyInto(std::span<const std::span<std::byte>> out, size_t offset,
              std::span<const std::byte> bytes, S3BodyChecks* checks = nullptr);

// Copies the payload into `out` (pieces of a destination, in order) from byte `offset` of it on,
// folding `checks` over each stretch while it is in cache. REQUIRES: room for body.size bytes.
void CopyChecked(const S3Body& body, std::span<const std::span<std::byte>> out, size_t offset,
                 S3BodyChecks* checks);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_S3_BODY_H_
