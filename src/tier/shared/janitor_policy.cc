#include "src/tier/shared/janitor_policy.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace kvtier::g4 {

std::vector<Victim> SelectVictims(const std::vector<JanitorCandidate>& candidates,
                                  uint64_t now_us, const SharedJanitorOptions& options,
                                  JanitorReport* report) {
  report->objects_seen = candidates.size();
  for (const JanitorCandidate& c : candidates) report->bytes_seen += c.bytes;
  // Least recently used first; ties by name so that every pass chooses alike.
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const JanitorCandidate& x = candidates[a];
    const JanitorCandidate& y = candidates[b];
    return x.access_us != y.access_us ? x.access_us < y.access_us : x.name < y.name;
  });
  std::vector<Victim> victims;
  std::vector<bool> doomed(candidates.size(), false);
  uint64_t kept_total = 0;
  std::map<std::string, uint64_t> kept_by_tenant;
  for (size_t i : order) {
    const JanitorCandidate& c = candidates[i];
    if (options.ttl_us > 0 && now_us > c.access_us + options.ttl_us) {
      doomed[i] = true;
      victims.push_back({i, EvictionReason::kTtl});
    } else {
      kept_total += c.bytes;
      kept_by_tenant[c.tenant_component] += c.bytes;
    }
  }
  if (options.tenant_quota_bytes > 0) {
    for (size_t i : order) {
      uint64_t& used = kept_by_tenant[candidates[i].tenant_component];
      if (doomed[i] || used <= options.tenant_quota_bytes) continue;
      doomed[i] = true;
      victims.push_back({i, EvictionReason::kQuota});
      used -= candidates[i].bytes;
      kept_total -= candidates[i].bytes;
    }
  }
  if (options.capacity_bytes > 0) {
    for (size_t i : order) {
      if (kept_total <= options.capacity_bytes) break;
      if (doomed[i]) continue;
      doomed[i] = true;
      victims.push_back({i, EvictionReason::kCapacity});
      kept_total -= candidates[i].bytes;
    }
  }
  return victims;
}

void CountEviction(EvictionReason reason, JanitorReport* report) {
  switch (reason) {
    case EvictionReason::kTtl:
      report->expired++;
      break;
    case EvictionReason::kQuota:
      report->evicted_quota++;
      break;
    case EvictionReason::kCapacity:
      report->evicted_capacity++;
      break;
  }
}

}  // namespace kvtier::g4
