// S3's wire vocabulary for kvtierd's S3 endpoint (s3_protocol.h).

#include "src/server/s3_protocol.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "src/server/s3_checksum.h"

namespace kvtier::server {
namespace {

// The UTC time `unix_us` in strftime's `format`.
std::string UtcTime(uint64_t unix_us, const char* format) {
  const time_t secs = static_cast<time_t>(unix_us / 1000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

}  // namespace

std::string XmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string XmlUnescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    static constexpr std::pair<std::string_view, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool matched = false;
    for (const auto& [entity, c] : kEntities) {
      if (s.substr(i, entity.size()) == entity) {
        out.push_back(c);
        i += entity.size() - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out.push_back('&');
  }
  return out;
}

uint64_t UnixMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string HttpDate(uint64_t unix_us) { return UtcTime(unix_us, "%a, %d %b %Y %H:%M:%S GMT"); }

std::string IsoDate(uint64_t unix_us) {
  const std::string buf = UtcTime(unix_us, "%Y-%m-%dT%H:%M:%S");
  char out[80];
  std::snprintf(out, sizeof(out), "%s.%03uZ", buf.c_str(), static_cast<unsigned>((unix_us / 1000) % 1000));
  return out;
}

S3Error S3ErrorOf(const Status& s, std::string_view not_found_code) {
  switch (s.code()) {
    case StatusCode::kNotFound: return {404, std::string(not_found_code), std::string(s.message())};
    case StatusCode::kInvalidArgument: return {400, "InvalidArgument", std::string(s.message())};
    case StatusCode::kResourceExhausted: return {503, "SlowDown", std::string(s.message())};
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted: return {503, "ServiceUnavailable", std::string(s.message())};
    case StatusCode::kPermissionDenied:
    case StatusCode::kUnauthenticated: return {403, "AccessDenied", std::string(s.message())};
    case StatusCode::kFailedPrecondition: return {409, "OperationAborted", std::string(s.message())};
    default: return {500, "InternalError", std::string(s.message())};
  }
}

bool EtagListMatches(std::string_view list, std::string_view etag) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.substr(0, 2) == "W/") item.remove_prefix(2);
    if (item == "*" || item == etag) return true;
    if (item.size() + 2 == etag.size() && etag.substr(1, item.size()) == item) return true;
  }
  return false;
}

std::string S3ErrorXml(const S3Error& e, std::string_view resource) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + e.code + "</Code><Message>" +
         XmlEscape(e.message) + "</Message><Resource>" + XmlEscape(resource) +
         "</Resource></Error>";
}

std::optional<std::string> XmlElement(std::string_view xml, std::string_view name) {
  const std::string open = "<" + std::string(name) + ">";
  const std::string close = "</" + std::string(name) + ">";
  const size_t a = xml.find(open);
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = xml.find(close, a);
  if (b == std::string_view::npos) return std::nullopt;
  return XmlUnescape(xml.substr(a + open.size(), b - a - open.size()));
}

S3Reply StoredReply(const HttpRequest& request, const std::string& etag) {
  S3Reply reply(200, {{"ETag", etag}});
  for (const auto& [name, value] : request.headers) {
    if (ChecksumOfHeader(name)) reply.headers.emplace_back(name, value);
  }
  return reply;
}

std::optional<S3DeleteRequest> ParseDeleteXml(std::string_view xml) {
  S3DeleteRequest d;
  d.quiet = xml.find("<Quiet>true</Quiet>") != std::string_view::npos;
  for (size_t pos = 0;;) {
    const size_t open = xml.find("<Key>", pos);
    if (open == std::string_view::npos) break;
    const size_t close = xml.find("</Key>", open);
    if (close == std::string_view::npos) return std::nullopt;
    d.keys.push_back(XmlUnescape(xml.substr(open + 5, close - open - 5)));
    pos = close + 6;
  }
  return d;
}

