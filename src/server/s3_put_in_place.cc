#include "src/server/s3_put_in_place.h"

#include <algorithm>
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
  const std::optional<uint64_t>& length = request.content_length;
  if (request.method != "PUT" || request.chunked || !length || *length < kMinBytes ||
      *length > ctx->config->EffectiveMaxObjectBytes() || !request.keep_alive ||
      // The Rust AWS SDK's (Dynamo KVBM's) names the operation in the query.
      (!request.query.empty() && request.query != "x-id=PutObject") ||
      (auth.payload != S3Payload::kUnsigned && auth.payload != S3Payload::kSha256)) {
    return nullptr;
  }
  for (const char* name :
       {"content-encoding", "x-amz-trailer", "if-match", "if-none-match", "x-amz-copy-source"}) {
    if (request.Header(name) != nullptr) return nullptr;
  }
  std::optional<S3Path> path = SplitS3Path(request.path);
  if (!path || path->key.empty() || path->key.size() > kMaxS3KeyBytes ||
      !ValidBucketName(path->bucket) || !ctx->s3->HasBucket(tenant, path->bucket) ||
      ctx->s3->Named(tenant, path->bucket, path->key)) {
    return nullptr;
  }
  S3Body body;
  // A refusal is answered from the whole body, as before.
  if (DecodeS3Body(request, {}, auth, &body)) return nullptr;
  body.size = *length;
  S3ObjectHeader header;
  header.size = body.size;
  header.content_type = std::move(content_type);
  header.modified_us = UnixMicros();
  Result<BlockAllocation> a = ctx->store->Allocate(
      tenant, S3ObjectKey(path->bucket, path->key), header.encoded_size() + body.size);
  if (!a.ok()) return nullptr;
  return std::unique_ptr<S3InPlacePut>(
      new S3InPlacePut(ctx, tenant, std::move(path->bucket), std::move(path->key),
                       std::move(body), std::move(header), std::move(a).value()));
}

S3InPlacePut::S3InPlacePut(const ServerContext* ctx, TenantId tenant, std::string bucket,
                           std::string key, S3Body body, S3ObjectHeader header,
                           BlockAllocation allocation)
    : ctx_(ctx),
      tenant_(tenant),
      bucket_(std::move(bucket)),
      key_(std::move(key)),
      body_(std::move(body)),
      header_(std::move(header)),
      allocation_(std::move(allocation)),
      checks_(body_, /*digest=*/true),
      extent_at_(header_.encoded_size()) {}

std::span<std::byte> S3InPlacePut::Target() {
  const std::vector<std::span<std::byte>>& extents = allocation_.extents();
  while (extent_at_ == extents[extent_].size()) {
    ++extent_;
    extent_at_ = 0;
  }
  const uint64_t n = std::min<uint64_t>(
      {kPieceBytes, extents[extent_].size() - extent_at_, body_.size - received_});
  target_ = extents[extent_].subspan(extent_at_, static_cast<size_t>(n));
  return target_;
}

void S3InPlacePut::Filled() {
  checks_.Update(target_);
  received_ += target_.size();
  extent_at_ += target_.size();
}

S3Reply S3InPlacePut::Finish(const HttpRequest& request) {
  const std::string resource = "/" + bucket_ + "/" + key_;
  if (std::optional<S3Error> e = checks_.Finish()) return S3ErrorReply(*e, resource);
  if (!ctx_->s3->HasBucket(tenant_, bucket_)) {  // Deleted while the body came.
    return S3ErrorReply({404, "NoSuchBucket", "The specified bucket does not exist"}, resource);
  }
  header_.digest = checks_.digest();
  std::vector<std::byte> encoded(header_.encoded_size());
  header_.EncodeTo(encoded);
  CopyInto(allocation_.extents(), 0, encoded);
  return PutObjectReply(ctx_, request, ctx_->store->CommitReplace(std::move(allocation_)), tenant_,
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

}  // namespace kvtier::server
