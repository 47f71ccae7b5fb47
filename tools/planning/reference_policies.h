// Reference policies for `kvtier replay --compare`: what plain LRU, ARC and Belady's offline
// rule would have hit on the same block references as the Store, and the bound of an
// infinite cache. They live here, beside the replay, not in the Store.
//
// The stream: per request, the distinct ids of its whole blocks in prefix order. The request
// protocol is the one the replay drives the Store with, and an engine follows: a request's
// hits are its longest resident prefix (nothing past the first missing block is reused);
// the blocks after that prefix are stored in order, a resident one counting as an access.
// Capacities are in blocks, since every block of a replay has the same size.
//
//   LRU        evicts the least recently accessed block.
//   ARC        Megiddo and Modha, FAST'03: recency (T1) and frequency (T2) lists with ghost
//              lists B1 and B2 steering the split between them.
//   OPT        Belady: evicts the block whose next reference is farthest; every block is
//              admitted. With prefix lookups this is the classic bound, not a proven optimum.
//   OPT+bypass the same, but a block whose next reference is farther than every resident
//              block's is not stored at all.
//   infinite   every block ever stored stays: the hit ratio no capacity can exceed.
//
// Thread safety: the functions are reentrant.

#ifndef KVTIER_TOOLS_PLANNING_REFERENCE_POLICIES_H_
#define KVTIER_TOOLS_PLANNING_REFERENCE_POLICIES_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvtier::planning {

enum class ReferencePolicy { kLru, kArc, kOpt, kOptBypass, kInfinite };

inline constexpr ReferencePolicy kReferencePolicies[] = {
    ReferencePolicy::kLru, ReferencePolicy::kArc, ReferencePolicy::kOpt,
    ReferencePolicy::kOptBypass, ReferencePolicy::kInfinite};

std::string_view ReferencePolicyName(ReferencePolicy policy);

struct BlockStream {
  std::vector<uint32_t> blocks;        // Distinct block id of each reference, in order.
  std::vector<size_t> request_begin;   // First reference of each request; one extra at the end.
  uint32_t distinct_blocks = 0;        // Ids are in [0, distinct_blocks).
};

// The number of hit blocks of each request. REQUIRES: capacity_blocks > 0 (ignored for
// kInfinite); ids below stream.distinct_blocks.
std::vector<uint32_t> SimulateReferencePolicy(const BlockStream& stream, ReferencePolicy policy,
                                              uint64_t capacity_blocks);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_REFERENCE_POLICIES_H_
