// Demoter: the background thread that writes blocks evicted from G2 (and admitted) to G3,
// and to G4 when G4 is written on demotion.
//
// It takes batches of demotions from the MemoryTier, writes them with DiskTier::PutMany
// (several I/Os in flight) and SharedTier::PutMany (in parallel), and then releases each
// block from G2. Until then the block stays readable in G2, so a get never waits on a
// demotion. A block counts as demoted when at least one tier took it. A block read from G4
// (BlockMeta::in_shared) is not written back there.

#ifndef KVTIER_ENGINE_DEMOTER_H_
#define KVTIER_ENGINE_DEMOTER_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include <string>
#include <vector>

#include "src/tier/disk/disk_tier.h"
#include "src/tier/memory/memory_tier.h"
#include "src/tier/shared/shared_tier.h"

namespace kvtier {

class Demoter {
 public:
  // Starts the thread. REQUIRES: memory->EnableDemotion was called; the tiers outlive this.
  // `disk` or `shared` may be null (not both); `tenant_names` name G4's tenants by id;
  // `events` (may be null) hears of each block uploaded to G4.
  Demoter(MemoryTier* memory, DiskTier* disk, SharedTier* shared,
          std::vector<std::string> tenant_names, BlockEventListener* events);
  // Stops demotion, writes what is already queued, joins.
  ~Demoter();
  Demoter(const Demoter&) = delete;
  Demoter& operator=(const Demoter&) = delete;

  uint64_t demoted_blocks() const { return demoted_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }
  // Demotions not written to G4 because the block was read from there.
  uint64_t shared_skipped() const { return shared_skipped_.load(std::memory_order_relaxed); }
  uint64_t disk_skipped() const { return disk_skipped_.load(std::memory_order_relaxed); }

 private:
  void Run();

  MemoryTier* const memory_;
  DiskTier* const disk_;
  SharedTier* const shared_;
  const std::vector<std::string> tenant_names_;
  BlockEventListener* const events_;
  std::atomic<uint64_t> demoted_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> shared_skipped_{0};
  std::atomic<uint64_t> disk_skipped_{0};
  std::thread thread_;  // Last: started once the members it uses exist.
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_DEMOTER_H_
