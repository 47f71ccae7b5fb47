// Options for opening a Store. Every field has a default that works; Store::Open checks the
// combination and rejects nonsense with InvalidArgument.

#ifndef KVTIER_OPTIONS_H_
#define KVTIER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier {

class Env;

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// One tenant: an isolated key space with its own budgets and retention.
struct TenantOptions {
  // Unique, 1 to 128 bytes. Requests name their tenant; blocks of different tenants never
  // match, even when their keys are equal.
  std::string name;

  // Most bytes of G2 (host DRAM) this tenant may hold, counted in allocation pages.
  // 0 = no per-tenant limit (the whole tier). A tenant at its budget evicts its own blocks
  // and never another tenant's.
  uint64_t memory_budget_bytes = 0;

  // A block not read or written for this many seconds is expired: a miss, then removed.
  // 0 = blocks never expire.
  uint64_t ttl_seconds = 0;
};

// The G2 tier: host DRAM in one shared-memory arena.
struct MemoryTierOptions {
  // Size of the arena. Never exceeded: puts evict or fail instead. Must hold at least one
  // block of max_block_bytes.
  uint64_t capacity_bytes = 1 * kGiB;

  // Allocation granule, a power of two from 4 KiB to 2 MiB. Blocks are stored as runs of whole
  // pages, so a block wastes less than one page; smaller pages waste less but make the
  // allocator's free map larger when memory is fragmented.
  uint32_t page_bytes = 4 * kKiB;

  // Touch every page of the arena at open so the first puts do not pay page faults. Costs
  // start-up time and commits the memory at once.
  bool prefault = false;

  // Share of a tenant's bytes held in the S3-FIFO probationary (small) queue, which absorbs
  // one-time scans before they can push out blocks that were read again. (0, 1).
  double small_queue_fraction = 0.1;
};

struct Options {
  MemoryTierOptions memory;

  // Largest block accepted by Put, at most 1 GiB. Engines' blocks range from 64 KiB to 64 MiB.
  uint64_t max_block_bytes = 64 * kMiB;

  // The tenants this store serves. Requests for any other tenant fail with NotFound.
  std::vector<TenantOptions> tenants = {TenantOptions{"default"}};

  // Simulation mode for trace replay and sizing: the store keeps every piece of metadata and
  // runs every policy exactly as usual, but allocates no arena and never reads or copies block
  // bytes. Put uses only value.size(); Get returns handles with no extents; Read copies
  // nothing. Capacity may then exceed physical memory.
  bool payload_free = false;

  // Clock source. nullptr = Env::Default(). Not owned; must outlive the Store.
  Env* env = nullptr;
};

}  // namespace kvtier

#endif  // KVTIER_OPTIONS_H_
