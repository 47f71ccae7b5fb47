#include "src/server/s3_auth.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/common/sigv4.h"
#include "src/server/s3_checksum.h"

namespace kvtier::server {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr int64_t kMaxSkewSeconds = 15 * 60;
constexpr int64_t kMaxPresignedSeconds = 7 * 24 * 3600;
constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

S3Error Denied(std::string code, std::string message, int status = 403) {
  return S3Error{status, std::move(code), std::move(message)};
}

// "20150830T123600Z" -> seconds since the epoch; nullopt when malformed.
std::optional<int64_t> ParseAmzDate(std::string_view s) {
  if (s.size() != 16 || s[8] != 'T' || s[15] != 'Z') return std::nullopt;
  for (size_t i : {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14}) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
  }
  auto num = [&](size_t at, size_t n) {
    int v = 0;
    for (size_t i = at; i < at + n; ++i) v = v * 10 + (s[i] - '0');
    return v;
  };
  struct tm tm {};
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(4, 2) - 1;
  tm.tm_mday = num(6, 2);
  tm.tm_hour = num(9, 2);
  tm.tm_min = num(11, 2);
  tm.tm_sec = num(13, 2);
  if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
      tm.tm_sec > 60) {
    return std::nullopt;
  }
  return static_cast<int64_t>(timegm(&tm));
}

// The query's pairs, decoded, in order.
std::optional<std::vector<std::pair<std::string, std::string>>> QueryPairs(std::string_view q) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!q.empty()) {
    const size_t amp = q.find('&');
    const std::string_view pair = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::optional<std::string> name = PercentDecode(pair.substr(0, eq));
    std::optional<std::string> value =
        PercentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (!name || !value) return std::nullopt;
    out.emplace_back(std::move(*name), std::move(*value));
  }
  return out;
}

struct Signed {
  std::string access_key;
  std::string date;  // The credential scope's date, YYYYMMDD.
  std::string region;
  std::string service;
  std::string signed_headers;  // "host;x-amz-date"
  std::string signature;
};

// "AKID/20150830/us-east-1/s3/aws4_request"
bool ParseCredential(std::string_view credential, Signed* out) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t slash = credential.find('/');
    parts.push_back(credential.substr(0, slash));
    if (slash == std::string_view::npos) break;
    credential.remove_prefix(slash + 1);
  }
  if (parts.size() != 5 || parts[4] != "aws4_request" || parts[0].empty()) return false;
  out->access_key = parts[0];
  out->date = parts[1];
  out->region = parts[2];
  out->service = parts[3];
  return true;
}

// "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..."
bool ParseAuthorization(std::string_view header, Signed* out) {
  if (header.substr(0, kAlgorithm.size()) != kAlgorithm) return false;
  header.remove_prefix(kAlgorithm.size());
  bool credential = false;
  while (!header.empty()) {
    const size_t comma = header.find(',');
    const std::string_view item = TrimBlanks(header.substr(0, comma));
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view name = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (name == "Credential") {
      credential = ParseCredential(value, out);
      if (!credential) return false;
    } else if (name == "SignedHeaders") {
      out->signed_headers = value;
    } else if (name == "Signature") {
      out->signature = value;
    }
  }
  return credential && !out->signed_headers.empty() && !out->signature.empty();
}

