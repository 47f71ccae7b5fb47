#include "src/policy/return_model.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace kvtier {
namespace {
// The tails (stays_, greenwood_) are recomputed after this many accesses of followed keys,
// and at least after an eighth of the followed keys were accessed: a refresh reads every
// followed key.
constexpr size_t kMinAccessesPerRefresh = 64;
}  // namespace

ReturnModel::ReturnModel(size_t max_tracked) : max_tracked_(std::max<size_t>(max_tracked, 16)) {
  for (auto& row : stays_) row.fill(1);
}

std::pair<int, int> ReturnModel::Window(uint32_t idle_s, uint32_t window_s) {
  const int first = Bucket(idle_s);
  if (uint64_t{idle_s} + window_s >= kHorizonSeconds) return {first, kBuckets};
  return {first, std::max(Bucket(idle_s + window_s), first + 1)};
}

double ReturnModel::ReturnChance(int block_class, uint32_t idle_s, uint32_t window_s) const {
  const auto [first, last] = Window(idle_s, window_s);
  const auto& stays = stays_[ClampClass(block_class)];
  // No chance of staying from `last` on: a return is certain, and 1 the safe answer.
  return stays[last] > 0 ? 1 - stays[first] / stays[last] : 1;
}

double ReturnModel::ChanceError(int block_class, uint32_t idle_s, uint32_t window_s) const {
  const auto [first, last] = Window(idle_s, window_s);
  const int c = ClampClass(block_class);
  if (stays_[c][last] <= 0) return 0;
  const double variance = std::max(greenwood_[c][first] - greenwood_[c][last], 0.0);
  return stays_[c][first] / stays_[c][last] * std::sqrt(variance);
}

int ReturnModel::Bucket(uint32_t idle_s) {
  if (idle_s == 0) return 0;
  if (idle_s >= kHorizonSeconds) return kBuckets - 1;
  // The doubling (floor of log2), then the two bits after the leading one.
  const int doubling = static_cast<int>(std::bit_width(idle_s)) - 1;
  const int quarter = static_cast<int>((uint64_t{idle_s} << 2 >> doubling) & 3);
  return 1 + kBucketsPerDoubling * doubling + quarter;
}

void ReturnModel::OnAccess(uint64_t key_hash, int block_class, uint32_t now_s, bool tip) {
  if (key_hash > threshold_) return;
  const uint8_t c = static_cast<uint8_t>(ClampClass(block_class));
  if (auto it = index_.find(key_hash); it != index_.end()) {
    Tracked& t = tracked_[it->second];
    if (now_s > t.last_access_s) {  // Accesses within one second are one visit.
      returns_[t.block_class][Bucket(now_s - t.last_access_s)] += 1;
      observed_ += 1;
      t.block_class = c;
    } else {
      t.block_class = std::max(t.block_class, c);
    }
    t.last_access_s = std::max(t.last_access_s, now_s);
    if (!tip) Untrack(it->second);
  } else if (tip) {
    index_.emplace(key_hash, static_cast<uint32_t>(tracked_.size()));
    tracked_.push_back(Tracked{key_hash, now_s, c});
    if (tracked_.size() > max_tracked_) {
      // Follow half as many keys: those whose hash is in the lower half of the range kept.
      threshold_ /= 2;
      std::erase_if(tracked_, [this](const Tracked& t) { return t.key_hash > threshold_; });
      tracked_.shrink_to_fit();  // The push past the bound doubled the capacity.
      index_.clear();
      for (size_t i = 0; i < tracked_.size(); ++i) {
        index_.emplace(tracked_[i].key_hash, static_cast<uint32_t>(i));
      }
    }
  }
  if (observed_ > kDecayPeriods) Decay();
  if (++accesses_since_refresh_ >= std::max(kMinAccessesPerRefresh, tracked_.size() / 8)) {
    Refresh(now_s);
  }
}

void ReturnModel::Untrack(size_t i) {
  index_.erase(tracked_[i].key_hash);
  if (i + 1 < tracked_.size()) {
    tracked_[i] = tracked_.back();
    index_[tracked_[i].key_hash] = static_cast<uint32_t>(i);
  }
  tracked_.pop_back();
}

void ReturnModel::Decay() {
  for (auto* counts : {&returns_, &ended_}) {
    for (auto& row : *counts) {
      for (double& n : row) n /= 2;
    }
  }
  observed_ /= 2;
}

void ReturnModel::Refresh(uint32_t now_s) {
  accesses_since_refresh_ = 0;
  Counts running{};
  for (size_t i = 0; i < tracked_.size();) {
    const Tracked& t = tracked_[i];
    const uint32_t idle = now_s > t.last_access_s ? now_s - t.last_access_s : 0;
    if (idle >= kHorizonSeconds) {
      ended_[t.block_class][kBuckets - 1] += 1;
      observed_ += 1;
      Untrack(i);  // Brings the last one here, read next.
      continue;
    }
    running[t.block_class][Bucket(idle)] += 1;
    ++i;
  }
  // Periods that reached each bucket: those that returned, ended or are running in it or later.
  Counts at_risk{};
  std::array<double, kBuckets> all_returns{}, all_at_risk{};
  for (int c = 0; c < kClasses; ++c) {
    double reached = 0;
    for (int b = kBuckets - 1; b >= 0; --b) {
      reached += returns_[c][b] + ended_[c][b] + running[c][b];
      at_risk[c][b] = reached;
      all_returns[b] += returns_[c][b];
      all_at_risk[b] += reached;
    }
  }
  for (int c = 0; c < kClasses; ++c) {
    double stays = 1;  // Chance of no return from bucket b on.
    double greenwood = 0;  // Its relative variance (Greenwood's formula).
    for (int b = kBuckets - 1; b >= 0; --b) {
      const double prior = all_at_risk[b] > 0 ? all_returns[b] / all_at_risk[b] : 0;
      const double periods = at_risk[c][b] + kPriorPeriods;
      const double hazard = std::min((returns_[c][b] + kPriorPeriods * prior) / periods, 1.0);
      stays *= 1 - hazard;
      if (hazard < 1) greenwood += hazard / (periods * (1 - hazard));
      stays_[c][b] = stays;
      greenwood_[c][b] = greenwood;
    }
  }
  // The median idle time of the returns, all classes together.
  double total = 0;
  for (double n : all_returns) total += n;
  median_return_s_ = 0;
  double below = 0;
  for (int b = 0; b < kBuckets && total > 0; ++b) {
    below += all_returns[b];
    if (below >= total / 2) {
      median_return_s_ = BucketStart(b);
      break;
    }
  }
}

double ReturnModel::BucketStart(int bucket) {
  if (bucket == 0) return 0;
  const int doubling = (bucket - 1) / kBucketsPerDoubling;
  const int quarter = (bucket - 1) % kBucketsPerDoubling;
  return static_cast<double>(uint64_t{1} << doubling) * (1 + quarter / 4.0);
}

double ReturnModel::periods() const { return observed_; }

size_t ReturnModel::MemoryUsage() const {
  return sizeof(*this) + tracked_.capacity() * sizeof(Tracked) +
         index_.bucket_count() * sizeof(void*) +
         index_.size() * (sizeof(std::pair<const uint64_t, uint32_t>) + 2 * sizeof(void*));
}

}  // namespace kvtier
