// An S3 PutObject whose body is received straight into its G2 allocation instead of through
// the connection's input buffer (ProtocolHandler's kReceivePayload), for a body whose length
// is known: an unconditional PUT of a name not stored here before (every KV block), sent with
// Content-Length and no aws-chunked framing (boto3's and the Rust AWS SDK's over plain HTTP, and
// every client that sends a checksum in a header), or *framed*: aws-chunked with unsigned chunks
// and a trailing checksum (STREAMING-UNSIGNED-PAYLOAD-TRAILER, x-amz-decoded-content-length:
// aws-sdk-cpp's, NIXL's), in a chunked or Content-Length HTTP body. A framed body's framing is
// read through the input buffer in small steps and its payload between them in place
// (TakeBody, run()). An UploadPart of such a body is received straight into the part's buffer
// the same way. Each piece is folded into the body's checks (its
// checksums, the signed SHA-256, the ETag's digest) as soon as it is in, while it is in cache;
// the object or part is stored only once every check holds (docs/protocol.md, "How a PUT's body
// is stored").

#ifndef KVTIER_SERVER_S3_PUT_IN_PLACE_H_
#define KVTIER_SERVER_S3_PUT_IN_PLACE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/store.h"
#include "src/server/aws_chunked.h"
#include "src/server/handler.h"
#include "src/server/http_request.h"
#include "src/server/s3_auth.h"
#include "src/server/s3_body.h"
#include "src/server/s3_protocol.h"
#include "src/server/s3_service.h"

namespace kvtier::server {

// Thread safety: belongs to one connection's handler.
class S3InPlacePut {
 public:
  // The put of `request` (whose head is parsed, signed by `auth`, from a principal of `tenant`)
  // into a fresh G2 allocation or part buffer, or null where it must be read whole and take the
  // general path: another operation, a conditional or framed body, a body under kMinBytes, a
  // name stored before, a bucket or upload that does not exist, no room in G2, anything
  // PutObject or UploadPart refuses.
  static std::unique_ptr<S3InPlacePut> Start(const ServerContext* ctx, const HttpRequest& request,
                                             const S3Auth& auth, TenantId tenant,
                                             std::string content_type);
  S3InPlacePut(const S3InPlacePut&) = delete;
  S3InPlacePut& operator=(const S3InPlacePut&) = delete;

  // Where the next body bytes go: a piece of the allocation or the part, at most `limit` bytes.
  // REQUIRES: !done().
  std::span<std::byte> Target(uint64_t limit = UINT64_MAX);
  // The span Target gave last is filled: its bytes are checked.
  void Filled();
  bool done() const { return received_ == body_.size; }

  bool framed() const { return framing_.has_value(); }
  // Framed: reads body bytes where HttpRequestParser located them (in the input, or in the span
  // Target gave last): the framing into its state, the payload into place, copied unless it is
  // there already. IncompleteBody when the framing is malformed or the payload longer than
  // x-amz-decoded-content-length.
  std::optional<S3Error> TakeBody(std::span<const std::span<std::byte>> pieces);
  // Framed: payload bytes that come next with no aws-chunked framing before them.
  uint64_t run() const { return framing_->run(); }
  // Framed: the whole aws-chunked body, trailers included, has been read.
  bool framing_done() const { return framing_->done(); }
  // Framed: the error for payload past x-amz-decoded-content-length.
  S3Error LongerThanDeclared() const;

  // REQUIRES: done() (framed: framing_done()). Publishes the object, or adds the part, when the
  // body passed every check (otherwise the allocation is given back: nothing was visible). The
  // answer to `request` (signed as `auth` says).
  S3Reply Finish(const HttpRequest& request, const S3Auth& auth);

  uint64_t body_bytes() const { return body_.size; }
  uint64_t left() const { return body_.size - received_; }

  // Smaller bodies are cheaper to take through the input buffer.
  static constexpr uint64_t kMinBytes = 64 << 10;

 private:
  S3InPlacePut(const ServerContext* ctx, TenantId tenant, std::string bucket, std::string key,
               S3Body body);

  const ServerContext* const ctx_;
  const TenantId tenant_;
  const std::string bucket_;
  const std::string key_;
  S3Body body_;  // No pieces: what the bytes must match (framed: the trailer's value comes last).
  std::optional<AwsChunkedStream> framing_;  // A framed body's.
  S3ObjectHeader header_;
  std::optional<BlockAllocation> allocation_;  // PutObject's: the header's bytes, then the body's.
  S3Service::Part part_;                       // UploadPart's, without its digest...
  std::string upload_;                         // ...for this upload...
  uint32_t part_number_ = 0;                   // ...under this number.
  std::vector<std::span<std::byte>> extents_;  // Where the body goes: the allocation or the part.
  S3BodyChecks checks_;
  uint64_t received_ = 0;   // Body bytes in.
  size_t extent_ = 0;       // The piece of extents_ the next bytes go to...
  size_t extent_at_ = 0;    // ...and where in it.
  std::span<std::byte> target_;
};

// PutObject's answer to `request` once the Store said `s` about the object `header` describes:
// its ETag and the checksums the client sent (the name recorded), or the S3 error.
S3Reply PutObjectReply(const ServerContext* ctx, const HttpRequest& request, const Status& s,
                       TenantId tenant, const std::string& bucket, const std::string& key,
                       const S3ObjectHeader& header);

// UploadPart's answer to `request` once `part` (checked, its digest taken) is added as part
// `number` of `upload`: its ETag and the checksums the client sent, or the S3 error.
S3Reply UploadPartReply(const ServerContext* ctx, const HttpRequest& request, TenantId tenant,
                        const std::string& upload, const std::string& bucket,
                        const std::string& key, uint32_t number, S3Service::Part part);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_S3_PUT_IN_PLACE_H_
