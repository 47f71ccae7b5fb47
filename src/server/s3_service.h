// The state behind kvtierd's S3 endpoint that the Store does not hold: which buckets each
// tenant has (kept in <data_dir>/s3_buckets.json, so they outlive restarts) and the names of
// the objects put through this daemon (for ListObjectsV2; journaled in <data_dir>/s3_names.log,
// so that listings outlive restarts too). Objects themselves are Store values
// (S3ObjectHeader + bytes) under a key derived from tenant, bucket and object name, so they
// share G2/G3/G4, eviction, retention and deletion with every other block.
//
// Thread safety: every method may be called from any event loop.

#ifndef KVTIER_SERVER_S3_SERVICE_H_
#define KVTIER_SERVER_S3_SERVICE_H_

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/common/mutex.h"
#include "src/server/config.h"
#include "src/server/s3_auth.h"

namespace kvtier::server {

// What an object's value starts with:
//   "KVS3" | u8 version (1) | u8 content-type length | u16 header length | u64 body length
//   | u64 last-modified (µs since the epoch) | 16-byte digest | u32 parts | content type
// all little-endian, then the body. The digest (ContentDigest) is the body's, or for an object
// put by a multipart upload of `parts` parts, that of its parts' digests; the ETag is its hex
// ("<hex>-<parts>" after a multipart upload, as S3 writes it).
struct S3ObjectHeader {
  static constexpr size_t kFixedBytes = 44;
  uint64_t size = 0;
  uint64_t modified_us = 0;
  std::array<uint8_t, 16> digest{};
  uint32_t parts = 0;  // 0: put whole.
  std::string content_type;

  size_t encoded_size() const { return kFixedBytes + content_type.size(); }
  // REQUIRES: out.size() >= encoded_size(), content_type.size() <= 255.
  void EncodeTo(std::span<std::byte> out) const;
  // The header of a value of `value_size` bytes that starts with `prefix` (at least its
  // header's bytes); nullopt when it is no valid header (a value that is no S3 object).
  static std::optional<S3ObjectHeader> Decode(std::span<const std::byte> prefix, size_t value_size,
                                              size_t* header_bytes);
  // The header of the value `handle` holds (it may span extents); nullopt as Decode.
  static std::optional<S3ObjectHeader> Of(const BlockHandle& handle, size_t* header_bytes);
  std::string ETag() const;  // "\"<32 hex digits>\"", or "\"<32 hex digits>-<parts>\"".
};

// What an ETag is made of: XXH3-128 of `data` (libxxhash), big-endian. Not the MD5 that AWS
// returns for a plain PUT: MD5 would cost a PUT of 2 MiB 3 ms of a core, and no client of a KV
// cache reads an MD5 out of an ETag; a client that wants its bytes checked sends Content-MD5 or
// a flexible checksum, which is verified. A PUT takes the same digest as its body goes by
// (S3BodyChecks, through Digest128Stream).
std::array<uint8_t, 16> ContentDigest(std::span<const std::byte> data);

// The Store key of object `key` in `bucket`.
BlockKey S3ObjectKey(std::string_view bucket, std::string_view key);
// S3's bucket naming rules: 3 to 63 of a-z 0-9 . -, starting and ending with a letter or digit.
bool ValidBucketName(std::string_view name);

class S3Service {
 public:
  // Loads the bucket list and the object names from `config`'s data directory. InvalidArgument
  // when the bucket list is corrupt; the names journal is read up to its first damaged record
  // (a write cut short by a crash), and rewritten whole.
  static Result<std::unique_ptr<S3Service>> Open(const ServerConfig& config, const Store& store);

  const S3Keys& keys() const { return keys_; }
  // The tenant unsigned requests act as; nullptr unless [s3] allow_anonymous.
  const S3Principal* anonymous() const { return anonymous_ ? &*anonymous_ : nullptr; }

  struct Bucket {
    std::string name;
    uint64_t created_us = 0;
  };
  // OK when created or already this tenant's. Unavailable when the list cannot be saved.
  Status CreateBucket(TenantId tenant, std::string_view name, uint64_t now_us);
  bool HasBucket(TenantId tenant, std::string_view name) const;
  std::vector<Bucket> ListBuckets(TenantId tenant) const;
  // NotFound when it does not exist; FailedPrecondition while it lists objects.
  Status DeleteBucket(TenantId tenant, std::string_view name);

