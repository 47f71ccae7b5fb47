// kvtierd's S3 endpoint (docs/protocol.md, "S3"): path-style requests parsed by
// HttpRequestParser, authenticated (s3_auth.h) before a body is received, answered from the
// Store in S3's XML and headers. A front end only: objects are Store values (s3_service.h).

#include <strings.h>

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "src/common/sigv4.h"
#include "src/server/handler.h"
#include "src/server/http_request.h"
#include "src/server/s3_auth.h"
#include "src/server/s3_body.h"
#include "src/server/s3_list.h"
#include "src/server/s3_protocol.h"
#include "src/server/s3_put_in_place.h"
#include "src/server/s3_service.h"

namespace kvtier::server {
namespace {

using Action = ProtocolHandler::Outcome::Action;

// Room for the aws-chunked framing of a body on top of the object's bytes.
constexpr uint64_t kChunkFramingBytes = 1 << 20;
constexpr size_t kMaxContentTypeBytes = 255;
const S3Error kPreconditionFailed{412, "PreconditionFailed",
                                  "At least one of the pre-conditions you specified did not hold"};

class S3Handler final : public ProtocolHandler {
 public:
  S3Handler(const ServerContext* ctx, PeerInfo peer)
      : ctx_(ctx),
        peer_(std::move(peer)),
        parser_({.max_head_bytes = 16 << 10,
                 .max_headers = 100,
                 .max_body_bytes = ctx->config->EffectiveMaxObjectBytes() + kChunkFramingBytes}) {}

  Proto proto() const override { return Proto::kS3; }

  // S3's answer to a connection that went quiet and to a request that came too slowly alike.
  void OnIdleTimeout(OutputQueue* out) override {
    Send(S3Reply(400, {}, S3ErrorXml({400, "RequestTimeout", "Your socket connection to the server was "
                                                    "not read from or written to within the "
                                                    "timeout period."}, "")),
         /*close=*/true, out);
  }
  void OnRequestTimeout(OutputQueue* out) override { OnIdleTimeout(out); }

  Outcome HandleOne(std::span<std::byte> input, OutputQueue* out) override {
    if (put_ && put_->framed()) return HandleFramed(input, out);
    const HttpRequestParser::State state = parser_.Parse(input);
    if (state == HttpRequestParser::State::kError) return ParseFailed(out);
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
      if (!whole_body_) {
        // Asked once a request: refused, the body is read whole.
        whole_body_ = true;
        put_ = S3InPlacePut::Start(ctx_, r, auth_, principal_->tenant, ContentType());
        if (put_) {
          put_time_ = {};
          if (put_->framed()) {  // What Parse read of the body lies in the input.
            return Framed(put_->TakeBody(parser_.BodyPieces(input)), parser_.consumed(), out);
          }
          return {Action::kReceivePayload, parser_.head_size(), 0, put_->body_bytes()};
        }
      }
      // The rest of the request, or at least that much: the event loop sizes the input for it
      // and sleeps until it has come (SO_RCVLOWAT), not for each segment.
      uint64_t rest = 0;
      if (r.content_length && !r.chunked) {
        rest = *r.content_length - r.body_bytes;
      } else if (std::optional<uint64_t> payload =
                     DecodedLength(r, ctx_->config->EffectiveMaxObjectBytes())) {
        // A chunked body (aws-sdk-cpp's, NIXL's) of an aws-chunked payload: its framing only
        // adds to the payload's length, and the body so far counts framing too.
        rest = *payload > r.body_bytes ? *payload - r.body_bytes : 0;
      }
      return {Action::kNeedMore, 0, rest > 0 ? parser_.consumed() + rest : 0};
    }
    RequestTimer timer(ctx_->metrics, Proto::kS3, Op::kOther);
    S3Reply reply = Handle(input, &timer);
    const bool close = !parser_.request().keep_alive;
    const size_t consumed = parser_.consumed();
    Send(std::move(reply), close, out);
    EndRequest();
    return {close ? Action::kClose : Action::kHandled, consumed, 0};
  }