std::optional<std::vector<std::pair<uint32_t, std::string>>> ParseCompleteUploadXml(
    std::string_view xml) {
  std::vector<std::pair<uint32_t, std::string>> wanted;
  for (size_t pos = 0;;) {
    const size_t open = xml.find("<Part>", pos);
    if (open == std::string_view::npos) break;
    const size_t close = xml.find("</Part>", open);
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view part = xml.substr(open, close - open);
    pos = close + 7;
    std::optional<std::string> number = XmlElement(part, "PartNumber");
    std::optional<std::string> etag = XmlElement(part, "ETag");
    if (!number || !etag || number->empty() || number->size() > 5 ||
        number->find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    wanted.emplace_back(static_cast<uint32_t>(std::stoul(*number)), *etag);
  }
  if (wanted.empty()) return std::nullopt;
  return wanted;
}

std::optional<S3Path> SplitS3Path(std::string_view path) {
  std::optional<std::string> decoded = PercentDecode(path);
  if (!decoded || decoded->empty() || (*decoded)[0] != '/') return std::nullopt;
  const size_t slash = decoded->find('/', 1);
  if (slash == std::string::npos) return S3Path{decoded->substr(1), ""};
  return S3Path{decoded->substr(1, slash - 1), decoded->substr(slash + 1)};
}

std::optional<std::pair<uint64_t, uint64_t>> ParseS3Range(std::string_view range,
                                                          uint64_t size) {
  auto whole = std::make_optional(std::pair<uint64_t, uint64_t>{0, size});
  if (range.substr(0, 6) != "bytes=" || range.find(',') != std::string_view::npos) return whole;
  range.remove_prefix(6);
  const size_t dash = range.find('-');
  if (dash == std::string_view::npos) return whole;
  auto number = [](std::string_view s) -> std::optional<uint64_t> {
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    return std::stoull(std::string(s));
  };
  const std::optional<uint64_t> first = number(range.substr(0, dash));
  const std::optional<uint64_t> last = number(range.substr(dash + 1));
  if (!first && !last) return whole;
  if (!first) {  // The last n bytes.
    if (*last == 0) return std::nullopt;
    const uint64_t n = std::min(*last, size);
    return std::pair{size - n, n};
  }
  if (*first >= size) return std::nullopt;
  if (last && *last < *first) return whole;
  const uint64_t end = last ? std::min(*last, size - 1) : size - 1;
  return std::pair{*first, end - *first + 1};
}

S3Reply S3ErrorReply(const S3Error& e, std::string_view resource) {
  return {e.status, {{"Content-Type", "application/xml"}}, S3ErrorXml(e, resource)};
}

S3Error S3UploadError(const Status& s) {
  if (s.code() == StatusCode::kNotFound) {
    return {404, "NoSuchUpload", "The specified multipart upload does not exist. The upload ID "
                                 "may be invalid, or the upload may have been aborted or completed."};
  }
  if (s.code() == StatusCode::kFailedPrecondition) return {409, "OperationAborted", std::string(s.message())};
  return S3ErrorOf(s);
}

std::optional<uint32_t> ParsePartNumber(std::string_view text) {
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  const uint32_t number = static_cast<uint32_t>(std::stoul(std::string(text)));
  if (number < 1 || number > kMaxParts) return std::nullopt;
  return number;
}

std::optional<std::string> QueryValue(const S3Auth& auth, std::string_view name) {
  for (const auto& [n, v] : auth.query) {
    if (n == name) return v;
  }
  return std::nullopt;
}

std::string ListAllMyBucketsXml(std::string_view owner,
                                const std::vector<S3Service::Bucket>& buckets) {
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListAllMyBucketsResult "
      "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>" +
      XmlEscape(owner) + "</ID><DisplayName>" + XmlEscape(owner) + "</DisplayName></Owner><Buckets>";
  for (const S3Service::Bucket& b : buckets) {
    xml += "<Bucket><Name>" + XmlEscape(b.name) + "</Name><CreationDate>" + IsoDate(b.created_us) +
           "</CreationDate></Bucket>";
  }
  return xml + "</Buckets></ListAllMyBucketsResult>";
}

std::string ListBucketResultXml(const S3Listing& l) {
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
      "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>" + XmlEscape(l.bucket) +
      "</Name><Prefix>" + XmlEscape(l.prefix) + "</Prefix><KeyCount>" +
      std::to_string(l.objects.size() + l.prefixes.size()) + "</KeyCount><MaxKeys>" +
      std::to_string(l.max) + "</MaxKeys>";
  if (!l.delimiter.empty()) xml += "<Delimiter>" + XmlEscape(l.delimiter) + "</Delimiter>";
  xml += std::string("<IsTruncated>") + (l.truncated ? "true" : "false") + "</IsTruncated>";
  if (!l.token.empty()) xml += "<ContinuationToken>" + XmlEscape(l.token) + "</ContinuationToken>";
  if (l.truncated) xml += "<NextContinuationToken>" + XmlEscape(l.last) + "</NextContinuationToken>";
  if (!l.start_after.empty()) xml += "<StartAfter>" + XmlEscape(l.start_after) + "</StartAfter>";
  for (const auto& [name, h] : l.objects) {
    xml += "<Contents><Key>" + XmlEscape(name) + "</Key><LastModified>" + IsoDate(h.modified_us) +
           "</LastModified><ETag>" + XmlEscape(h.ETag()) + "</ETag><Size>" +
           std::to_string(h.size) + "</Size><StorageClass>STANDARD</StorageClass></Contents>";
  }
  for (const std::string& p : l.prefixes) {
    xml += "<CommonPrefixes><Prefix>" + XmlEscape(p) + "</Prefix></CommonPrefixes>";
  }
  return xml + "</ListBucketResult>";
}

}  // namespace kvtier::server
