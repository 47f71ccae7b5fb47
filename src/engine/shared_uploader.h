// SharedUploader: G4's write-on-put placement (SharedTierOptions::kOnPut). Every block put
// into G2 is queued; a background thread uploads queued blocks to G4 in batches, reading them
// under a read lease on their G2 copy (no copy of the bytes unless G2 stored the block in
// pieces). The queue is bounded: when it is full the upload is dropped and counted, because
// G4 is a cache (a dropped upload costs another node a miss, never data) and puts must not
// wait on the shared storage. A block evicted from G2 before its turn is skipped, counted as
// dropped too.
//
// Thread safety: thread-safe.

#ifndef KVTIER_ENGINE_SHARED_UPLOADER_H_
#define KVTIER_ENGINE_SHARED_UPLOADER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "src/common/mutex.h"
#include "src/tier/memory/memory_tier.h"
#include "src/tier/shared/shared_tier.h"

namespace kvtier {

class SharedUploader {
 public:
  // Starts the thread. `memory` and `shared` outlive this; `tenant_names` name G4's tenants by
  // id. At most `max_queue` blocks wait. `events` (may be null) hears of each upload.
  SharedUploader(MemoryTier* memory, SharedTier* shared, std::vector<std::string> tenant_names,
                 size_t max_queue, BlockEventListener* events);
  // Uploads what is queued, then joins.
  ~SharedUploader();
  SharedUploader(const SharedUploader&) = delete;
  SharedUploader& operator=(const SharedUploader&) = delete;

  void Enqueue(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once everything queued before the call has been uploaded (or dropped).
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t uploaded() const { return uploaded_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Uploads one batch of one tenant.
  void Upload(uint32_t tenant, const std::vector<BlockKey>& keys);

  MemoryTier* const memory_;
  SharedTier* const shared_;
  const std::vector<std::string> tenant_names_;
  const size_t max_queue_;
  BlockEventListener* const events_;
  Mutex mu_;
  CondVar changed_;
  std::deque<std::pair<uint32_t, BlockKey>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_total_ ABSL_GUARDED_BY(mu_) = 0;  // Ever queued.
  uint64_t done_total_ ABSL_GUARDED_BY(mu_) = 0;    // Ever taken off the queue and finished.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> uploaded_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> dropped_{0};
  std::thread thread_;  // Last: started once the members it uses exist.
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_SHARED_UPLOADER_H_