  std::span<std::byte> PayloadTarget() override {
    PayloadTime::Scope busy(&put_time_);
    target_ = put_->Target(put_->framed() ? run_left_ : UINT64_MAX);
    return target_;
  }

  // Each piece is checked as it comes; after the last, the object is published or refused. A
  // framed body's piece goes through the HTTP framing's parser and the aws-chunked stream, which
  // find it in place.
  void PayloadFilled(OutputQueue* out) override {
    {
      PayloadTime::Scope busy(&put_time_);
      if (put_->framed()) {
        run_left_ -= target_.size();
        std::vector<std::span<std::byte>> body;
        size_t read = 0;
        if (parser_.ParseNext(target_, &body, &read) == HttpRequestParser::State::kError ||
            read != target_.size()) {
          framed_error_ = S3Error{400, "IncompleteBody", "the body's framing was lost"};
        } else if (std::optional<S3Error> e = put_->TakeBody(body)) {
          framed_error_ = std::move(e);
        }
        return;
      }
      put_->Filled();
      if (!put_->done()) return;
      // Only a keep-alive request comes this way.
      Send(put_->Finish(parser_.request(), auth_), /*close=*/false, out);
      EndRequest();
    }
    put_time_.Record(ctx_->metrics, Proto::kS3, Op::kPut);
  }

 private:
  // A framed body's bytes after those read before (S3InPlacePut::TakeBody).
  Outcome HandleFramed(std::span<std::byte> input, OutputQueue* out) {
    std::vector<std::span<std::byte>> body;
    size_t read = 0;
    if (framed_error_) return Fail(*framed_error_, out);
    PayloadTime::Scope busy(&put_time_);
    if (parser_.ParseNext(input, &body, &read) == HttpRequestParser::State::kError) {
      return ParseFailed(out);
    }
    return Framed(put_->TakeBody(body), read, out);
  }

  // What comes after a framed body's bytes (`consumed` of the input) were taken, with error `e`:
  // the reply once the request is complete, else the payload that follows the framing in place
  // or the next framing bytes, read in small steps.
  Outcome Framed(std::optional<S3Error> e, size_t consumed, OutputQueue* out) {
    constexpr size_t kFramingStep = 4096;
    if (e) return Fail(*e, out);
    if (parser_.state() == HttpRequestParser::State::kComplete) {
      if (!put_->framing_done()) {
        return Fail({400, "IncompleteBody", "the HTTP body ended before its aws-chunked body did"}, out);
      }
      Send(put_->Finish(parser_.request(), auth_), /*close=*/false, out);
      put_time_.Record(ctx_->metrics, Proto::kS3, Op::kPut);
      EndRequest();
      return {Action::kHandled, consumed, 0};
    }
    run_left_ = std::min(parser_.BodyRun(), put_->run());
    if (run_left_ > put_->left()) return Fail(put_->LongerThanDeclared(), out);
    Outcome o{run_left_ > 0 ? Action::kReceivePayload : Action::kConsumed, consumed,
              static_cast<size_t>(put_->left() - run_left_), static_cast<size_t>(run_left_)};
    o.request_goes_on = true;
    o.read_step = kFramingStep;
    return o;
  }

  Outcome ParseFailed(OutputQueue* out) {
    ctx_->metrics->ProtocolError(Proto::kS3);
    const int status = parser_.error_status();
    const char* code = status == 413   ? "EntityTooLarge"
                       : status == 431 ? "RequestHeaderSectionTooLarge"
                                       : "BadRequest";
    return Fail({status == 413 ? 400 : status, code, parser_.error()}, out);
  }

  std::optional<std::string> QueryValue(std::string_view name) const { return server::QueryValue(auth_, name); }

