#include "src/server/s3_put_in_place.h"

#include <strings.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace kvtier::server {
namespace {

// Body bytes checked at a time: read into the allocation, then checked while in cache.
constexpr size_t kPieceBytes = 256 << 10;

}  // namespace

std::unique_ptr<S3InPlacePut> S3InPlacePut::Start(const ServerContext* ctx,
                                                  const HttpRequest& request, const S3Auth& auth,
                                                  TenantId tenant, std::string content_type) {
  const uint64_t max_bytes = ctx->config->EffectiveMaxObjectBytes();
  const std::string* encoding = request.Header("content-encoding");
  const bool framed = auth.payload == S3Payload::kStreamingUnsignedTrailer &&
                      (encoding == nullptr || strcasecmp(encoding->c_str(), "aws-chunked") == 0);
  const std::optional<uint64_t> length =
      framed ? DecodedLength(request, max_bytes) : request.content_length;
  if (request.method != "PUT" || (request.chunked && !framed) || !length || *length < kMinBytes ||
      *length > max_bytes || !request.keep_alive ||
      (!framed && auth.payload != S3Payload::kUnsigned && auth.payload != S3Payload::kSha256)) {
    return nullptr;
  }
  // A PutObject has no query but the operation's name (the Rust AWS SDK's, Dynamo KVBM's, says
  // it); an UploadPart has its upload and part number.
  const std::optional<std::string> upload = QueryValue(auth, "uploadId");
  std::optional<uint32_t> part_number;
  for (const auto& [name, value] : auth.query) {
    if (name == "x-id" && value == (upload ? "UploadPart" : "PutObject")) continue;
    if (upload && (name == "uploadId" || (name == "partNumber" && (part_number = ParsePartNumber(value))))) {
      continue;
    }
    return nullptr;
  }
  if (upload && !part_number) return nullptr;
  for (const char* name : {"if-match", "if-none-match", "x-amz-copy-source"}) {
    if (request.Header(name) != nullptr) return nullptr;
  }
  if (!framed && (encoding != nullptr || request.Header("x-amz-trailer") != nullptr)) return nullptr;
  std::optional<S3Path> path = SplitS3Path(request.path);
  if (!path || path->key.empty() || path->key.size() > kMaxS3KeyBytes ||
      !ValidBucketName(path->bucket) || !ctx->s3->HasBucket(tenant, path->bucket) ||
      (upload ? !ctx->s3->TakesParts(tenant, *upload, path->bucket, path->key)
              : ctx->s3->Named(tenant, path->bucket, path->key).has_value())) {
    return nullptr;
  }
  S3Body body;
  // A refusal is answered from the whole body, as before. A framed body's trailing checksum is
  // expected from the start (to be checked as the bytes come), its value known at the end.
  std::vector<std::pair<std::string, std::string>> trailer;
  if (const std::string* t = request.Header("x-amz-trailer"); t != nullptr) trailer.emplace_back(*t, "");
  if (framed ? ExpectChecks(request, auth, trailer, &body).has_value()
             : DecodeS3Body(request, {}, auth, &body).has_value()) {
    return nullptr;
  }
  body.size = *length;
  std::unique_ptr<S3InPlacePut> put(
      new S3InPlacePut(ctx, tenant, std::move(path->bucket), std::move(path->key), std::move(body)));
  if (framed) put->framing_.emplace();
  if (upload) {
    put->upload_ = *upload;
    put->part_number_ = *part_number;
    put->part_.size = *length;
    put->part_.bytes = std::make_unique_for_overwrite<std::byte[]>(*length);
    put->extents_ = {std::span(put->part_.bytes.get(), *length)};
    return put;
  }
  put->header_.size = *length;
  put->header_.content_type = std::move(content_type);
  put->header_.modified_us = UnixMicros();
  Result<BlockAllocation> a = ctx->store->Allocate(
      tenant, S3ObjectKey(put->bucket_, put->key_), put->header_.encoded_size() + *length);
  if (!a.ok()) return nullptr;
  put->allocation_ = std::move(a).value();
  put->extents_ = put->allocation_->extents();
  put->extent_at_ = put->header_.encoded_size();
  return put;
}

S3InPlacePut::S3InPlacePut(const ServerContext* ctx, TenantId tenant, std::string bucket,
                           std::string key, S3Body body)
    : ctx_(ctx),
      tenant_(tenant),
      bucket_(std::move(bucket)),
      key_(std::move(key)),
      body_(std::move(body)),
      checks_(body_, /*digest=*/true) {}

