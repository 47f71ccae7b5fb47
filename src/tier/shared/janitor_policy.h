// The janitor's choice of victims, shared by both G4 tiers: TTL since last access first,
// then each tenant over its quota loses its least recently used objects, then, while the
// total is over capacity, the least recently used objects of any tenant go.
//
// Thread safety: pure function.

#ifndef KVTIER_SRC_TIER_SHARED_JANITOR_POLICY_H_
#define KVTIER_SRC_TIER_SHARED_JANITOR_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "src/tier/shared/shared_tier.h"

namespace kvtier::g4 {

struct JanitorCandidate {
  std::string name;              // Path or object key, passed through.
  std::string tenant_component;  // Objects are grouped by it for quotas.
  uint64_t bytes = 0;
  uint64_t access_us = 0;        // Last recorded access (or publication).
};

enum class EvictionReason { kTtl, kQuota, kCapacity };

struct Victim {
  size_t index = 0;  // Into the candidates.
  EvictionReason reason = EvictionReason::kTtl;
};

// Victims in the order they should be deleted (least recently used first within each
// reason). Fills report->objects_seen and bytes_seen; the eviction counters are left to the
// caller, which counts what it actually deleted.
std::vector<Victim> SelectVictims(const std::vector<JanitorCandidate>& candidates,
                                  uint64_t now_us, const SharedJanitorOptions& options,
                                  JanitorReport* report);

// Adds one deletion to the report's counter for `reason`.
void CountEviction(EvictionReason reason, JanitorReport* report);

}  // namespace kvtier::g4

#endif  // KVTIER_SRC_TIER_SHARED_JANITOR_POLICY_H_