bool SameSignature(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

void S3Keys::Add(S3Principal principal) {
  std::string key = principal.access_key;
  keys_.emplace(std::move(key), std::move(principal));
}

const S3Principal* S3Keys::Find(std::string_view access_key) const {
  auto it = keys_.find(std::string(access_key));
  return it == keys_.end() ? nullptr : &it->second;
}

std::optional<std::string> PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex(s[i + 1]);
    const int lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

std::optional<S3Error> VerifyS3Signature(const HttpRequest& request, const S3Keys& keys,
                                         int64_t now_unix_s, S3Auth* auth) {
  *auth = S3Auth{};
  std::optional<std::vector<std::pair<std::string, std::string>>> decoded = QueryPairs(request.query);
  if (!decoded) return Denied("InvalidArgument", "malformed query string", 400);
  auth->query = std::move(*decoded);
  const std::vector<std::pair<std::string, std::string>>* query = &auth->query;
  auto query_value = [&](std::string_view name) -> const std::string* {
    for (const auto& [n, v] : *query) {
      if (n == name) return &v;
    }
    return nullptr;
  };

  Signed sig;
  std::string amz_date;
  const std::string* authorization = request.Header("authorization");
  const bool presigned = query_value("X-Amz-Signature") != nullptr;
  if (authorization != nullptr) {
    if (!ParseAuthorization(*authorization, &sig)) {
      return Denied("AccessDenied", "malformed Authorization header (AWS4-HMAC-SHA256 only)", 400);
    }
    const std::string* date = request.Header("x-amz-date");
    if (date == nullptr) date = request.Header("date");
    if (date == nullptr) return Denied("AccessDenied", "the request has no x-amz-date");
    amz_date = *date;
  } else if (presigned) {
    const std::string* algorithm = query_value("X-Amz-Algorithm");
    const std::string* credential = query_value("X-Amz-Credential");
    const std::string* date = query_value("X-Amz-Date");
    const std::string* signed_headers = query_value("X-Amz-SignedHeaders");
    if (algorithm == nullptr || *algorithm != kAlgorithm || credential == nullptr ||
        date == nullptr || signed_headers == nullptr || !ParseCredential(*credential, &sig)) {
      return Denied("AuthorizationQueryParametersError",
                    "a presigned URL needs X-Amz-Algorithm=AWS4-HMAC-SHA256, X-Amz-Credential, "
                    "X-Amz-Date, X-Amz-SignedHeaders and X-Amz-Signature", 400);
    }
    sig.signed_headers = *signed_headers;
    sig.signature = *query_value("X-Amz-Signature");
    amz_date = *date;
  } else {
    return std::nullopt;  // Unsigned.
  }

  const S3Principal* principal = keys.Find(sig.access_key);
  if (principal == nullptr) {
    return Denied("InvalidAccessKeyId", "the access key id is not one of this endpoint's");
  }
  const std::optional<int64_t> when = ParseAmzDate(amz_date);
  if (!when || amz_date.compare(0, 8, sig.date) != 0) {
    return Denied("AccessDenied", "x-amz-date '" + amz_date + "' is malformed or not the "
                                  "credential scope's date");
  }
  if (presigned) {
    const std::string* expires = query_value("X-Amz-Expires");
    int64_t seconds = -1;
    if (expires != nullptr && !expires->empty() && expires->size() < 9 &&
        expires->find_first_not_of("0123456789") == std::string::npos) {
      seconds = std::stoll(*expires);
    }
    if (seconds < 1 || seconds > kMaxPresignedSeconds) {
      return Denied("AuthorizationQueryParametersError",
                    "X-Amz-Expires must be between 1 and 604800 seconds", 400);
    }
    if (now_unix_s > *when + seconds) return Denied("AccessDenied", "Request has expired");
    if (*when - now_unix_s > kMaxSkewSeconds) {
      return Denied("RequestTimeTooSkewed", "X-Amz-Date is in the future");
    }
  } else if (*when - now_unix_s > kMaxSkewSeconds || now_unix_s - *when > kMaxSkewSeconds) {
    return Denied("RequestTimeTooSkewed",
                  "The difference between the request time and the server's time is too large.");
  }

  // The payload's form.
  std::string payload = "UNSIGNED-PAYLOAD";
  if (const std::string* sha = request.Header("x-amz-content-sha256"); sha != nullptr) {
    payload = *sha;
  } else if (!presigned) {
    return Denied("InvalidRequest", "missing required header x-amz-content-sha256", 400);
  }
  if (payload == "UNSIGNED-PAYLOAD") {
    auth->payload = S3Payload::kUnsigned;
  } else if (payload == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD") {
    auth->payload = S3Payload::kStreamingSigned;
  } else if (payload == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER") {
    auth->payload = S3Payload::kStreamingSignedTrailer;
  } else if (payload == "STREAMING-UNSIGNED-PAYLOAD-TRAILER") {
    auth->payload = S3Payload::kStreamingUnsignedTrailer;
  } else if (payload.size() == 64 && payload.find_first_not_of("0123456789abcdef") == std::string::npos) {
    auth->payload = S3Payload::kSha256;
    auth->payload_sha256 = payload;
  } else {
    return Denied("XAmzContentSHA256Mismatch", "x-amz-content-sha256 is not a SHA-256 or a "
                  "payload mode S3 defines", 400);
  }

  // The canonical request, rebuilt from what was received.
  s3::SigV4Request canonical;
  canonical.method = request.method;
  std::optional<std::string> path = PercentDecode(request.path);
  if (!path) return Denied("InvalidURI", "malformed path", 400);
  canonical.canonical_uri = s3::UriEncode(*path, /*encode_slash=*/false);
  for (const auto& [name, value] : *query) {
    if (!(presigned && name == "X-Amz-Signature")) canonical.query.emplace_back(name, value);
  }
  std::string_view names = sig.signed_headers;
  bool host_signed = false;
  while (!names.empty()) {
    const size_t semi = names.find(';');
    const std::string name(names.substr(0, semi));
    names = semi == std::string_view::npos ? std::string_view() : names.substr(semi + 1);
    host_signed = host_signed || name == "host";
    bool found = false;
    for (const auto& [n, v] : request.headers) {
      if (n == name) {
        canonical.headers.emplace_back(n, v);
        found = true;
      }
    }
    if (!found) return Denied("AccessDenied", "signed header '" + name + "' is not in the request");
  }
  if (!host_signed) return Denied("AccessDenied", "the host header must be signed");
  canonical.payload_sha256_hex = payload;
  const s3::Credentials credentials{principal->access_key, principal->secret, ""};
  const s3::SigV4Signature expected =
      s3::SignV4(canonical, credentials, sig.region, sig.service, amz_date);
  if (!SameSignature(expected.signature, sig.signature)) {
    return Denied("SignatureDoesNotMatch",
                  "The request signature we calculated does not match the signature you "
                  "provided. Check your key and signing method.");
  }
  auth->principal = principal;
  auth->amz_date = amz_date;
  auth->scope = sig.date + "/" + sig.region + "/" + sig.service + "/aws4_request";
  auth->signing_key = s3::SigningKey(principal->secret, sig.date, sig.region, sig.service);
  auth->seed_signature = sig.signature;
  return std::nullopt;
}

bool ChunkSignatures::Check(std::string_view signature, const std::string& string_to_sign) {
  const std::string expected = s3::HexEncode(s3::HmacSha256(auth_.signing_key, string_to_sign));
  if (!SameSignature(expected, signature)) return false;
  previous_ = expected;
  return true;
}

bool ChunkSignatures::Next(std::string_view signature,
                           std::span<const std::span<std::byte>> data) {
  S3Checksum sha(S3ChecksumAlgorithm::kSha256);
  for (std::span<const std::byte> piece : data) sha.Update(piece);
  return Check(signature, "AWS4-HMAC-SHA256-PAYLOAD\n" + auth_.amz_date + "\n" + auth_.scope +
                              "\n" + previous_ + "\n" + std::string(kEmptySha256) + "\n" +
                              s3::HexEncode(sha.Finish()));
}

bool ChunkSignatures::Trailer(std::string_view signature, std::string_view canonical_trailers) {
  return Check(signature, "AWS4-HMAC-SHA256-TRAILER\n" + auth_.amz_date + "\n" + auth_.scope +
                              "\n" + previous_ + "\n" +
                              s3::Sha256Hex(std::as_bytes(std::span(canonical_trailers.data(),
                                                                    canonical_trailers.size()))));
}

}  // namespace kvtier::server
