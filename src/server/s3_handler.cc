// kvtierd's S3 endpoint (docs/protocol.md, "S3"): path-style requests parsed by
// HttpRequestParser, authenticated (s3_auth.h) before a body is received, answered from the
// Store in S3's XML and headers. A front end only: objects are Store values (s3_service.h).

#include <strings.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "src/common/sigv4.h"
#include "src/server/handler.h"
#include "src/server/http_request.h"
#include "src/server/s3_auth.h"
#include "src/server/s3_checksum.h"
#include "src/server/s3_service.h"

namespace kvtier::server {
namespace {

using Action = ProtocolHandler::Outcome::Action;

// Room for the aws-chunked framing of a body on top of the object's bytes.
constexpr uint64_t kChunkFramingBytes = 1 << 20;
constexpr size_t kMaxContentTypeBytes = 255;
// S3's multipart rules: part numbers 1 to 10000, every part but the last at least 5 MiB.
constexpr uint32_t kMaxParts = 10000;
constexpr uint64_t kMinPartBytes = 5 << 20;

std::string_view Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Payload Too Large";
    case 416: return "Requested Range Not Satisfiable";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

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

uint64_t NowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The UTC time `unix_us` in strftime's `format`.
std::string UtcTime(uint64_t unix_us, const char* format) {
  const time_t secs = static_cast<time_t>(unix_us / 1000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

// "Wed, 21 Oct 2015 07:28:00 GMT"
std::string HttpDate(uint64_t unix_us) { return UtcTime(unix_us, "%a, %d %b %Y %H:%M:%S GMT"); }

// "2015-10-21T07:28:00.000Z"
std::string IsoDate(uint64_t unix_us) {
  const std::string buf = UtcTime(unix_us, "%Y-%m-%dT%H:%M:%S");
  char out[80];
  std::snprintf(out, sizeof(out), "%s.%03uZ", buf.c_str(), static_cast<unsigned>((unix_us / 1000) % 1000));
  return out;
}

// One table from Store statuses to S3 errors.
S3Error ErrorOf(const Status& s, std::string_view not_found_code = "NoSuchKey") {
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

struct Reply {
  Reply(int status_code = 200, std::vector<std::pair<std::string, std::string>> header_list = {},
        std::string text = "")
      : status(status_code), headers(std::move(header_list)), body(std::move(text)) {}
  // A reply to HEAD: headers only, Content-Length `length`.
  static Reply Head(int status_code, std::vector<std::pair<std::string, std::string>> header_list,
                    uint64_t length) {
    Reply r(status_code, std::move(header_list));
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

// Whether an If-Match / If-None-Match list ("\"etag\", \"etag2\"" or "*") names `etag`.
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

class S3Handler final : public ProtocolHandler {
 public:
  S3Handler(const ServerContext* ctx, PeerInfo peer)
      : ctx_(ctx),
        peer_(std::move(peer)),
        parser_({.max_head_bytes = 16 << 10,
                 .max_headers = 100,
                 .max_body_bytes = ctx->config->EffectiveMaxObjectBytes() + kChunkFramingBytes}) {}

  Proto proto() const override { return Proto::kS3; }

  void OnIdleTimeout(OutputQueue* out) override {
    Send(Reply(408, {}, ErrorXml({400, "RequestTimeout", "Your socket connection to the server was "
                                                    "not read from or written to within the "
                                                    "timeout period."}, "")),
         /*close=*/true, out);
  }

  Outcome HandleOne(std::span<std::byte> input, OutputQueue* out) override {
    const HttpRequestParser::State state = parser_.Parse(input);
    if (state == HttpRequestParser::State::kError) {
      ctx_->metrics->ProtocolError(Proto::kS3);
      const int status = parser_.error_status();
      const char* code = status == 413   ? "EntityTooLarge"
                         : status == 431 ? "RequestHeaderSectionTooLarge"
                                         : "BadRequest";
      return Fail({status == 413 ? 400 : status, code, parser_.error()}, out);
    }
    if (state == HttpRequestParser::State::kHead) return {Action::kNeedMore, 0, 0};
    if (!head_checked_) {
      head_checked_ = true;
      if (std::optional<S3Error> e = CheckHead(); e) return Fail(*e, out);
      const std::string* expect = parser_.request().Header("expect");
      if (state == HttpRequestParser::State::kBody && expect != nullptr &&
          strcasecmp(expect->c_str(), "100-continue") == 0) {
        out->Append("HTTP/1.1 100 Continue\r\n\r\n");
      }
    }
    if (state == HttpRequestParser::State::kBody) {
      const HttpRequest& r = parser_.request();
      size_t needed = 0;
      if (r.content_length && !r.chunked) needed = parser_.consumed() + (*r.content_length - r.body_bytes);
      return {Action::kNeedMore, 0, needed};
    }
    RequestTimer timer(ctx_->metrics, Proto::kS3, Op::kOther);
    for (const auto& [tenant, key] : ctx_->s3->ExpiredLocks(NowMicros())) {
      (void)ctx_->store->Unpin(tenant, key);  // Gone already (deleted, expired): nothing to do.
    }
    Reply reply = Handle(input, &timer);
    const bool close = !parser_.request().keep_alive;
    const size_t consumed = parser_.consumed();
    Send(std::move(reply), close, out);
    parser_.Reset();
    head_checked_ = false;
    auth_ = S3Auth{};
    principal_ = nullptr;
    return {close ? Action::kClose : Action::kHandled, consumed, 0};
  }

 private:
  // The value of `name` in the request's query, decoded; nullopt when absent.
  std::optional<std::string> QueryValue(std::string_view name) const {
    for (const auto& [n, v] : auth_.query) {
      if (n == name) return v;
    }
    return std::nullopt;
  }

  // Authenticates the request from its head, before its body is accepted.
  std::optional<S3Error> CheckHead() {
    const HttpRequest& r = parser_.request();
    if (Status admit = ctx_->auth_guard->Admit(peer_, Proto::kS3); !admit.ok()) {
      ctx_->metrics->AuthRefused(Proto::kS3);
      return S3Error{503, "SlowDown", std::string(admit.message())};
    }
    const int64_t now = static_cast<int64_t>(NowMicros() / 1000000);
    if (std::optional<S3Error> e = VerifyS3Signature(r, ctx_->s3->keys(), now, &auth_); e) {
      if (e->status == 403) {
        ctx_->metrics->AuthFailure(Proto::kS3);
        ctx_->auth_guard->Failed(peer_, Proto::kS3, "");
      }
      return e;
    }
    principal_ = auth_.principal;
    if (principal_ == nullptr) {
      if (ctx_->s3->anonymous() == nullptr || !peer_.local) {
        return S3Error{403, "AccessDenied", "Anonymous access is not allowed here: sign the "
                                            "request with a tenant's s3_access_key"};
      }
      principal_ = ctx_->s3->anonymous();
    } else {
      ctx_->auth_guard->Succeeded(peer_);
    }
    if (r.method == "PUT" && !r.content_length && !r.chunked) {
      return S3Error{411, "MissingContentLength", "You must provide the Content-Length HTTP header."};
    }
    return std::nullopt;
  }

  Outcome Fail(const S3Error& e, OutputQueue* out) {
    Send(Reply(e.status, {}, ErrorXml(e, parser_.request().path)), /*close=*/true, out);
    return {Action::kClose, 0, 0};
  }

  static std::string ErrorXml(const S3Error& e, std::string_view resource) {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + e.code + "</Code><Message>" +
           XmlEscape(e.message) + "</Message><Resource>" + XmlEscape(resource) +
           "</Resource></Error>";
  }

  static Reply ErrorReply(const S3Error& e, std::string_view resource) {
    Reply r;
    r.status = e.status;
    r.headers.emplace_back("Content-Type", "application/xml");
    r.body = ErrorXml(e, resource);
    return r;
  }

  void Send(Reply reply, bool close, OutputQueue* out) {
    std::string head = "HTTP/1.1 " + std::to_string(reply.status) + " " +
                       std::string(Reason(reply.status)) + "\r\nServer: kvtierd\r\nDate: " +
                       HttpDate(NowMicros()) + "\r\nx-amz-request-id: " + RequestId() + "\r\n";
    for (const auto& [name, value] : reply.headers) head += name + ": " + value + "\r\n";
    const uint64_t length = reply.head_length ? *reply.head_length
                            : reply.lease.valid() ? reply.lease_length
                                                  : reply.body.size();
    if (reply.status != 204 && reply.status != 304) head += "Content-Length: " + std::to_string(length) + "\r\n";
    if (close) head += "Connection: close\r\n";
    head += "\r\n";
    out->Append(head);
    if (reply.head_length) return;
    if (reply.lease.valid()) {
      out->AppendLease(std::move(reply.lease), reply.lease_offset, reply.lease_length);
    } else {
      out->Append(reply.body);
    }
  }

  std::string RequestId() {
    char buf[24];
    std::snprintf(buf, sizeof(buf), "%016llX", static_cast<unsigned long long>(++requests_));
    return buf;
  }

  Reply Handle(std::span<std::byte> input, RequestTimer* timer) {
    const HttpRequest& r = parser_.request();
    std::optional<std::string> path = PercentDecode(r.path);
    if (!path || path->empty() || (*path)[0] != '/') {
      return ErrorReply({400, "InvalidURI", "Couldn't parse the specified URI."}, r.path);
    }
    const size_t slash = path->find('/', 1);
    const std::string bucket = path->substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
    const std::string key = slash == std::string::npos ? "" : path->substr(slash + 1);
    const TenantId tenant = principal_->tenant;
    if (bucket.empty()) {
      if (r.method == "GET") return ListBuckets(tenant);
      return NotImplemented(r);
    }
    if (!ValidBucketName(bucket)) {
      return ErrorReply({400, "InvalidBucketName", "The specified bucket is not valid."}, *path);
    }
    if (key.empty()) return BucketOp(input, tenant, bucket, timer);
    if (key.size() > 1024) {
      return ErrorReply({400, "KeyTooLongError", "Your key is too long."}, *path);
    }
    if (!ctx_->s3->HasBucket(tenant, bucket)) {
      return ErrorReply({404, "NoSuchBucket", "The specified bucket does not exist"}, *path);
    }
    if (!r.query.empty() && (QueryValue("tagging") || QueryValue("acl") ||
                             QueryValue("attributes") || QueryValue("retention"))) {
      return NotImplemented(r);
    }
    if (QueryValue("uploads")) {
      if (r.method != "POST") return NotImplemented(r);
      timer->set_op(Op::kPut);
      return StartUpload(tenant, bucket, key);
    }
    if (std::optional<std::string> upload = QueryValue("uploadId")) {
      timer->set_op(Op::kPut);
      if (r.method == "PUT") return UploadPart(input, tenant, bucket, key, *upload);
      if (r.method == "POST") return CompleteUpload(input, tenant, bucket, key, *upload);
      if (r.method == "DELETE") {
        Status s = ctx_->s3->EndUpload(tenant, *upload, bucket, key);
        if (!s.ok()) return ErrorReply(UploadError(s), *path);
        return Reply(204);
      }
      if (r.method == "GET") return ListParts(tenant, bucket, key, *upload);
      return NotImplemented(r);
    }
    if (r.method == "PUT") {
      timer->set_op(Op::kPut);
      if (r.Header("x-amz-copy-source") != nullptr) return NotImplemented(r);
      return PutObject(input, tenant, bucket, key);
    }
    if (r.method == "GET" || r.method == "HEAD") {
      timer->set_op(Op::kGet);
      return GetObject(tenant, bucket, key, r.method == "HEAD");
    }
    if (r.method == "DELETE") {
      timer->set_op(Op::kDelete);
      return DeleteObject(tenant, bucket, key);
    }
    return NotImplemented(r);
  }

  static Reply NotImplemented(const HttpRequest& r) {
    return ErrorReply({501, "NotImplemented", "A header or query you provided implies "
                                              "functionality that is not implemented (" +
                                                  r.method + " " + r.target + ")"},
                      r.path);
  }

  Reply ListBuckets(TenantId tenant) {
    std::string xml =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListAllMyBucketsResult "
        "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>" +
        XmlEscape(principal_->tenant_name) + "</ID><DisplayName>" + XmlEscape(principal_->tenant_name) +
        "</DisplayName></Owner><Buckets>";
    for (const S3Service::Bucket& b : ctx_->s3->ListBuckets(tenant)) {
      xml += "<Bucket><Name>" + XmlEscape(b.name) + "</Name><CreationDate>" + IsoDate(b.created_us) +
             "</CreationDate></Bucket>";
    }
    xml += "</Buckets></ListAllMyBucketsResult>";
    return {200, {{"Content-Type", "application/xml"}}, std::move(xml)};
  }

  Reply BucketOp(std::span<std::byte> input, TenantId tenant, const std::string& bucket,
                 RequestTimer* timer) {
    const HttpRequest& r = parser_.request();
    const std::string resource = "/" + bucket;
    if (r.method == "PUT" && r.query.empty()) {
      timer->set_op(Op::kAdmin);
      if (Status s = ctx_->s3->CreateBucket(tenant, bucket, NowMicros()); !s.ok()) {
        return ErrorReply(ErrorOf(s), resource);
      }
      return {200, {{"Location", resource}}, ""};
    }
    const bool exists = ctx_->s3->HasBucket(tenant, bucket);
    const S3Error no_such{404, "NoSuchBucket", "The specified bucket does not exist"};
    if (r.method == "HEAD" && r.query.empty()) {
      if (!exists) return Reply::Head(404, {}, 0);
      return Reply::Head(200, {{"x-amz-bucket-region", ctx_->config->s3.region}}, 0);
    }
    if (r.method == "DELETE" && r.query.empty()) {
      timer->set_op(Op::kAdmin);
      Status s = ctx_->s3->DeleteBucket(tenant, bucket);
      if (s.code() == StatusCode::kNotFound) return ErrorReply(no_such, resource);
      if (s.code() == StatusCode::kFailedPrecondition) {
        return ErrorReply({409, "BucketNotEmpty", "The bucket you tried to delete is not empty"}, resource);
      }
      if (!s.ok()) return ErrorReply(ErrorOf(s), resource);
      return {204, {}, ""};
    }
    if (!exists) return ErrorReply(no_such, resource);
    if (r.method == "GET" && QueryValue("location")) {
      return {200, {{"Content-Type", "application/xml"}},
              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<LocationConstraint "
              "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" +
                  (ctx_->config->s3.region == "us-east-1" ? "" : XmlEscape(ctx_->config->s3.region)) +
                  "</LocationConstraint>"};
    }
    if (r.method == "GET" && QueryValue("list-type") == "2") {
      timer->set_op(Op::kStats);
      return ListObjects(tenant, bucket);
    }
    if (r.method == "POST" && QueryValue("delete")) {
      timer->set_op(Op::kDelete);
      return DeleteObjects(input, tenant, bucket);
    }
    return NotImplemented(r);
  }

  Reply ListObjects(TenantId tenant, const std::string& bucket) {
    const std::string prefix = QueryValue("prefix").value_or("");
    const std::string delimiter = QueryValue("delimiter").value_or("");
    const std::string token = QueryValue("continuation-token").value_or("");
    const std::string start_after = QueryValue("start-after").value_or("");
    size_t max = ctx_->config->s3.max_list_keys;
    if (std::optional<std::string> m = QueryValue("max-keys"); m && !m->empty()) {
      if (m->size() > 9 || m->find_first_not_of("0123456789") != std::string::npos) {
        return ErrorReply({400, "InvalidArgument", "max-keys must be a non-negative integer"}, "/" + bucket);
      }
      max = std::min<size_t>(max, std::stoul(*m));
    }
    // The continuation token is the last name returned; the names are listed in order.
    std::string after = !token.empty() ? token : start_after;
    std::vector<std::string> keys_xml;
    std::vector<std::string> prefixes;
    std::string last;
    bool truncated = false;
    std::vector<BlockKey> probe;
    while (keys_xml.size() + prefixes.size() < max) {
      const size_t want = max - keys_xml.size() - prefixes.size();
      auto names = ctx_->s3->ListNames(tenant, bucket, prefix, after, want + 1);
      if (names.empty()) break;
      // Names whose objects were evicted or expired are forgotten as they are met.
      probe.clear();
      for (const auto& [name, header] : names) probe.push_back(S3ObjectKey(bucket, name));
      for (size_t i = 0; i < names.size(); ++i) {
        after = names[i].first;
        Result<PrefixMatch> m = ctx_->store->LookupPrefix(tenant, std::span(&probe[i], 1));
        if (!m.ok() || m->num_blocks == 0) {
          ctx_->s3->NameRemoved(tenant, bucket, names[i].first);
          continue;
        }
        if (keys_xml.size() + prefixes.size() == max) {
          truncated = true;
          break;
        }
        const std::string& name = names[i].first;
        if (!delimiter.empty()) {
          const size_t d = name.find(delimiter, prefix.size());
          if (d != std::string::npos) {
            std::string common = name.substr(0, d + delimiter.size());
            if (prefixes.empty() || prefixes.back() != common) prefixes.push_back(common);
            last = name;
            continue;
          }
        }
        const S3ObjectHeader& h = names[i].second;
        keys_xml.push_back("<Contents><Key>" + XmlEscape(name) + "</Key><LastModified>" +
                           IsoDate(h.modified_us) + "</LastModified><ETag>" + XmlEscape(h.ETag()) +
                           "</ETag><Size>" + std::to_string(h.size) +
                           "</Size><StorageClass>STANDARD</StorageClass></Contents>");
        last = name;
      }
      if (truncated || names.size() < want + 1) break;
    }
    std::string xml =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
        "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>" + XmlEscape(bucket) +
        "</Name><Prefix>" + XmlEscape(prefix) + "</Prefix><KeyCount>" +
        std::to_string(keys_xml.size() + prefixes.size()) + "</KeyCount><MaxKeys>" +
        std::to_string(max) + "</MaxKeys>";
    if (!delimiter.empty()) xml += "<Delimiter>" + XmlEscape(delimiter) + "</Delimiter>";
    xml += std::string("<IsTruncated>") + (truncated ? "true" : "false") + "</IsTruncated>";
    if (!token.empty()) xml += "<ContinuationToken>" + XmlEscape(token) + "</ContinuationToken>";
    if (truncated) xml += "<NextContinuationToken>" + XmlEscape(last) + "</NextContinuationToken>";
    if (!start_after.empty()) xml += "<StartAfter>" + XmlEscape(start_after) + "</StartAfter>";
    for (const std::string& k : keys_xml) xml += k;
    for (const std::string& p : prefixes) {
      xml += "<CommonPrefixes><Prefix>" + XmlEscape(p) + "</Prefix></CommonPrefixes>";
    }
    xml += "</ListBucketResult>";
    return {200, {{"Content-Type", "application/xml"}}, std::move(xml)};
  }

  // The request body, decoded (aws-chunked) and checked against every checksum the client
  // sent; nullopt with *error set otherwise.
  std::optional<std::span<std::byte>> CheckedBody(std::span<std::byte> input, S3Error* error) {
    const HttpRequest& r = parser_.request();
    std::span<std::byte> body = parser_.Body(input);
    std::vector<std::pair<std::string, std::string>> trailers;
    const std::string* encoding = r.Header("content-encoding");
    const bool streaming = auth_.payload == S3Payload::kStreamingSigned ||
                           auth_.payload == S3Payload::kStreamingSignedTrailer ||
                           auth_.payload == S3Payload::kStreamingUnsignedTrailer;
    if (streaming || (encoding != nullptr && encoding->find("aws-chunked") != std::string::npos)) {
      std::optional<ChunkSignatures> signatures;
      if (auth_.payload == S3Payload::kStreamingSigned ||
          auth_.payload == S3Payload::kStreamingSignedTrailer) {
        signatures.emplace(auth_);
      }
      AwsChunkedBody decoded;
      if (std::optional<S3Error> e = DecodeAwsChunked(
              body, signatures ? &*signatures : nullptr,
              auth_.payload == S3Payload::kStreamingSignedTrailer, &decoded)) {
        *error = *e;
        return std::nullopt;
      }
      body = decoded.data;
      trailers = std::move(decoded.trailers);
      if (const std::string* n = r.Header("x-amz-decoded-content-length");
          n != nullptr && *n != std::to_string(body.size())) {
        *error = {400, "IncompleteBody", "x-amz-decoded-content-length is " + *n + ", the body " +
                                             std::to_string(body.size()) + " bytes"};
        return std::nullopt;
      }
    }
    if (auth_.payload == S3Payload::kSha256 && s3::Sha256Hex(body) != auth_.payload_sha256) {
      *error = {400, "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed."};
      return std::nullopt;
    }
    // Every checksum sent, in a header or a trailer.
    std::vector<std::pair<S3ChecksumAlgorithm, std::string>> expected;
    using Headers = std::vector<std::pair<std::string, std::string>>;
    for (const Headers* list : std::initializer_list<const Headers*>{&r.headers, &trailers}) {
      for (const auto& [name, value] : *list) {
        if (std::optional<S3ChecksumAlgorithm> a = ChecksumOfHeader(name)) expected.emplace_back(*a, value);
        if (name == "content-md5") expected.emplace_back(S3ChecksumAlgorithm::kMd5, value);
      }
    }
    if (const std::string* t = r.Header("x-amz-trailer"); t != nullptr) {
      std::optional<S3ChecksumAlgorithm> a = ChecksumOfHeader(*t);
      bool sent = false;
      for (const auto& [name, value] : trailers) sent = sent || name == *t;
      if (!a || !sent) {
        *error = {400, "InvalidRequest", "x-amz-trailer names '" + *t + "', which the body does "
                                         "not end with (or which is not a checksum)"};
        return std::nullopt;
      }
    }
    for (const auto& [algorithm, value] : expected) {
      S3Checksum c(algorithm);
      c.Update(body);
      if (c.FinishBase64() != value) {
        *error = algorithm == S3ChecksumAlgorithm::kMd5
                     ? S3Error{400, "BadDigest", "The Content-MD5 you specified did not match what we received."}
                     : S3Error{400, "BadDigest", "The " + std::string(ChecksumHeader(algorithm)) +
                                                     " you specified did not match the calculated checksum."};
        return std::nullopt;
      }
    }
    return body;
  }

  // CheckedBody of an object or a part: also refused (EntityTooLarge) over max_object_bytes.
  std::optional<std::span<std::byte>> CheckedObjectBody(std::span<std::byte> input, S3Error* error) {
    std::optional<std::span<std::byte>> body = CheckedBody(input, error);
    if (body && body->size() > ctx_->config->EffectiveMaxObjectBytes()) {
      *error = {400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size."};
      return std::nullopt;
    }
    return body;
  }

  Reply PutObject(std::span<std::byte> input, TenantId tenant, const std::string& bucket,
                  const std::string& key) {
    const HttpRequest& r = parser_.request();
    const std::string resource = "/" + bucket + "/" + key;
    S3Error error;
    std::optional<std::span<std::byte>> body = CheckedObjectBody(input, &error);
    if (!body) return ErrorReply(error, resource);
    S3ObjectHeader header;
    header.size = body->size();
    header.content_type = ContentType();
    header.digest = ContentDigest(*body);
    header.modified_us = NowMicros();
    // The same bytes again keep the header they were stored with, so the value is the same
    // and the Store leaves it as it is.
    if (std::optional<S3ObjectHeader> old = ctx_->s3->Named(tenant, bucket, key);
        old && old->digest == header.digest && old->size == header.size &&
        old->content_type == header.content_type) {
      header.modified_us = old->modified_us;
    }
    // The header goes just before the body, over request bytes already parsed, so that the
    // value is stored from the input buffer without a copy; a copy when there is no room.
    const size_t header_bytes = header.encoded_size();
    const size_t body_offset = static_cast<size_t>(body->data() - input.data());
    std::vector<std::byte> copy;
    std::span<const std::byte> value;
    if (body_offset >= header_bytes) {
      header.EncodeTo(input.subspan(body_offset - header_bytes, header_bytes));
      value = input.subspan(body_offset - header_bytes, header_bytes + body->size());
    } else {
      copy.resize(header_bytes + body->size());
      header.EncodeTo(copy);
      std::memcpy(copy.data() + header_bytes, body->data(), body->size());
      value = copy;
    }
    const BlockKey block = S3ObjectKey(bucket, key);
    Status s;
    if (const std::string* none = r.Header("if-none-match"); none != nullptr) {
      if (*none != "*") {
        return ErrorReply({501, "NotImplemented", "If-None-Match on PUT takes only '*'"}, resource);
      }
      // Conditional creates of the same key are serialized, so exactly one of them wins.
      MutexLock lock(ctx_->s3->conditional_mutex());
      Result<PrefixMatch> m = ctx_->store->LookupPrefix(tenant, std::span(&block, 1));
      if (m.ok() && m->num_blocks > 0) {
        return ErrorReply({412, "PreconditionFailed", "At least one of the pre-conditions you "
                                                      "specified did not hold"}, resource);
      }
      s = ctx_->store->Replace(tenant, block, value);
      // A lock: kept, not evicted, until it is deleted, replaced or held lock_seconds.
      if (s.ok() && ctx_->config->s3.lock_seconds > 0 && ctx_->store->Pin(tenant, block).ok()) {
        ctx_->s3->LockCreated(tenant, block, NowMicros());
      }
    } else {
      ReleaseLock(tenant, block);
      s = ctx_->store->Replace(tenant, block, value);
    }
    if (!s.ok()) {
      S3Error e = ErrorOf(s);
      if (s.code() == StatusCode::kInvalidArgument) e.code = "EntityTooLarge";
      return ErrorReply(e, resource);
    }
    ctx_->s3->NameStored(tenant, bucket, key, header);
    Reply reply{200, {{"ETag", header.ETag()}}, ""};
    for (const auto& [name, value_text] : r.headers) {
      if (ChecksumOfHeader(name)) reply.headers.emplace_back(name, value_text);
    }
    return reply;
  }

  static S3Error UploadError(const Status& s) {
    if (s.code() == StatusCode::kNotFound) {
      return {404, "NoSuchUpload", "The specified multipart upload does not exist. The upload ID "
                                   "may be invalid, or the upload may have been aborted or completed."};
    }
    if (s.code() == StatusCode::kFailedPrecondition) return {409, "OperationAborted", std::string(s.message())};
    return ErrorOf(s);
  }

  std::string ContentType() const {
    const std::string* type = parser_.request().Header("content-type");
    return type != nullptr ? type->substr(0, kMaxContentTypeBytes) : "binary/octet-stream";
  }

  Reply StartUpload(TenantId tenant, const std::string& bucket, const std::string& key) {
    const std::string id = ctx_->s3->StartUpload(tenant, bucket, key, ContentType(), NowMicros());
    return {200, {{"Content-Type", "application/xml"}},
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult "
            "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>" + XmlEscape(bucket) +
                "</Bucket><Key>" + XmlEscape(key) + "</Key><UploadId>" + id +
                "</UploadId></InitiateMultipartUploadResult>"};
  }

  Reply UploadPart(std::span<std::byte> input, TenantId tenant, const std::string& bucket,
                   const std::string& key, const std::string& upload) {
    const HttpRequest& r = parser_.request();
    const std::string resource = "/" + bucket + "/" + key;
    const std::string number_text = QueryValue("partNumber").value_or("");
    uint32_t number = 0;
    if (number_text.empty() || number_text.size() > 5 ||
        number_text.find_first_not_of("0123456789") != std::string::npos ||
        (number = static_cast<uint32_t>(std::stoul(number_text))) < 1 || number > kMaxParts) {
      return ErrorReply({400, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive"}, resource);
    }
    S3Error error;
    std::optional<std::span<std::byte>> body = CheckedObjectBody(input, &error);
    if (!body) return ErrorReply(error, resource);
    S3Service::Part part;
    part.bytes.assign(body->begin(), body->end());
    part.digest = ContentDigest(*body);
    part.modified_us = NowMicros();
    S3ObjectHeader etag;
    etag.digest = part.digest;
    if (Status s = ctx_->s3->AddPart(tenant, upload, bucket, key, number, std::move(part)); !s.ok()) {
      return ErrorReply(UploadError(s), resource);
    }
    Reply reply(200, {{"ETag", etag.ETag()}});
    for (const auto& [name, value] : r.headers) {
      if (ChecksumOfHeader(name)) reply.headers.emplace_back(name, value);
    }
    return reply;
  }

  Reply ListParts(TenantId tenant, const std::string& bucket, const std::string& key,
                  const std::string& upload) {
    Result<std::vector<std::pair<uint32_t, S3Service::Part>>> parts =
        ctx_->s3->ListParts(tenant, upload, bucket, key);
    if (!parts.ok()) return ErrorReply(UploadError(parts.status()), "/" + bucket + "/" + key);
    std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListPartsResult "
                      "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>" + XmlEscape(bucket) +
                      "</Bucket><Key>" + XmlEscape(key) + "</Key><UploadId>" + XmlEscape(upload) +
                      "</UploadId><MaxParts>10000</MaxParts><IsTruncated>false</IsTruncated>";
    for (const auto& [number, part] : *parts) {
      S3ObjectHeader etag;
      etag.digest = part.digest;
      xml += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><LastModified>" +
             IsoDate(part.modified_us) + "</LastModified><ETag>" + XmlEscape(etag.ETag()) +
             "</ETag><Size>" + std::to_string(part.size) + "</Size></Part>";
    }
    xml += "</ListPartsResult>";
    return {200, {{"Content-Type", "application/xml"}}, std::move(xml)};
  }

  // <CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"…"</ETag></Part>…
  Reply CompleteUpload(std::span<std::byte> input, TenantId tenant, const std::string& bucket,
                       const std::string& key, const std::string& upload_id) {
    const std::string resource = "/" + bucket + "/" + key;
    S3Error error;
    std::optional<std::span<std::byte>> body = CheckedBody(input, &error);
    if (!body) return ErrorReply(error, resource);
    const S3Error malformed{400, "MalformedXML", "The XML you provided was not well-formed or did "
                                                 "not validate against our published schema"};
    const std::string_view xml(reinterpret_cast<const char*>(body->data()), body->size());
    std::vector<std::pair<uint32_t, std::string>> wanted;
    for (size_t pos = 0;;) {
      const size_t open = xml.find("<Part>", pos);
      if (open == std::string_view::npos) break;
      const size_t close = xml.find("</Part>", open);
      if (close == std::string_view::npos) return ErrorReply(malformed, resource);
      const std::string_view part = xml.substr(open, close - open);
      pos = close + 7;
      std::optional<std::string> number = XmlElement(part, "PartNumber");
      std::optional<std::string> etag = XmlElement(part, "ETag");
      if (!number || !etag || number->empty() || number->size() > 5 ||
          number->find_first_not_of("0123456789") != std::string::npos) {
        return ErrorReply(malformed, resource);
      }
      wanted.emplace_back(static_cast<uint32_t>(std::stoul(*number)), *etag);
    }
    if (wanted.empty()) return ErrorReply(malformed, resource);
    Result<std::shared_ptr<S3Service::Upload>> upload =
        ctx_->s3->BeginComplete(tenant, upload_id, bucket, key);
    if (!upload.ok()) return ErrorReply(UploadError(upload.status()), resource);
    Reply reply = AssembleUpload(**upload, wanted, tenant, bucket, key, resource);
    if (reply.status == 200) {
      (void)ctx_->s3->EndUpload(tenant, upload_id, bucket, key);
    } else {
      ctx_->s3->ResumeUpload(*upload);
    }
    return reply;
  }

  Reply AssembleUpload(const S3Service::Upload& upload,
                       const std::vector<std::pair<uint32_t, std::string>>& wanted, TenantId tenant,
                       const std::string& bucket, const std::string& key, const std::string& resource) {
    uint64_t total = 0;
    std::vector<const S3Service::Part*> parts;
    for (size_t i = 0; i < wanted.size(); ++i) {
      if (i > 0 && wanted[i].first <= wanted[i - 1].first) {
        return ErrorReply({400, "InvalidPartOrder", "The list of parts was not in ascending order. "
                                                    "Parts must be ordered by part number."}, resource);
      }
      auto it = upload.parts.find(wanted[i].first);
      S3ObjectHeader etag;
      if (it != upload.parts.end()) etag.digest = it->second.digest;
      if (it == upload.parts.end() || !EtagListMatches(wanted[i].second, etag.ETag())) {
        return ErrorReply({400, "InvalidPart", "One or more of the specified parts could not be "
                                               "found, or its entity tag did not match."}, resource);
      }
      if (i + 1 < wanted.size() && it->second.bytes.size() < kMinPartBytes) {
        return ErrorReply({400, "EntityTooSmall", "Your proposed upload is smaller than the minimum "
                                                  "allowed object size."}, resource);
      }
      total += it->second.bytes.size();
      parts.push_back(&it->second);
    }
    if (total > ctx_->config->EffectiveMaxObjectBytes()) {
      return ErrorReply({400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed "
                                                "object size."}, resource);
    }
    S3ObjectHeader header;
    header.size = total;
    header.modified_us = NowMicros();
    header.content_type = upload.content_type;
    header.parts = static_cast<uint32_t>(parts.size());
    std::vector<uint8_t> digests;
    for (const S3Service::Part* p : parts) digests.insert(digests.end(), p->digest.begin(), p->digest.end());
    header.digest = ContentDigest(std::as_bytes(std::span(digests)));
    std::vector<std::byte> value(header.encoded_size() + total);
    header.EncodeTo(value);
    size_t at = header.encoded_size();
    for (const S3Service::Part* p : parts) {
      std::memcpy(value.data() + at, p->bytes.data(), p->bytes.size());
      at += p->bytes.size();
    }
    ReleaseLock(tenant, S3ObjectKey(bucket, key));
    if (Status s = ctx_->store->Replace(tenant, S3ObjectKey(bucket, key), value); !s.ok()) {
      return ErrorReply(ErrorOf(s), resource);
    }
    ctx_->s3->NameStored(tenant, bucket, key, header);
    return {200, {{"Content-Type", "application/xml"}},
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult "
            "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Location>" + XmlEscape(resource) +
                "</Location><Bucket>" + XmlEscape(bucket) + "</Bucket><Key>" + XmlEscape(key) +
                "</Key><ETag>" + XmlEscape(header.ETag()) + "</ETag></CompleteMultipartUploadResult>"};
  }

  // The text of the first <name>…</name> in `xml`, unescaped.
  static std::optional<std::string> XmlElement(std::string_view xml, std::string_view name) {
    const std::string open = "<" + std::string(name) + ">";
    const std::string close = "</" + std::string(name) + ">";
    const size_t a = xml.find(open);
    if (a == std::string_view::npos) return std::nullopt;
    const size_t b = xml.find(close, a);
    if (b == std::string_view::npos) return std::nullopt;
    return XmlUnescape(xml.substr(a + open.size(), b - a - open.size()));
  }

  Reply GetObject(TenantId tenant, const std::string& bucket, const std::string& key, bool head) {
    const HttpRequest& r = parser_.request();
    const std::string resource = "/" + bucket + "/" + key;
    const S3Error no_such{404, "NoSuchKey", "The specified key does not exist."};
    Result<BlockHandle> handle = ctx_->store->Get(tenant, S3ObjectKey(bucket, key));
    if (!handle.ok()) {
      if (handle.status().code() == StatusCode::kNotFound) {
        ctx_->s3->NameRemoved(tenant, bucket, key);
        if (head) return Reply::Head(404, {}, 0);
        return ErrorReply(no_such, resource);
      }
      return ErrorReply(ErrorOf(handle.status()), resource);
    }
    // The header may span extents: gather its first bytes.
    std::array<std::byte, S3ObjectHeader::kFixedBytes + kMaxContentTypeBytes> first{};
    size_t got = 0;
    for (std::span<const std::byte> extent : handle->extents()) {
      const size_t take = std::min(extent.size(), first.size() - got);
      std::memcpy(first.data() + got, extent.data(), take);
      got += take;
      if (got == first.size()) break;
    }
    size_t header_bytes = 0;
    std::optional<S3ObjectHeader> header =
        S3ObjectHeader::Decode(std::span(first.data(), got), handle->size(), &header_bytes);
    if (!header) {
      return ErrorReply({500, "InternalError", "the value under this key is not an S3 object"}, resource);
    }
    const std::string etag = header->ETag();
    Reply reply;
    reply.headers = {{"ETag", etag},
                     {"Last-Modified", HttpDate(header->modified_us)},
                     {"Content-Type", header->content_type},
                     {"Accept-Ranges", "bytes"}};
    if (const std::string* match = r.Header("if-match"); match != nullptr && !EtagListMatches(*match, etag)) {
      return ErrorReply({412, "PreconditionFailed", "At least one of the pre-conditions you "
                                                    "specified did not hold"}, resource);
    }
    if (const std::string* none = r.Header("if-none-match"); none != nullptr && EtagListMatches(*none, etag)) {
      reply.status = 304;
      reply.head_length = 0;
      return reply;
    }
    uint64_t offset = 0;
    uint64_t length = header->size;
    if (const std::string* range = r.Header("range"); range != nullptr) {
      std::optional<std::pair<uint64_t, uint64_t>> span = ParseRange(*range, header->size);
      if (!span) {
        reply = ErrorReply({416, "InvalidRange", "The requested range is not satisfiable"}, resource);
        reply.headers.emplace_back("Content-Range", "bytes */" + std::to_string(header->size));
        return reply;
      }
      if (span->second > 0 || header->size > 0) {
        offset = span->first;
        length = span->second;
        reply.status = 206;
        reply.headers.emplace_back("Content-Range", "bytes " + std::to_string(offset) + "-" +
                                                        std::to_string(offset + length - 1) + "/" +
                                                        std::to_string(header->size));
      }
    }
    if (head) {
      reply.head_length = length;
      return reply;
    }
    reply.lease = std::move(handle).value();
    reply.lease_offset = header_bytes + offset;
    reply.lease_length = length;
    return reply;
  }

  // "bytes=a-b", "bytes=a-", "bytes=-n" within an object of `size` bytes: (offset, length);
  // nullopt when unsatisfiable. A range S3 ignores (malformed, several ranges) is the whole.
  static std::optional<std::pair<uint64_t, uint64_t>> ParseRange(std::string_view range, uint64_t size) {
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

  // Unpins `block` if it is a lock, before it is deleted or replaced.
  void ReleaseLock(TenantId tenant, const BlockKey& block) {
    if (ctx_->s3->LockReleased(tenant, block)) (void)ctx_->store->Unpin(tenant, block);
  }

  Reply DeleteObject(TenantId tenant, const std::string& bucket, const std::string& key) {
    const BlockKey block = S3ObjectKey(bucket, key);
    ReleaseLock(tenant, block);
    Status s = ctx_->store->Delete(tenant, block);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return ErrorReply(ErrorOf(s), "/" + bucket + "/" + key);
    ctx_->s3->NameRemoved(tenant, bucket, key);
    return {204, {}, ""};
  }

  // <Delete><Quiet>true</Quiet><Object><Key>k</Key></Object>...</Delete>
  Reply DeleteObjects(std::span<std::byte> input, TenantId tenant, const std::string& bucket) {
    const std::string resource = "/" + bucket;
    S3Error error;
    std::optional<std::span<std::byte>> body = CheckedBody(input, &error);
    if (!body) return ErrorReply(error, resource);
    const std::string_view xml(reinterpret_cast<const char*>(body->data()), body->size());
    const bool quiet = xml.find("<Quiet>true</Quiet>") != std::string_view::npos;
    std::vector<std::string> keys;
    for (size_t pos = 0;;) {
      const size_t open = xml.find("<Key>", pos);
      if (open == std::string_view::npos) break;
      const size_t close = xml.find("</Key>", open);
      if (close == std::string_view::npos) {
        return ErrorReply({400, "MalformedXML", "The XML you provided was not well-formed"}, resource);
      }
      keys.push_back(XmlUnescape(xml.substr(open + 5, close - open - 5)));
      pos = close + 6;
    }
    if (keys.empty() || keys.size() > 1000) {
      return ErrorReply({400, "MalformedXML", "Delete takes 1 to 1000 keys"}, resource);
    }
    std::vector<BlockKey> blocks;
    for (const std::string& k : keys) {
      blocks.push_back(S3ObjectKey(bucket, k));
      ReleaseLock(tenant, blocks.back());
    }
    std::vector<Status> results = ctx_->store->DeleteMany(tenant, blocks);
    std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DeleteResult "
                      "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
    for (size_t i = 0; i < keys.size(); ++i) {
      const Status& s = results[i];
      if (s.ok() || s.code() == StatusCode::kNotFound) {
        ctx_->s3->NameRemoved(tenant, bucket, keys[i]);
        if (!quiet) out += "<Deleted><Key>" + XmlEscape(keys[i]) + "</Key></Deleted>";
      } else {
        const S3Error e = ErrorOf(s);
        out += "<Error><Key>" + XmlEscape(keys[i]) + "</Key><Code>" + e.code + "</Code><Message>" +
               XmlEscape(e.message) + "</Message></Error>";
      }
    }
    out += "</DeleteResult>";
    return {200, {{"Content-Type", "application/xml"}}, std::move(out)};
  }

  const ServerContext* ctx_;
  PeerInfo peer_;
  HttpRequestParser parser_;
  bool head_checked_ = false;
  S3Auth auth_;
  const S3Principal* principal_ = nullptr;
  uint64_t requests_ = 0;
};

}  // namespace

std::unique_ptr<ProtocolHandler> NewS3Handler(const ServerContext* ctx, const PeerInfo& peer) {
  return std::make_unique<S3Handler>(ctx, peer);
}

std::string S3RefusalMessage() {
  const std::string body =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>max "
      "number of clients open</Message></Error>";
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace kvtier::server
