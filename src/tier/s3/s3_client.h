// S3Client: a small S3 REST client on libcurl for the S3 tier. Requests are SigV4-signed
// (sigv4.h) and run in parallel batches on a curl multi handle; connections are kept alive
// and reused across batches (each multi handle keeps its own connection cache, and handles
// are pooled). Path-style (http://host/bucket/key) and virtual-host style
// (http://bucket.host/key) addressing.
//
// Every request is bounded: a connect timeout, a whole-request timeout, and at most
// max_retries retries (with exponential backoff and jitter) of what may succeed later
// (transport errors, timeouts, HTTP 500/502/503/504/429). So a slow or gone service yields an
// error after a bounded time, never a hang.
//
// Thread safety: thread-safe; concurrent Execute() calls use separate multi handles.

#ifndef KVTIER_SRC_TIER_S3_S3_CLIENT_H_
#define KVTIER_SRC_TIER_S3_S3_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "src/common/mutex.h"
#include "src/common/sigv4.h"

namespace kvtier::s3 {

struct S3ClientOptions {
  // "http://127.0.0.1:4568" or "https://s3.eu-west-1.amazonaws.com"; no path.
  std::string endpoint;
  std::string bucket;  // 3 to 63 of [a-z0-9.-].
  // Empty = $AWS_REGION, else $AWS_DEFAULT_REGION, else "us-east-1".
  std::string region;
  // true: http://host/bucket/key (MinIO, Ceph RGW, s3rver...). false: virtual-host style,
  // http://bucket.host/key (AWS's default; needs DNS for the bucket's name).
  bool path_style = true;
  // Empty = $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN.
  Credentials credentials;
  // Hash every body into x-amz-content-sha256. false sends UNSIGNED-PAYLOAD (saves a SHA-256
  // pass per byte; appropriate over TLS, where the transport already protects the body).
  bool sign_payload = true;
  // Transfers in flight per batch (and connections kept per batch handle).
  uint32_t max_parallel = 32;
  uint32_t connect_timeout_ms = 3000;
  // Whole request, including the body; a 2 MiB block over a slow link needs some seconds.
  uint32_t request_timeout_ms = 30000;
  // Retries of a retryable failure; the first retry waits retry_base_ms, doubling each time
  // (with jitter), capped at 2 s.
  uint32_t max_retries = 3;
  uint32_t retry_base_ms = 50;
  // Clock for request dates; not owned; nullptr = Env::Default().
  Env* env = nullptr;
};

struct S3Request {
  std::string method;  // GET, PUT, HEAD, DELETE, POST
  std::string key;     // Object key; empty = the bucket itself.
  std::vector<std::pair<std::string, std::string>> query;    // Not encoded.
  std::vector<std::pair<std::string, std::string>> headers;  // Extra headers to sign and send.
  // The body is `body` followed by `body_tail` (so that a header and a payload held apart
  // need not be copied together). Both must stay valid during Execute().
  std::span<const std::byte> body;
  std::span<const std::byte> body_tail;
  // The first head_bytes of a successful (2xx) response body go to S3Response::head and the
  // rest to S3Response::body, so that a fixed-size header and the payload after it land in
  // separate buffers without a copy.
  size_t head_bytes = 0;
  // Checksum the body (after head_bytes) as it arrives, into S3Response::body_checksum: each
  // piece is hashed while still in cache, instead of the whole body again afterwards.
  bool checksum_body = false;
};

struct S3Response {
  // OK when an HTTP response arrived (whatever its code); otherwise the transport error after
  // the last retry: DeadlineExceeded (timeout) or Unavailable (connect, reset, DNS...).
  Status transport;
  long http_status = 0;
  std::map<std::string, std::string> headers;  // Names lower-cased.
  std::vector<std::byte> head;  // See S3Request::head_bytes.
  std::vector<std::byte> body;
  // Checksum64 of `body`, when the request asked for it and the response is 2xx.
  std::optional<uint64_t> body_checksum;
  uint32_t attempts = 0;

  bool ok() const { return transport.ok() && http_status >= 200 && http_status < 300; }
  // A Status for a non-2xx outcome: 404 NotFound, 403 PermissionDenied, 412 AlreadyExists
  // (precondition failed), 507/ EntityTooLarge ResourceExhausted, 400 InvalidArgument, 5xx
  // Unavailable; the message carries the S3 error code from the body when there is one.
  Status ToStatus(std::string_view what) const;
};

class S3Client {
 public:
  // InvalidArgument for a bad endpoint or bucket, or missing credentials.
  [[nodiscard]] static Result<std::unique_ptr<S3Client>> Create(S3ClientOptions options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // Called on the calling thread as each request of Execute() completes, with its index, the
  // request (the original or a follow-up) and its response, which it may consume (move the
  // body out). It may return a follow-up request for the same index, started at once, whose
  // response replaces the previous one: a chain such as HEAD then PUT runs without waiting for
  // the other indexes. A chain ended by a retryable failure is retried from its original
  // request. The follow-up's body must stay valid during Execute().
  using OnComplete = std::function<std::optional<S3Request>(size_t index, const S3Request& request,
                                                            S3Response& response)>;

  // Runs all requests in parallel (at most max_parallel at once); one response per request,
  // in order (the last of its chain). Returns when every request has a final outcome.
  std::vector<S3Response> Execute(std::span<const S3Request> requests,
                                  const OnComplete& on_complete = nullptr);
  S3Response ExecuteOne(const S3Request& request);

  // Lists every key under `prefix`, in key order (ListObjectsV2, following continuation
  // tokens).
  struct ListedObject {
    std::string key;
    uint64_t size = 0;
    uint64_t last_modified_us = 0;
  };
  // With `start_after`, only keys that sort after it.
  [[nodiscard]] Result<std::vector<ListedObject>> List(const std::string& prefix,
                                                       const std::string& start_after = "");

  // Deletes `keys` with multi-object deletes (POST ?delete, up to 1000 keys each, requests in
  // parallel). One status per key: OK when deleted or absent. Unimplemented for every key
  // when the service has no multi-object delete (some S3-compatible stores do not).
  std::vector<Status> DeleteObjects(std::span<const std::string> keys);

  const S3ClientOptions& options() const { return options_; }

 private:
  struct Handles;
  explicit S3Client(S3ClientOptions options);
  std::unique_ptr<Handles> TakeHandles() ABSL_LOCKS_EXCLUDED(mu_);
  void ReturnHandles(std::unique_ptr<Handles> handles) ABSL_LOCKS_EXCLUDED(mu_);

  const S3ClientOptions options_;
  std::string scheme_;     // "http" or "https"
  std::string authority_;  // host[:port] of the endpoint
  Mutex mu_;
  std::vector<std::unique_ptr<Handles>> idle_ ABSL_GUARDED_BY(mu_);
};

// Parses an HTTP date ("Sun, 06 Nov 1994 08:49:37 GMT") or an ISO 8601 one
// ("2009-10-12T17:50:30.000Z") into microseconds since the epoch; 0 when malformed.
uint64_t ParseHttpDate(std::string_view date);

}  // namespace kvtier::s3

#endif  // KVTIER_SRC_TIER_S3_S3_CLIENT_H_
