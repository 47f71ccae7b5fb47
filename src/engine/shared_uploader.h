// SharedUploader: every write to G4, on a thread of its own, so that no put and no demotion
// out of G2 waits on the shared storage.
// - On put (SharedTierOptions::kOnPut): every block put into G2 is queued by key, and read at
//   its turn under a read lease on its G2 copy (no copy of the bytes unless G2 stored the block
//   in pieces). A block evicted from G2 before its turn is skipped, counted as dropped.
// - On demotion: the demoter hands over a copy of each block leaving G2 (Stage), so that G2's
//   pages are free at once instead of after an upload that a slow or stopped S3 service can
//   hold for (retries + 1) x its request timeout. The copies are bounded in bytes.
// Queued blocks go up in batches. The queue and the copies are bounded: past them an upload is
// dropped and counted, because G4 is a cache (a dropped upload costs another node a miss,
// never data) and writers must not wait on the shared storage.
//
// Thread safety: thread-safe.

#ifndef KVTIER_ENGINE_SHARED_UPLOADER_H_
#define KVTIER_ENGINE_SHARED_UPLOADER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
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
  // id. At most `max_queue` blocks wait, holding at most `max_staged_bytes` of copies.
  // `events` (may be null) hears of each upload.
  SharedUploader(MemoryTier* memory, SharedTier* shared, std::vector<std::string> tenant_names,
                 size_t max_queue, uint64_t max_staged_bytes, BlockEventListener* events);
  // Uploads what is queued, then joins.
  ~SharedUploader();
  SharedUploader(const SharedUploader&) = delete;
  SharedUploader& operator=(const SharedUploader&) = delete;

  // Queues the upload of a block G2 holds, read from G2 at its turn.
  void Enqueue(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues the upload of a copy of `value`, taken before this returns; false (the upload
  // dropped) when the queue or the copies are full.
  bool Stage(uint32_t tenant, const SharedPut& put) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once everything queued before the call has been uploaded (or dropped).
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets queued uploads of the block and waits for one in progress: a deletion that
  // follows is not undone by an upload that lands after it.
  void Cancel(uint32_t tenant, const BlockKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // A block staged for upload, readable there until its upload ends (G2 no longer has it,
  // G4 not yet).
  struct StagedBlock {
    std::shared_ptr<const std::vector<std::byte>> value;
    BlockMeta meta;
  };
  std::optional<StagedBlock> Staged(uint32_t tenant, const BlockKey& key) const
      ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t uploaded() const { return uploaded_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t staged_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Copy = std::shared_ptr<const std::vector<std::byte>>;
  struct Item {
    uint32_t tenant;
    BlockKey key;
    // Staged: `copy` is uploaded, with what G4 keeps beside it. Null: read from G2.
    Copy copy;
    SessionId session = 0;
    uint64_t created_us = 0;
    std::optional<KvDtype> dtype;
  };
  // The item's upload is over (done, failed, dropped or cancelled): its copy is released.
  void Finished(const Item& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Uploads items of one tenant.
  void Upload(std::span<const Item> items);

  MemoryTier* const memory_;
  SharedTier* const shared_;
  const std::vector<std::string> tenant_names_;
  const size_t max_queue_;
  const uint64_t max_staged_bytes_;
  BlockEventListener* const events_;
  mutable Mutex mu_;
  CondVar changed_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  // The blocks of the batch being uploaded.
  std::vector<std::pair<uint32_t, BlockKey>> uploading_ ABSL_GUARDED_BY(mu_);
  // Bytes of copies queued or being uploaded, and of copies being taken.
  uint64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The staged items queued or being uploaded, by tenant and key (the latest, for a key
  // staged twice).
  std::map<std::pair<uint32_t, BlockKey>, Item> staged_ ABSL_GUARDED_BY(mu_);
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
