// SharedFsTier: the G4 tier on a POSIX shared file system that the cluster already runs (NFS,
// Lustre, CephFS, 3FS, VAST...), mounted at the same or another path on every node.
// docs/shared_tier.md specifies the layout; object_format.h the object format.
//
// Publishing: an object is written whole to a temp file under <root>/kvtier-g4/v1/tmp/,
// fsynced, then link(2)ed to its final name (falling back to rename(2) where the file system
// has no hard links), and the temp name removed. Readers therefore see a whole object or
// nothing, and of concurrent writers of one block exactly one file survives. A writer killed
// mid-write leaves only a temp file, which the janitor removes after temp_grace_us.
//
// Access recency is the object's mtime: a hit refreshes it (utimensat, the file system's own
// clock) only when it is older than touch_interval_us, so a hot block costs one metadata
// write per interval per node, not one per read.
//
// The janitor lease is the file <root>/kvtier-g4/v1/lease/janitor (shared_fs_lease.cc).
//
// Blocking: every call is bounded by the file system's own timeouts; a hard-mounted NFS
// server that is gone blocks the calling threads until it returns (mount G4 with timeouts,
// e.g. NFS "soft,timeo=..." if misses are preferable to waits).
//
// Thread safety: thread-safe. Several processes and nodes may use one root at once.

#ifndef KVTIER_SRC_TIER_SHAREDFS_SHARED_FS_TIER_H_
#define KVTIER_SRC_TIER_SHAREDFS_SHARED_FS_TIER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "kvtier/env.h"
#include "src/common/mutex.h"
#include "src/services/block_codec.h"
#include "src/tier/shared/shared_tier.h"
#include "src/common/worker_pool.h"

namespace kvtier {

struct SharedFsTierOptions : SharedTierBaseOptions {
  // The directory on the shared file system (must exist). Objects live under
  // <root>/kvtier-g4/v1/.
  std::string root;
  // Threads for parallel stat/read/write of batches. Shared file systems are latency-bound:
  // more threads hide more round trips, each costs a stack.
  size_t io_threads = 16;
  // fsync each object before publishing it, so that a name never points at bytes a crash
  // can lose. Off only for tests on local scratch: a crash may then publish an object whose
  // bytes are lost (the checksum turns it into a counted miss). The directory is not
  // fsynced: a crash may forget a just-published name, which is only a later miss.
  bool sync = true;
};

class SharedFsTier final : public SharedTier {
 public:
  // Validates options and creates the layout's top directories. InvalidArgument for a bad
  // option; NotFound when root does not exist; PermissionDenied for a read-only root.
  [[nodiscard]] static Result<std::unique_ptr<SharedFsTier>> Open(SharedFsTierOptions options);
  ~SharedFsTier() override;

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

  // Absolute path of a block's object (tests and fsck).
  Result<std::string> ObjectPath(std::string_view tenant, const BlockKey& key) const;
  const std::string& node_id() const { return options_.node_id; }

 private:
  // One object found by a janitor scan.
  struct ScannedObject {
    std::string path;
    std::string tenant_component;
    uint64_t bytes = 0;
    uint64_t mtime_us = 0;
  };

  explicit SharedFsTier(SharedFsTierOptions options);

  std::string Abs(const std::string& relative) const { return options_.root + "/" + relative; }
  Status PutOne(const std::string& tenant_component, std::string_view tenant,
                const SharedPut& put);
  Result<std::vector<std::byte>> GetOne(const std::string& tenant_component,
                                        std::string_view tenant, const BlockKey& key);
  Result<SharedObjectInfo> ReadInfo(const std::string& path, std::string_view tenant,
                                    const BlockKey& key);
  // Removes a verified-bad object unless it was replaced meanwhile (same inode).
  void RemoveCorrupt(const std::string& path, uint64_t inode);
  std::string NewTempPath();
  // Creates the session marker of `put` (and its directory the first time); AlreadyExists when
  // it is there.
  Status WriteSessionMarker(const std::string& tenant_component, const SharedPut& put);
  // Publishes the written file `temp` as `final_path` (creating its directory the first
  // time), then removes `temp`. *published is false when `final_path` already existed.
  Status PublishTemp(const std::string& temp, const std::string& final_path, bool* published);
  // mtime to set on files this tier writes: nullopt (the file system's clock) or env's.
  std::optional<uint64_t> WriteTime();
  // "Now" on the time base of mtimes (see SharedFsTierOptions::storage_clock).
  Result<uint64_t> StorageNow();
  void RemoveEmptyDir(const std::string& path);

  // shared_fs_lease.cc
  // Takes, renews or confirms the lease; true when this node holds it now.
  Result<bool> AcquireLease() ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  // True while this node may still act on its lease (local clock, with the margin).
  bool LeaseValid() ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  Result<bool> CreateLease(uint64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);

  // shared_fs_janitor.cc
  Result<std::vector<ScannedObject>> ScanObjects();
  Status EvictObjects(std::vector<ScannedObject>& objects, uint64_t now_us,
                      JanitorReport* report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  Status CleanTemp(uint64_t now_us, JanitorReport* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  Status CleanMarkers(uint64_t now_us, JanitorReport* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  Status CleanNotices(uint64_t now_us, JanitorReport* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(janitor_mu_);
  void BackgroundLoop();

  const SharedFsTierOptions options_;
  Env* const env_;
  mutable SharedTierCounters counters_;
  std::atomic<uint64_t> temp_counter_{0};
  WorkerPool pool_;

  Mutex janitor_mu_;
  uint64_t lease_generation_ ABSL_GUARDED_BY(janitor_mu_) = 0;  // 0 = not held.
  uint64_t lease_renewed_local_us_ ABSL_GUARDED_BY(janitor_mu_) = 0;

  // Background janitor (std primitives: it needs a timed wait).
  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool bg_stop_ = false;
  std::thread bg_thread_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_TIER_SHAREDFS_SHARED_FS_TIER_H_
