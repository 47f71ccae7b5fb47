#include "src/common/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>

#include "src/common/sha256.h"

namespace kvtier::s3 {
namespace {

constexpr char kHexUpper[] = "0123456789ABCDEF";
constexpr char kHexLower[] = "0123456789abcdef";

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Trims and collapses runs of spaces into one.
std::string CanonicalValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::array<uint8_t, 32> HmacSha256(std::span<const uint8_t> key, std::string_view data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  return out;
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  std::string out;
  out.reserve(s.size() * 3);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                            c == '~';
    if (unreserved || (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHexUpper[c >> 4]);
      out.push_back(kHexUpper[c & 15]);
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(UriEncode(name, true), UriEncode(value, true));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out.push_back('&');
    out += name + "=" + value;
  }
  return out;
}

std::string HexEncode(std::span<const uint8_t> data) {
  std::string out;
  out.reserve(data.size() * 2);
  for (uint8_t b : data) {
    out.push_back(kHexLower[b >> 4]);
    out.push_back(kHexLower[b & 15]);
  }
  return out;
}

std::string Sha256Hex(std::span<const std::byte> data, std::span<const std::byte> more) {
  Sha256 sha;
  sha.Update(data.data(), data.size());
  sha.Update(more.data(), more.size());
  return HexEncode(sha.Final());
}

std::string AmzDate(uint64_t unix_us) {
  const time_t secs = static_cast<time_t>(unix_us / 1000000u);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::array<uint8_t, 32> SigningKey(std::string_view secret, std::string_view date,
                                   std::string_view region, std::string_view service) {
  const std::string k = "AWS4" + std::string(secret);
  const auto k_date =
      HmacSha256(std::span(reinterpret_cast<const uint8_t*>(k.data()), k.size()), date);
  const auto k_region = HmacSha256(k_date, region);
  const auto k_service = HmacSha256(k_region, service);
  return HmacSha256(k_service, "aws4_request");
}

SigV4Signature SignV4(const SigV4Request& request, const Credentials& credentials,
                      std::string_view region, std::string_view service,
                      std::string_view amz_date) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [name, value] : request.headers) {
    headers.emplace_back(Lower(name), CanonicalValue(value));
  }
  std::sort(headers.begin(), headers.end());
  SigV4Signature sig;
  std::string canonical_headers;
  for (size_t i = 0; i < headers.size(); ++i) {
    // Repeated names are joined with commas.
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      canonical_headers.pop_back();
      canonical_headers += "," + headers[i].second + "\n";
      continue;
    }
    canonical_headers += headers[i].first + ":" + headers[i].second + "\n";
    if (!sig.signed_headers.empty()) sig.signed_headers.push_back(';');
    sig.signed_headers += headers[i].first;
  }
  sig.canonical_request = request.method + "\n" + request.canonical_uri + "\n" +
                          CanonicalQuery(request.query) + "\n" + canonical_headers + "\n" +
                          sig.signed_headers + "\n" + request.payload_sha256_hex;
  const std::string date(amz_date.substr(0, 8));
  const std::string scope =
      date + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  sig.string_to_sign =
      "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope + "\n" +
      Sha256Hex(std::as_bytes(std::span(sig.canonical_request.data(),
                                        sig.canonical_request.size())));
  const auto key = SigningKey(credentials.secret_access_key, date, region, service);
  sig.signature = HexEncode(HmacSha256(key, sig.string_to_sign));
  sig.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                      ", SignedHeaders=" + sig.signed_headers + ", Signature=" + sig.signature;
  return sig;
}

}  // namespace kvtier::s3