std::span<std::byte> S3InPlacePut::Target(uint64_t limit) {
  while (extent_at_ == extents_[extent_].size()) {
    ++extent_;
    extent_at_ = 0;
  }
  const uint64_t n = std::min<uint64_t>(
      {kPieceBytes, extents_[extent_].size() - extent_at_, body_.size - received_, limit});
  target_ = extents_[extent_].subspan(extent_at_, static_cast<size_t>(n));
  return target_;
}

void S3InPlacePut::Filled() {
  checks_.Update(target_);
  received_ += target_.size();
  extent_at_ += target_.size();
}

std::optional<S3Error> S3InPlacePut::TakeBody(std::span<const std::span<std::byte>> pieces) {
  for (std::span<std::byte> piece : pieces) {
    while (!piece.empty()) {
      AwsChunkedStream::Step step;
      if (std::optional<S3Error> e = framing_->Next(piece, &step)) return e;
      piece = piece.subspan(step.consumed);
      for (std::span<std::byte> data = step.data; !data.empty();) {
        if (done()) return LongerThanDeclared();
        const std::span<std::byte> to = Target(data.size());
        if (to.data() != data.data()) std::memcpy(to.data(), data.data(), to.size());
        Filled();
        data = data.subspan(to.size());
      }
    }
  }
  return std::nullopt;
}

S3Error S3InPlacePut::LongerThanDeclared() const {
  return S3Error{400, "IncompleteBody", "the body holds more than x-amz-decoded-content-length: " +
                                            std::to_string(body_.size) + " bytes"};
}

S3Reply S3InPlacePut::Finish(const HttpRequest& request, const S3Auth& auth) {
  const std::string resource = "/" + bucket_ + "/" + key_;
  if (framing_) {
    if (!done()) {
      return S3ErrorReply({400, "IncompleteBody", "x-amz-decoded-content-length is " +
                                                      std::to_string(body_.size) + ", the body " +
                                                      std::to_string(received_) + " bytes"},
                          resource);
    }
    // The checksums the trailers carry, where Start expected them (x-amz-trailer's).
    S3Body sent;
    if (std::optional<S3Error> e = ExpectChecks(request, auth, framing_->trailers(), &sent)) {
      return S3ErrorReply(*e, resource);
    }
    if (sent.expected.size() != body_.expected.size()) {
      return S3ErrorReply({400, "InvalidRequest", "the body's trailers carry a checksum that "
                                                  "x-amz-trailer did not announce"},
                          resource);
    }
    body_.expected = std::move(sent.expected);
  }
  if (std::optional<S3Error> e = checks_.Finish()) return S3ErrorReply(*e, resource);
  if (!ctx_->s3->HasBucket(tenant_, bucket_)) {  // Deleted while the body came.
    return S3ErrorReply({404, "NoSuchBucket", "The specified bucket does not exist"}, resource);
  }
  if (!allocation_) {
    part_.digest = checks_.digest();
    return UploadPartReply(ctx_, request, tenant_, upload_, bucket_, key_, part_number_, std::move(part_));
  }
  header_.digest = checks_.digest();
  std::vector<std::byte> encoded(header_.encoded_size());
  header_.EncodeTo(encoded);
  CopyInto(extents_, 0, encoded);
  return PutObjectReply(ctx_, request, ctx_->store->CommitReplace(std::move(*allocation_)), tenant_,
                        bucket_, key_, header_);
}

S3Reply PutObjectReply(const ServerContext* ctx, const HttpRequest& request, const Status& s,
                       TenantId tenant, const std::string& bucket, const std::string& key,
                       const S3ObjectHeader& header) {
  if (!s.ok()) {
    S3Error e = S3ErrorOf(s);
    if (s.code() == StatusCode::kInvalidArgument) e.code = "EntityTooLarge";
    return S3ErrorReply(e, "/" + bucket + "/" + key);
  }
  ctx->s3->NameStored(tenant, bucket, key, header);
  return StoredReply(request, header.ETag());
}

S3Reply UploadPartReply(const ServerContext* ctx, const HttpRequest& request, TenantId tenant,
                        const std::string& upload, const std::string& bucket,
                        const std::string& key, uint32_t number, S3Service::Part part) {
  S3ObjectHeader etag;
  etag.digest = part.digest;
  part.modified_us = UnixMicros();
  if (Status s = ctx->s3->AddPart(tenant, upload, bucket, key, number, std::move(part)); !s.ok()) {
    return S3ErrorReply(S3UploadError(s), "/" + bucket + "/" + key);
  }
  return StoredReply(request, etag.ETag());
}

}  // namespace kvtier::server
