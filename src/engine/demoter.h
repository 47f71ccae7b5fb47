// Demoter: the background thread that writes blocks evicted from G2 (and admitted) to G3.
//
// It takes batches of demotions from the MemoryTier, writes them with DiskTier::PutMany
// (several I/Os in flight), and then releases each block from G2. Until then the block stays
// readable in G2, so a get never waits on a demotion.

#ifndef KVTIER_ENGINE_DEMOTER_H_
#define KVTIER_ENGINE_DEMOTER_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "src/tier/disk/disk_tier.h"
#include "src/tier/memory/memory_tier.h"

namespace kvtier {

class Demoter {
 public:
  // Starts the thread. REQUIRES: memory->EnableDemotion was called; both outlive this.
  Demoter(MemoryTier* memory, DiskTier* disk);
  // Stops demotion, writes what is already queued, joins.
  ~Demoter();
  Demoter(const Demoter&) = delete;
  Demoter& operator=(const Demoter&) = delete;

  uint64_t demoted_blocks() const { return demoted_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  void Run();

  MemoryTier* const memory_;
  DiskTier* const disk_;
  std::atomic<uint64_t> demoted_{0};
  std::atomic<uint64_t> failures_{0};
  std::thread thread_;  // Last: started once the members it uses exist.
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_DEMOTER_H_
