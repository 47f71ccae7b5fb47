// Who is asking, on kvtierd's S3 endpoint: AWS Signature Version 4 verified as S3 defines it
// (the Authorization header, presigned query strings, and the chunk and trailer signatures of
// streaming uploads), access key ids mapped to tenants ([[tenants]] s3_access_key).
//
// Thread safety: S3Keys is immutable after construction; a ChunkSignatures belongs to one
// request.

#ifndef KVTIER_SERVER_S3_AUTH_H_
#define KVTIER_SERVER_S3_AUTH_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/store.h"
#include "src/server/http_request.h"

namespace kvtier::server {

// An S3 error as the client sees it: HTTP status, S3 code ("SignatureDoesNotMatch"), message.
struct S3Error {
  int status = 400;
  std::string code;
  std::string message;
};

struct S3Principal {
  TenantId tenant;
  std::string tenant_name;
  std::string access_key;  // "" for the anonymous tenant.
  std::string secret;
};

// Access key id -> tenant and secret.
class S3Keys {
 public:
  void Add(S3Principal principal);
  const S3Principal* Find(std::string_view access_key) const;
  bool empty() const { return keys_.empty(); }

 private:
  std::unordered_map<std::string, S3Principal> keys_;
};

// How the body of a signed request is protected (x-amz-content-sha256).
enum class S3Payload : uint8_t {
  kUnsigned,                // UNSIGNED-PAYLOAD (or presigned, or anonymous).
  kSha256,                  // The hex SHA-256 of the body: checked once it is here.
  kStreamingSigned,         // aws-chunked, each chunk signed.
  kStreamingSignedTrailer,  // ...and a signed trailer.
  kStreamingUnsignedTrailer,  // aws-chunked, unsigned, with a trailer (a checksum).
};

struct S3Auth {
  // The request's query, decoded, in order (what was signed).
  std::vector<std::pair<std::string, std::string>> query;
  const S3Principal* principal = nullptr;  // Null: unsigned (anonymous) request.
  S3Payload payload = S3Payload::kUnsigned;
  std::string payload_sha256;  // kSha256: lower-case hex.
  // What chunk and trailer signatures chain from (streaming signed payloads).
  std::array<uint8_t, 32> signing_key{};
  std::string amz_date;
  std::string scope;
  std::string seed_signature;
};

// Verifies the signature of `request` (header or presigned form) at `now_unix_s`. nullopt with
// *auth filled in when it is valid, or when the request is not signed at all (then
// auth->principal is null: whether that may go on is the caller's decision). Otherwise the
// S3 error to answer: InvalidArgument for a malformed query string, AccessDenied,
// InvalidAccessKeyId, SignatureDoesNotMatch,
// RequestTimeTooSkewed (more than 15 minutes off), AuthorizationQueryParametersError,
// XAmzContentSHA256Mismatch for an x-amz-content-sha256 that is none of the forms above.
std::optional<S3Error> VerifyS3Signature(const HttpRequest& request, const S3Keys& keys,
                                         int64_t now_unix_s, S3Auth* auth);

// The chunk signatures of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER) body, each of which
// signs its chunk and the signature before it.
class ChunkSignatures {
 public:
  explicit ChunkSignatures(const S3Auth& auth) : auth_(auth), previous_(auth.seed_signature) {}
  // Checks the next chunk's signature (64 hex digits) against its data (in pieces).
  bool Next(std::string_view signature, std::span<const std::span<std::byte>> data);
  // Checks the trailer's signature against its canonical text ("name:value\n" per trailer).
  bool Trailer(std::string_view signature, std::string_view canonical_trailers);

 private:
  bool Check(std::string_view signature, const std::string& string_to_sign);
  const S3Auth& auth_;
  std::string previous_;
};

// Percent-decodes `s` ('+' stays '+'); nullopt for a malformed escape.
std::optional<std::string> PercentDecode(std::string_view s);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_S3_AUTH_H_
