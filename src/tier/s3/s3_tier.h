// S3Tier: the G4 tier on any S3-compatible service (AWS S3, MinIO, Ceph RGW, s3rver...).
// docs/shared_tier.md specifies the key layout; object_format.h the object format (the same
// bytes as SharedFsTier's files).
//
// Publishing: one PUT per object, which S3 makes atomic (a reader sees the whole object or
// nothing). Where the service supports conditional writes (If-None-Match: *, probed at Open),
// concurrent writers leave exactly one object and the loser gets 412, counted as "existed".
// Elsewhere a second PUT of a key replaces the object with the same bytes (content-addressed,
// immutable): still one object, never wrong data, at the cost of the upload. With
// check_before_put a HEAD precedes each such PUT and an existing object is not uploaded
// again; two nodes that both miss on HEAD both PUT, which is the same harmless race.
//
// Metadata for ExistsMany (one parallel round of HEADs) travels as x-amz-meta-kvtier-*
// headers: format version, value bytes, session, created time and dtype.
//
// Access recency: S3 cannot touch an object cheaply, so a hit whose object (or last access
// marker) is older than touch_interval_us PUTs an empty access marker
// kvtier-g4/v1/access/<tenant>/<kk>/<key hex>; the janitor takes the later of its
// Last-Modified and the object's. A node remembers its own touches, so a hot block costs one
// small PUT per interval per node.
//
// Janitor lease: the object kvtier-g4/v1/lease/janitor (s3_janitor.cc), timed by the
// service's own clock (the Date header and Last-Modified).
//
// Every error is bounded (S3Client's timeouts and retries) and becomes a miss or a status.
//
// Thread safety: thread-safe.

#ifndef KVTIER_SRC_TIER_S3_S3_TIER_H_
#define KVTIER_SRC_TIER_S3_S3_TIER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "kvtier/env.h"
#include "src/common/mutex.h"
#include "src/services/block_codec.h"
#include "src/tier/s3/s3_client.h"
#include "src/tier/shared/shared_tier.h"
#include "src/common/worker_pool.h"

namespace kvtier {

namespace g4 {
struct SealedObject;
}  // namespace g4

struct S3TierOptions : SharedTierBaseOptions {
  s3::S3ClientOptions client;
  // Conditional create (If-None-Match: *): kAuto probes the service at Open.
  enum class ConditionalPut { kAuto, kOn, kOff };
  ConditionalPut conditional_put = ConditionalPut::kAuto;
  // Without conditional create: HEAD each object before its PUT and skip the upload when it
  // exists. Saves bandwidth where nodes often store blocks already in G4; costs a request per
  // put (the Store puts blocks after a lookup missed them, so most HEADs find nothing).
  bool check_before_put = false;
  // Objects larger than this go up as multipart uploads of multipart_part_bytes parts (the
  // last one shorter), sent in parallel; the object appears only when the upload completes,
  // and a failed upload is aborted. S3 wants parts of at least 5 MiB.
  uint64_t multipart_threshold_bytes = 32ull << 20;
  uint64_t multipart_part_bytes = 8ull << 20;
  // Threads that seal (compress, encrypt, checksum) and open objects in parallel.
  size_t codec_threads = 4;
};

class S3Tier final : public SharedTier {
 public:
  // Checks the bucket (NotFound when absent, PermissionDenied for bad credentials,
  // Unavailable when the service cannot be reached) and probes conditional writes.
  [[nodiscard]] static Result<std::unique_ptr<S3Tier>> Open(S3TierOptions options);
  ~S3Tier() override;

  std::vector<Status> PutMany(std::string_view tenant, std::span<const SharedPut> puts) override;
  std::vector<std::optional<SharedObjectInfo>> ExistsMany(
      std::string_view tenant, std::span<const BlockKey> keys) override;
  std::vector<Result<std::vector<std::byte>>> GetMany(std::string_view tenant,
                                                     std::span<const BlockKey> keys) override;
  Status Delete(std::string_view tenant, const BlockKey& key) override;
  Result<std::vector<BlockKey>> DeleteSession(std::string_view tenant,
                                              SessionId session) override;
  Result<std::vector<BlockKey>> DeleteTenant(std::string_view tenant) override;
  Status PublishNotice(std::string_view name, std::span<const std::byte> body) override;
  Result<std::vector<SharedNotice>> NoticesAfter(std::string_view after,
                                                 const NoticeFilter& skip) override;
  Status CreateRecord(std::string_view name, std::span<const std::byte> body) override;
  Result<std::vector<std::byte>> ReadRecord(std::string_view name) override;
  Result<std::vector<std::string>> ListRecords(std::string_view prefix) override;
  Status DeleteRecord(std::string_view name) override;
  Result<JanitorReport> RunJanitorOnce() override ABSL_LOCKS_EXCLUDED(janitor_mu_);
  SharedTierStats Stats() const override;

  // Whether puts use If-None-Match: * (probed or configured). False until the probe could
  // run, when the service did not answer at open.
  bool conditional_put() const { return conditional_put_.load(std::memory_order_acquire); }
  s3::S3Client* client() { return client_.get(); }

 private:

  S3Tier(S3TierOptions options, std::unique_ptr<s3::S3Client> client);
  Status ProbeConditionalPut();
  // Runs the conditional-put probe that Open could not (the service did not answer then), once
  // the service answers; a no-op otherwise, or while another thread probes.
  void ProbeIfPending();
  // Uploads `object` as `name` in parts (CreateMultipartUpload, UploadPart in parallel,
  // CompleteMultipartUpload; AbortMultipartUpload on failure). `headers` go with the create.
  // OK when stored; AlreadyExists when a conditional complete found the object there.
  Status PutMultipart(const std::string& name, const g4::SealedObject& object,
                      std::vector<std::pair<std::string, std::string>> headers);
  // Deletes `keys`: with multi-object deletes (1000 keys a request) while the service takes
  // them, else DELETEs in parallel; absent counts as done. Returns the first other error.
  Status DeleteKeys(const std::vector<std::string>& keys, uint64_t* deleted);

  // s3_janitor.cc
  Result<bool> AcquireLease() ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  bool LeaseValid() ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  // Deletes `keys` (if any) while the lease is still ours, counting into *removed.
  Status DeleteWhileLeased(const std::vector<std::string>& keys, uint64_t* removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  Result<bool> CreateLease(uint64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  void BackgroundLoop();

  const S3TierOptions options_;
  Env* const env_;
  std::unique_ptr<s3::S3Client> client_;
  std::atomic<bool> conditional_put_{false};
  // Set while the probe is owed (Open met an outage); ProbeIfPending clears it.
  std::atomic<bool> probe_pending_{false};
  std::mutex probe_mu_;
  // Cleared, for good, the first time the service refuses a multi-object delete.
  std::atomic<bool> batch_delete_{true};
  mutable SharedTierCounters counters_;
  WorkerPool pool_;

  Mutex touch_mu_;
  // Last access marker this node wrote, by object key; cleared when it grows past a bound.
  absl::flat_hash_map<std::string, uint64_t> touched_ ABSL_GUARDED_BY(touch_mu_);

  Mutex janitor_mu_;
  uint64_t lease_generation_ ABSL_GUARDED_BY(janitor_mu_) = 0;  // 0 = not held.
  uint64_t lease_renewed_local_us_ ABSL_GUARDED_BY(janitor_mu_) = 0;

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool bg_stop_ = false;
  std::thread bg_thread_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_TIER_S3_S3_TIER_H_
