// Demoter: the background thread that writes blocks evicted from G2 (and admitted) to G3,
// and to G4 when G4 is written on demotion.
//
// It takes batches of demotions from the MemoryTier, writes them with DiskTier::PutMany
// (several I/Os in flight), hands a copy of each to the SharedUploader for G4, and then
// releases each block from G2. Until then the block stays readable in G2, so a get never waits
// on a demotion; and a put that needs G2's room waits for G3's writes at most, never for G4. A
// block counts as demoted when G3 took it or its upload was queued. A block read from G4
// (BlockMeta::in_shared) is not written back there.

#ifndef KVTIER_ENGINE_DEMOTER_H_
#define KVTIER_ENGINE_DEMOTER_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "src/engine/shared_uploader.h"
#include "src/tier/disk/disk_tier.h"
#include "src/tier/memory/memory_tier.h"

namespace kvtier {

class Demoter {
 public:
  // Starts the thread. REQUIRES: memory->EnableDemotion was called; the tier and the
  // uploader outlive this. `disk` or `uploader` (G4 written on demotion) may be null, not both.
  Demoter(MemoryTier* memory, DiskTier* disk, SharedUploader* uploader);
  // Stops demotion, writes what is already queued, joins.
  ~Demoter();
  Demoter(const Demoter&) = delete;
  Demoter& operator=(const Demoter&) = delete;

  uint64_t demoted_blocks() const { return demoted_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }
  // Demotions not written to G4 because the block was read from there.
  uint64_t shared_skipped() const { return shared_skipped_.load(std::memory_order_relaxed); }
  uint64_t disk_skipped() const { return disk_skipped_.load(std::memory_order_relaxed); }
  // G3 writes (PutMany calls) begun to carry them.
  uint64_t disk_writes() const { return disk_writes_.load(std::memory_order_relaxed); }

 private:
  void Run();

  MemoryTier* const memory_;
  DiskTier* const disk_;
  SharedUploader* const uploader_;
  std::atomic<uint64_t> demoted_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> shared_skipped_{0};
  std::atomic<uint64_t> disk_skipped_{0};
  std::atomic<uint64_t> disk_writes_{0};
  std::thread thread_;  // Last: started once the members it uses exist.
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_DEMOTER_H_