  // Object names put here, with their headers. Each is appended to the names journal (written,
  // not synced: a name stored just before a power loss may be missing from later listings,
  // never a name's object from the Store).
  void NameStored(TenantId tenant, std::string_view bucket, std::string_view key,
                  const S3ObjectHeader& header);
  void NameRemoved(TenantId tenant, std::string_view bucket, std::string_view key);
  // The header last stored under that name here, for a PUT of the same bytes to keep it.
  std::optional<S3ObjectHeader> Named(TenantId tenant, std::string_view bucket,
                                      std::string_view key) const;
  // Multipart uploads. Their parts are held here until the upload completes (one Store value
  // of them all) or is aborted; an upload is never visible before it completes.
  struct Part {
    // `size` bytes, left uninitialized until the body is copied in; null in ListParts' copies.
    std::unique_ptr<std::byte[]> bytes;
    uint64_t size = 0;
    std::array<uint8_t, 16> digest{};  // ContentDigest of the part: its ETag.
    uint64_t modified_us = 0;
  };
  struct Upload {
    TenantId tenant;
    std::string bucket;
    std::string key;
    std::string content_type;
    uint64_t created_us = 0;
    uint64_t touched_us = 0;
    bool completing = false;  // Complete under way: no part may change.
    std::map<uint32_t, Part> parts;
  };
  // A new upload's id (32 hex digits).
  std::string StartUpload(TenantId tenant, std::string_view bucket, std::string_view key,
                          std::string content_type, uint64_t now_us);
  // Stores (or replaces) part `number` of the upload: `part.size` bytes at `part.bytes`.
  // NotFound for an upload that is not this tenant's object's (NoSuchUpload); ResourceExhausted
  // over [s3] max_upload_bytes; FailedPrecondition while it completes.
  Status AddPart(TenantId tenant, std::string_view upload_id, std::string_view bucket,
                 std::string_view key, uint32_t number, Part part);
  // Whether AddPart would find the upload (this tenant's object's, not completing).
  bool TakesParts(TenantId tenant, std::string_view upload_id, std::string_view bucket,
                  std::string_view key) const;
  // The upload, marked completing so that its parts no longer change; NotFound as AddPart.
  // The caller then calls EndUpload (completed) or Resume (not).
  Result<std::shared_ptr<Upload>> BeginComplete(TenantId tenant, std::string_view upload_id,
                                                std::string_view bucket, std::string_view key);
  void ResumeUpload(const std::shared_ptr<Upload>& upload);
  // Forgets the upload and frees its parts (completed or aborted). NotFound as AddPart.
  Status EndUpload(TenantId tenant, std::string_view upload_id, std::string_view bucket,
                   std::string_view key);
  // The upload's parts' numbers, sizes, MD5s and times (not their bytes); NotFound as AddPart.
  Result<std::vector<std::pair<uint32_t, Part>>> ListParts(TenantId tenant, std::string_view upload_id,
                                                           std::string_view bucket,
                                                           std::string_view key) const;

  // Objects created with If-None-Match: * are locks: the handler pins them in the Store, and
  // these remember them so that they are unpinned once deleted, replaced or held lock_seconds.
  void LockCreated(TenantId tenant, const BlockKey& key, uint64_t now_us);
  // True when `key` was a pinned lock (now forgotten): the caller unpins it.
  bool LockReleased(TenantId tenant, const BlockKey& key);
  // The locks pinned for lock_seconds or longer, forgotten: the caller unpins them.
  std::vector<std::pair<TenantId, BlockKey>> ExpiredLocks(uint64_t now_us);

  // Held while a conditional create checks that its key is absent and stores it.
  Mutex* conditional_mutex() const ABSL_LOCK_RETURNED(conditional_mu_) { return &conditional_mu_; }

  // Up to `max` names after `start_after` that start with `prefix`, in order.
  std::vector<std::pair<std::string, S3ObjectHeader>> ListNames(TenantId tenant,
                                                               std::string_view bucket,
                                                               std::string_view prefix,
                                                               std::string_view start_after,
                                                               size_t max) const;

 private:
  S3Service() = default;
  Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The names journal: replayed by Open, appended to by NameStored and NameRemoved, and
  // rewritten with only the live names (at Open, and once it holds twice as many records).
  void ReplayNamesLocked(const Store& store) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JournalLocked(uint8_t op, TenantId tenant, std::string_view bucket, std::string_view key,
                     const S3ObjectHeader* header) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RewriteNamesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The upload `id` if it is this tenant's object's, else nullptr.
  Upload* FindUploadLocked(TenantId tenant, std::string_view id, std::string_view bucket,
                           std::string_view key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Aborts uploads idle longer than the TTL.
  void ExpireUploadsLocked(uint64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct BucketState {
    uint64_t created_us = 0;
    std::map<std::string, S3ObjectHeader, std::less<>> objects;
  };
  using TenantBuckets = std::map<std::string, BucketState, std::less<>>;

  std::string path_;
  std::string names_path_;
  std::vector<std::string> tenant_names_;  // By TenantId value.
  S3Keys keys_;
  std::optional<S3Principal> anonymous_;
  mutable Mutex mu_;
  mutable Mutex conditional_mu_;
  std::map<uint32_t, TenantBuckets> buckets_ ABSL_GUARDED_BY(mu_);
  // Buckets of tenants no longer configured: kept in the file for when they come back.
  std::vector<nlohmann::json> orphans_ ABSL_GUARDED_BY(mu_);
  // The names journal's file, open for appending (-1 when it cannot be); closed with the
  // service.
  struct JournalFd {
    int fd = -1;
    JournalFd() = default;
    JournalFd(const JournalFd&) = delete;
    JournalFd& operator=(const JournalFd&) = delete;
    ~JournalFd() {
      if (fd >= 0) ::close(fd);
    }
  };
  JournalFd names_ ABSL_GUARDED_BY(mu_);
  uint64_t names_records_ ABSL_GUARDED_BY(mu_) = 0;  // Records in the journal.
  uint64_t names_live_ ABSL_GUARDED_BY(mu_) = 0;  // Names held (of configured tenants).
  bool names_warned_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t max_upload_bytes_ = 0;
  uint64_t upload_ttl_us_ = 0;
  std::map<std::string, std::shared_ptr<Upload>, std::less<>> uploads_ ABSL_GUARDED_BY(mu_);
  uint64_t upload_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  struct Lock {
    TenantId tenant;
    BlockKey key;
    uint64_t created_us = 0;
  };
  uint64_t lock_us_ = 0;
  std::vector<Lock> locks_ ABSL_GUARDED_BY(mu_);  // Oldest first; few (locks, not data).
  // locks_.front().created_us, or none held: UINT64_MAX. Read without mu_ by ExpiredLocks,
  // which every S3 request calls, so that a request with no lock due takes no lock itself.
  std::atomic<uint64_t> oldest_lock_us_{UINT64_MAX};
  void NoteOldestLockLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_S3_SERVICE_H_
