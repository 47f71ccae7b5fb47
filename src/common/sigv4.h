// AWS Signature Version 4 for S3 requests (the "Authorization" header form), with OpenSSL's
// HMAC-SHA256 and SHA-256. Verified against AWS's published test vectors (sigv4_test.cc).
//
// Thread safety: pure functions.

#ifndef KVTIER_COMMON_SIGV4_H_
#define KVTIER_COMMON_SIGV4_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier::s3 {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // Temporary credentials only; sent as x-amz-security-token.
};

struct SigV4Request {
  std::string method;         // "GET", "PUT", ...
  std::string canonical_uri;  // The request path, already URI-encoded ("/bucket/a%20b").
  // Query parameters, not encoded; any order (they are sorted when signing).
  std::vector<std::pair<std::string, std::string>> query;
  // Every header to sign (names any case), including host and x-amz-date. Values are trimmed
  // and inner runs of spaces collapsed, as the canonical form requires.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_sha256_hex;  // Or "UNSIGNED-PAYLOAD".
};

struct SigV4Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-date"
  std::string signature;       // 64 hex digits.
  std::string authorization;   // The Authorization header's value.
};

// RFC 3986 encoding as SigV4 wants it: unreserved characters (A-Z a-z 0-9 - . _ ~) as they
// are, everything else %XX (upper-case hex); '/' kept when !encode_slash.
std::string UriEncode(std::string_view s, bool encode_slash);

// The canonical query string: names and values encoded, sorted by name then value.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

// Lower-case hex SHA-256 of `data` followed by `more`.
std::string Sha256Hex(std::span<const std::byte> data, std::span<const std::byte> more = {});
std::string HexEncode(std::span<const uint8_t> data);

// "20150830T123600Z" for a time in microseconds since the Unix epoch.
std::string AmzDate(uint64_t unix_us);

// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request").
std::array<uint8_t, 32> SigningKey(std::string_view secret, std::string_view date,
                                   std::string_view region, std::string_view service);

// HMAC-SHA256 of `data` under `key`.
std::array<uint8_t, 32> HmacSha256(std::span<const uint8_t> key, std::string_view data);

// Signs `request` at `amz_date` (which must also be the x-amz-date header's value).
SigV4Signature SignV4(const SigV4Request& request, const Credentials& credentials,
                      std::string_view region, std::string_view service,
                      std::string_view amz_date);

}  // namespace kvtier::s3

#endif  // KVTIER_COMMON_SIGV4_H_