  // Forgets the request answered, to take the next; unpins the lock objects held long enough.
  void EndRequest() {
    for (const auto& [tenant, key] : ctx_->s3->ExpiredLocks(UnixMicros())) {
      (void)ctx_->store->Unpin(tenant, key);  // Gone already (deleted, expired): nothing to do.
    }
    parser_.Reset();
    head_checked_ = false;
    whole_body_ = false;
    put_.reset();
    framed_error_.reset();
    auth_ = S3Auth{};
    principal_ = nullptr;
  }

  // Authenticates the request from its head, before its body is accepted.
  std::optional<S3Error> CheckHead() {
    const HttpRequest& r = parser_.request();
    if (Status admit = ctx_->auth_guard->Admit(peer_, Proto::kS3); !admit.ok()) {
      ctx_->metrics->AuthRefused(Proto::kS3);
      return S3Error{503, "SlowDown", std::string(admit.message())};
    }
    const int64_t now = static_cast<int64_t>(UnixMicros() / 1000000);
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
    Send(S3Reply(e.status, {}, S3ErrorXml(e, parser_.request().path)), /*close=*/true, out);
    return {Action::kClose, 0, 0};
  }

  void Send(S3Reply reply, bool close, OutputQueue* out) {
    std::string head = "HTTP/1.1 " + std::to_string(reply.status) + " " +
                       std::string(HttpReason(reply.status)) + "\r\nServer: kvtierd\r\nDate: " +
                       HttpDate(UnixMicros()) + "\r\nx-amz-request-id: " + RequestId() + "\r\n";
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

  S3Reply Handle(std::span<std::byte> input, RequestTimer* timer) {
    const HttpRequest& r = parser_.request();
    std::optional<S3Path> split = SplitS3Path(r.path);
    if (!split) return S3ErrorReply({400, "InvalidURI", "Couldn't parse the specified URI."}, r.path);
    const std::string& bucket = split->bucket;
    const std::string& key = split->key;
    const std::string path = "/" + bucket + (key.empty() ? "" : "/" + key);
    const TenantId tenant = principal_->tenant;
    if (bucket.empty()) {
      if (r.method == "GET") return ListBuckets(tenant);
      return NotImplemented(r);
    }
    if (!ValidBucketName(bucket)) {
      return S3ErrorReply({400, "InvalidBucketName", "The specified bucket is not valid."}, path);
    }
    if (key.empty()) return BucketOp(input, tenant, bucket, timer);
    if (key.size() > kMaxS3KeyBytes) {
      return S3ErrorReply({400, "KeyTooLongError", "Your key is too long."}, path);
    }
    if (!ctx_->s3->HasBucket(tenant, bucket)) {
      return S3ErrorReply({404, "NoSuchBucket", "The specified bucket does not exist"}, path);
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
        if (!s.ok()) return S3ErrorReply(S3UploadError(s), path);
        return S3Reply(204);
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

  static S3Reply NotImplemented(const HttpRequest& r) {
    return S3ErrorReply({501, "NotImplemented", "A header or query you provided implies "
                                              "functionality that is not implemented (" +
                                                  r.method + " " + r.target + ")"},
                      r.path);
  }

  S3Reply ListBuckets(TenantId tenant) {
    return {200, {{"Content-Type", "application/xml"}},
            ListAllMyBucketsXml(principal_->tenant_name, ctx_->s3->ListBuckets(tenant))};
  }

  S3Reply BucketOp(std::span<std::byte> input, TenantId tenant, const std::string& bucket,
                 RequestTimer* timer) {
    const HttpRequest& r = parser_.request();
    const std::string resource = "/" + bucket;
    if (r.method == "PUT" && r.query.empty()) {
      timer->set_op(Op::kAdmin);
      if (Status s = ctx_->s3->CreateBucket(tenant, bucket, UnixMicros()); !s.ok()) {
        return S3ErrorReply(S3ErrorOf(s), resource);
      }
      return {200, {{"Location", resource}}, ""};
    }
    const bool exists = ctx_->s3->HasBucket(tenant, bucket);
    const S3Error no_such{404, "NoSuchBucket", "The specified bucket does not exist"};
    if (r.method == "HEAD" && r.query.empty()) {
      if (!exists) return S3Reply::Head(404, {}, 0);
      return S3Reply::Head(200, {{"x-amz-bucket-region", ctx_->config->s3.region}}, 0);
    }
    if (r.method == "DELETE" && r.query.empty()) {
      timer->set_op(Op::kAdmin);
      Status s = ctx_->s3->DeleteBucket(tenant, bucket);
      if (s.code() == StatusCode::kNotFound) return S3ErrorReply(no_such, resource);
      if (s.code() == StatusCode::kFailedPrecondition) {
        return S3ErrorReply({409, "BucketNotEmpty", "The bucket you tried to delete is not empty"}, resource);
      }
      if (!s.ok()) return S3ErrorReply(S3ErrorOf(s), resource);
      return {204, {}, ""};
    }
    if (!exists) return S3ErrorReply(no_such, resource);
    if (r.method == "GET" && QueryValue("location")) {
      return {200, {{"Content-Type", "application/xml"}},
              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<LocationConstraint "
              "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" +
                  (ctx_->config->s3.region == "us-east-1" ? "" : XmlEscape(ctx_->config->s3.region)) +
                  "</LocationConstraint>"};
    }
    if (r.method == "GET" && QueryValue("list-type") == "2") {
      timer->set_op(Op::kStats);
      return ListObjectsV2(ctx_, auth_, tenant, bucket);
    }
    if (r.method == "POST" && QueryValue("delete")) {
      timer->set_op(Op::kDelete);
      return DeleteObjects(input, tenant, bucket);
    }
    return NotImplemented(r);
  }

  // The request body, decoded where it lies (s3_body.h); nullopt with *error set otherwise.
  std::optional<S3Body> DecodedBody(std::span<std::byte> input, S3Error* error) {
    S3Body body;
    if (std::optional<S3Error> e =
            DecodeS3Body(parser_.request(), parser_.BodyPieces(input), auth_, &body)) {
      *error = *e;
      return std::nullopt;
    }
    return body;
  }

  // The request body decoded, made contiguous and checked against every checksum the client
  // sent; nullopt with *error set otherwise.
  std::optional<std::span<std::byte>> CheckedBody(std::span<std::byte> input, S3Error* error) {
    std::optional<S3Body> body = DecodedBody(input, error);
    if (!body) return std::nullopt;
    std::span<std::byte> joined;
    if (std::optional<S3Error> e = JoinChecked(*body, &joined)) {
      *error = *e;
      return std::nullopt;
    }
    return joined;
  }

  // DecodedBody of an object or a part: also refused (EntityTooLarge) over max_object_bytes.
  std::optional<S3Body> ObjectBody(std::span<std::byte> input, S3Error* error) {
    std::optional<S3Body> body = DecodedBody(input, error);
    if (body && body->size > ctx_->config->EffectiveMaxObjectBytes()) {
      *error = {400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size."};
      return std::nullopt;
    }
    return body;
  }

  S3Reply PutObject(std::span<std::byte> input, TenantId tenant, const std::string& bucket,
                  const std::string& key) {
    const HttpRequest& r = parser_.request();
    const std::string resource = "/" + bucket + "/" + key;
    S3Error error;
    std::optional<S3Body> body = ObjectBody(input, &error);
    if (!body) return S3ErrorReply(error, resource);
    S3ObjectHeader header;
    header.size = body->size;
    header.content_type = ContentType();
    header.modified_us = UnixMicros();
    const size_t header_bytes = header.encoded_size();
    const BlockKey block = S3ObjectKey(bucket, key);
    const std::string* none = r.Header("if-none-match");
    const std::string* match = r.Header("if-match");
    std::optional<S3ObjectHeader> old = ctx_->s3->Named(tenant, bucket, key);
    Status s;
    if (none == nullptr && match == nullptr && !old) {
      // A name not stored here before, the case of every KV block: the body goes from the input
      // into its G2 allocation in one pass that also checks it and takes its digest (G2 does
      // not hold the key, or Allocate would say so; CommitReplace deals with G3).
      Result<BlockAllocation> a = ctx_->store->Allocate(tenant, block, header_bytes + body->size);
      if (a.ok()) {
        S3BodyChecks checks(*body, /*digest=*/true);
        CopyChecked(*body, a->extents(), header_bytes, &checks);
        if (std::optional<S3Error> e = checks.Finish()) return S3ErrorReply(*e, resource);
        header.digest = checks.digest();
        std::vector<std::byte> encoded(header_bytes);
        header.EncodeTo(encoded);
        CopyInto(a->extents(), 0, encoded);
        return PutObjectReply(ctx_, r, ctx_->store->CommitReplace(std::move(*a)), tenant, bucket, key, header);
      }
      if (a.status().code() != StatusCode::kAlreadyExists) {
        return PutObjectReply(ctx_, r, a.status(), tenant, bucket, key, header);
      }
    }
    std::span<std::byte> joined;
    if (std::optional<S3Error> e = JoinChecked(*body, &joined, &header.digest)) {
      return S3ErrorReply(*e, resource);
    }
    // The same bytes again keep the header they were stored with, so the value is the same
    // and the Store leaves it as it is.
    if (old && old->digest == header.digest && old->size == header.size &&
        old->content_type == header.content_type) {
      header.modified_us = old->modified_us;
    }
    // The header goes just before the body, over request bytes already parsed, so that the
    // value is stored from the input buffer without a copy; a copy when there is no room, and
    // for an empty body (which has no place in the input: the value is the header alone).
    std::vector<std::byte> copy;
    std::span<const std::byte> value;
    if (const size_t at = joined.empty() ? 0 : static_cast<size_t>(joined.data() - input.data());
        at >= header_bytes) {
      header.EncodeTo(input.subspan(at - header_bytes, header_bytes));
      value = input.subspan(at - header_bytes, header_bytes + joined.size());
    } else {
      copy.resize(header_bytes + joined.size());
      header.EncodeTo(copy);
      if (!joined.empty()) std::memcpy(copy.data() + header_bytes, joined.data(), joined.size());
      value = copy;
    }
    if (none != nullptr || match != nullptr) {
      if (none != nullptr && *none != "*") {
        return S3ErrorReply({501, "NotImplemented", "If-None-Match on PUT takes only '*'"}, resource);
      }
      // Conditional writes of the same key are serialized, so exactly one of them wins: a
      // create (If-None-Match: *) when the key is absent, a compare-and-swap (If-Match: ETag)
      // when the object under it has that ETag (a missing object has none, as RFC 7232 says).
      MutexLock lock(ctx_->s3->conditional_mutex());
      if (none != nullptr) {
        Result<PrefixMatch> m = ctx_->store->LookupPrefix(tenant, std::span(&block, 1));
        if (m.ok() && m->num_blocks > 0) return S3ErrorReply(kPreconditionFailed, resource);
      }
      if (match != nullptr) {
        Result<BlockHandle> held = ctx_->store->Get(tenant, block);
        size_t at = 0;
        std::optional<S3ObjectHeader> current = held.ok() ? S3ObjectHeader::Of(*held, &at) : std::nullopt;
        if (!current || !EtagListMatches(*match, current->ETag())) return S3ErrorReply(kPreconditionFailed, resource);
        ReleaseLock(tenant, block);
      }
      s = ctx_->store->Replace(tenant, block, value);
      // A lock (Dynamo KVBM's lock objects are created with If-None-Match: * and taken over
      // with If-Match): kept, not evicted, until it is deleted, replaced or held lock_seconds.
      if (s.ok() && ctx_->config->s3.lock_seconds > 0 && ctx_->store->Pin(tenant, block).ok()) {
        ctx_->s3->LockCreated(tenant, block, UnixMicros());
      }
    } else {
      ReleaseLock(tenant, block);
      s = ctx_->store->Replace(tenant, block, value);
    }
    return PutObjectReply(ctx_, r, s, tenant, bucket, key, header);
  }

  std::string ContentType() const {
    const std::string* type = parser_.request().Header("content-type");
    return type != nullptr ? type->substr(0, kMaxContentTypeBytes) : "binary/octet-stream";
  }

  S3Reply StartUpload(TenantId tenant, const std::string& bucket, const std::string& key) {
    const std::string id = ctx_->s3->StartUpload(tenant, bucket, key, ContentType(), UnixMicros());
    return {200, {{"Content-Type", "application/xml"}},
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult "
            "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>" + XmlEscape(bucket) +
                "</Bucket><Key>" + XmlEscape(key) + "</Key><UploadId>" + id +
                "</UploadId></InitiateMultipartUploadResult>"};
  }

  S3Reply UploadPart(std::span<std::byte> input, TenantId tenant, const std::string& bucket,
                   const std::string& key, const std::string& upload) {
    const HttpRequest& r = parser_.request();
    const std::string resource = "/" + bucket + "/" + key;
    const std::optional<uint32_t> number = ParsePartNumber(QueryValue("partNumber").value_or(""));
    if (!number) {
      return S3ErrorReply({400, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive"}, resource);
    }
    S3Error error;
    std::optional<S3Body> body = ObjectBody(input, &error);
    if (!body) return S3ErrorReply(error, resource);
    S3Service::Part part;
    part.bytes = std::make_unique_for_overwrite<std::byte[]>(body->size);
    part.size = body->size;
    S3BodyChecks checks(*body, /*digest=*/true);
    CopyChecked(*body, std::array{std::span(part.bytes.get(), part.size)}, 0, &checks);
    if (std::optional<S3Error> e = checks.Finish()) return S3ErrorReply(*e, resource);
    part.digest = checks.digest();
    return UploadPartReply(ctx_, r, tenant, upload, bucket, key, *number, std::move(part));
  }

  S3Reply ListParts(TenantId tenant, const std::string& bucket, const std::string& key,
                  const std::string& upload) {
    Result<std::vector<std::pair<uint32_t, S3Service::Part>>> parts =
        ctx_->s3->ListParts(tenant, upload, bucket, key);
    if (!parts.ok()) return S3ErrorReply(S3UploadError(parts.status()), "/" + bucket + "/" + key);
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

  S3Reply CompleteUpload(std::span<std::byte> input, TenantId tenant, const std::string& bucket,
                       const std::string& key, const std::string& upload_id) {
    const std::string resource = "/" + bucket + "/" + key;
    S3Error error;
    std::optional<std::span<std::byte>> body = CheckedBody(input, &error);
    if (!body) return S3ErrorReply(error, resource);
    std::optional<std::vector<std::pair<uint32_t, std::string>>> wanted = ParseCompleteUploadXml(
        std::string_view(reinterpret_cast<const char*>(body->data()), body->size()));
    if (!wanted) {
      return S3ErrorReply({400, "MalformedXML", "The XML you provided was not well-formed or did "
                                                "not validate against our published schema"},
                          resource);
    }
    Result<std::shared_ptr<S3Service::Upload>> upload =
        ctx_->s3->BeginComplete(tenant, upload_id, bucket, key);
    if (!upload.ok()) return S3ErrorReply(S3UploadError(upload.status()), resource);
    S3Reply reply = AssembleUpload(**upload, *wanted, tenant, bucket, key, resource);
    if (reply.status == 200) {
      (void)ctx_->s3->EndUpload(tenant, upload_id, bucket, key);
    } else {
      ctx_->s3->ResumeUpload(*upload);
    }
    return reply;
  }

  S3Reply AssembleUpload(const S3Service::Upload& upload,
                       const std::vector<std::pair<uint32_t, std::string>>& wanted, TenantId tenant,
                       const std::string& bucket, const std::string& key, const std::string& resource) {
    uint64_t total = 0;
    std::vector<const S3Service::Part*> parts;
    for (size_t i = 0; i < wanted.size(); ++i) {
      if (i > 0 && wanted[i].first <= wanted[i - 1].first) {
        return S3ErrorReply({400, "InvalidPartOrder", "The list of parts was not in ascending order. "
                                                    "Parts must be ordered by part number."}, resource);
      }
      auto it = upload.parts.find(wanted[i].first);
      S3ObjectHeader etag;
      if (it != upload.parts.end()) etag.digest = it->second.digest;
      if (it == upload.parts.end() || !EtagListMatches(wanted[i].second, etag.ETag())) {
        return S3ErrorReply({400, "InvalidPart", "One or more of the specified parts could not be "
                                               "found, or its entity tag did not match."}, resource);
      }
      if (i + 1 < wanted.size() && it->second.size < kMinPartBytes) {
        return S3ErrorReply({400, "EntityTooSmall", "Your proposed upload is smaller than the minimum "
                                                  "allowed object size."}, resource);
      }
      total += it->second.size;
      parts.push_back(&it->second);
    }
    if (total > ctx_->config->EffectiveMaxObjectBytes()) {
      return S3ErrorReply({400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed "
                                                "object size."}, resource);
    }
    S3ObjectHeader header;
    header.size = total;
    header.modified_us = UnixMicros();
    header.content_type = upload.content_type;
    header.parts = static_cast<uint32_t>(parts.size());
    std::vector<uint8_t> digests;
    for (const S3Service::Part* p : parts) digests.insert(digests.end(), p->digest.begin(), p->digest.end());
    header.digest = ContentDigest(std::as_bytes(std::span(digests)));
    const BlockKey block = S3ObjectKey(bucket, key);
    ReleaseLock(tenant, block);
    // The parts go straight into the object's G2 allocation; where G2 holds the name, into a value.
    std::vector<std::byte> encoded(header.encoded_size());
    header.EncodeTo(encoded);
    Result<BlockAllocation> a = ctx_->store->Allocate(tenant, block, encoded.size() + total);
    if (!a.ok() && a.status().code() != StatusCode::kAlreadyExists) {
      return S3ErrorReply(S3ErrorOf(a.status()), resource);
    }
    std::vector<std::byte> value(a.ok() ? 0 : encoded.size() + total);
    const std::span<std::byte> whole(value);
    const std::span<const std::span<std::byte>> out = a.ok() ? std::span(a->extents()) : std::span(&whole, 1);
    CopyInto(out, 0, encoded);
    size_t at = encoded.size();
    for (const S3Service::Part* p : parts) {
      CopyInto(out, at, std::span<const std::byte>(p->bytes.get(), p->size));
      at += p->size;
    }
    Status s = a.ok() ? ctx_->store->CommitReplace(std::move(*a)) : ctx_->store->Replace(tenant, block, value);
    if (!s.ok()) return S3ErrorReply(S3ErrorOf(s), resource);
    ctx_->s3->NameStored(tenant, bucket, key, header);
    return {200, {{"Content-Type", "application/xml"}},
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult "
            "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Location>" + XmlEscape(resource) +
                "</Location><Bucket>" + XmlEscape(bucket) + "</Bucket><Key>" + XmlEscape(key) +
                "</Key><ETag>" + XmlEscape(header.ETag()) + "</ETag></CompleteMultipartUploadResult>"};
  }

  S3Reply GetObject(TenantId tenant, const std::string& bucket, const std::string& key, bool head) {
    const HttpRequest& r = parser_.request();
    const std::string resource = "/" + bucket + "/" + key;
    const S3Error no_such{404, "NoSuchKey", "The specified key does not exist."};
    Result<BlockHandle> handle = ctx_->store->Get(tenant, S3ObjectKey(bucket, key));
    if (!handle.ok()) {
      if (handle.status().code() == StatusCode::kNotFound) {
        ctx_->s3->NameRemoved(tenant, bucket, key);
        if (head) return S3Reply::Head(404, {}, 0);
        return S3ErrorReply(no_such, resource);
      }
      return S3ErrorReply(S3ErrorOf(handle.status()), resource);
    }
    size_t header_bytes = 0;
    std::optional<S3ObjectHeader> header = S3ObjectHeader::Of(*handle, &header_bytes);
    if (!header) {
      return S3ErrorReply({500, "InternalError", "the value under this key is not an S3 object"}, resource);
    }
    const std::string etag = header->ETag();
    S3Reply reply;
    reply.headers = {{"ETag", etag},
                     {"Last-Modified", HttpDate(header->modified_us)},
                     {"Content-Type", header->content_type},
                     {"Accept-Ranges", "bytes"}};
    if (const std::string* match = r.Header("if-match"); match != nullptr && !EtagListMatches(*match, etag)) {
      return S3ErrorReply(kPreconditionFailed, resource);
    }
    if (const std::string* none = r.Header("if-none-match"); none != nullptr && EtagListMatches(*none, etag)) {
      reply.status = 304;
      reply.head_length = 0;
      return reply;
    }
    uint64_t offset = 0;
    uint64_t length = header->size;
    if (const std::string* range = r.Header("range"); range != nullptr) {
      std::optional<std::pair<uint64_t, uint64_t>> span = ParseS3Range(*range, header->size);
      if (!span) {
        reply = S3ErrorReply({416, "InvalidRange", "The requested range is not satisfiable"}, resource);
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

  // Unpins `block` if it is a lock, before it is deleted or replaced.
  void ReleaseLock(TenantId tenant, const BlockKey& block) {
    if (ctx_->s3->LockReleased(tenant, block)) (void)ctx_->store->Unpin(tenant, block);
  }

  S3Reply DeleteObject(TenantId tenant, const std::string& bucket, const std::string& key) {
    const BlockKey block = S3ObjectKey(bucket, key);
    ReleaseLock(tenant, block);
    Status s = ctx_->store->Delete(tenant, block);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return S3ErrorReply(S3ErrorOf(s), "/" + bucket + "/" + key);
    ctx_->s3->NameRemoved(tenant, bucket, key);
    return {204, {}, ""};
  }

  S3Reply DeleteObjects(std::span<std::byte> input, TenantId tenant, const std::string& bucket) {
    const std::string resource = "/" + bucket;
    S3Error error;
    std::optional<std::span<std::byte>> body = CheckedBody(input, &error);
    if (!body) return S3ErrorReply(error, resource);
    std::optional<S3DeleteRequest> request =
        ParseDeleteXml(std::string_view(reinterpret_cast<const char*>(body->data()), body->size()));
    if (!request) {
      return S3ErrorReply({400, "MalformedXML", "The XML you provided was not well-formed"}, resource);
    }
    const std::vector<std::string>& keys = request->keys;
    const bool quiet = request->quiet;
    if (keys.empty() || keys.size() > 1000) {
      return S3ErrorReply({400, "MalformedXML", "Delete takes 1 to 1000 keys"}, resource);
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
        const S3Error e = S3ErrorOf(s);
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
  // Whether the request's body is read whole: S3InPlacePut refused it (or was not asked yet).
  bool whole_body_ = false;
  S3Auth auth_;
  const S3Principal* principal_ = nullptr;
  uint64_t requests_ = 0;
  std::unique_ptr<S3InPlacePut> put_;  // The PUT whose body is being received in place.
  std::span<std::byte> target_;         // Where the payload's piece under way goes.
  uint64_t run_left_ = 0;               // Framed: payload bytes of the run under way.
  std::optional<S3Error> framed_error_;  // Framed: what a piece received in place was.
  PayloadTime put_time_;
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
