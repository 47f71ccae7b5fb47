// ReturnModel: the chance that a G2 block is used again, learnt online from one tenant's
// traffic, by the block's class (0 to kClasses - 1: its owner's, MemoryTier::LaneOf: the depth
// of its conversation and whether it is the tail of a long turn) and how long it has been
// idle.
//
// What it measures: a spatial sample of chain tips' keys (SHARDS, Waldspurger et al., FAST'15: a key is
// followed when its hash is below a threshold, halved whenever more than `max_tracked` keys
// are followed) is followed whether or not the block is resident, so evicted blocks that come
// back are seen too. An access of a followed key ends an idle period: a return after that
// idle time (accesses within the same second are one visit). A period that passes the horizon
// ends without a return. From these, per class and idle bucket (a quarter of a doubling of seconds), a
// Kaplan-Meier estimate: the hazard of a bucket is the returns in it over the periods that
// reached it (returned later, ended later, or still running past it), and the chance of a
// return once idle reached bucket b is 1 - prod over b' >= b of (1 - hazard(b')). A class
// with few periods leans on all classes together (a prior of kPriorPeriods periods). Counts
// halve past kDecayPeriods, so the model follows traffic that changes.
//
// The chance of a return ever is non-increasing in idle time, so within a class the least
// recently used block is the least likely to return: an LRU queue per class and a comparison
// of the heads find the block to evict. The comparison asks for the chance of a return within
// a window (MemoryTier: as long as the cache now keeps a block), the ratio of two tails of the
// same product.
//
// Not thread-safe: the owner serialises calls.

#ifndef KVTIER_POLICY_RETURN_MODEL_H_
#define KVTIER_POLICY_RETURN_MODEL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvtier {

class ReturnModel {
 public:
  static constexpr int kClasses = 16;
  // Idle buckets: [0, 1 s), then four per doubling: [1, 1.25 s), [1.25, 1.5), ..., up to the
  // horizon.
  static constexpr int kBucketsPerDoubling = 4;
  static constexpr int kHorizonDoublings = 17;
  static constexpr uint32_t kHorizonSeconds = uint32_t{1} << kHorizonDoublings;  // About 36 h.
  static constexpr int kBuckets = 1 + kBucketsPerDoubling * kHorizonDoublings;
  // Periods of all classes that a class's own periods are weighed against.
  static constexpr double kPriorPeriods = 8;
  static constexpr double kDecayPeriods = 1 << 16;

  // At most 16,384 keys followed (MemoryUsage up to about 1 MiB). Fewer halve the evidence, and
  // the victim choice's test then keeps LRU's order where more evidence would decide: on
  // Mooncake's conversation trace at 5,859 blocks, 4,096 keys hit 18.31% of blocks, 8,192 and
  // more 18.62% (docs/store.md).
  explicit ReturnModel(size_t max_tracked = 16384);

  // A block of `block_class` (clamped to kClasses - 1) whose key hashes to `key_hash` was
  // stored, read or matched at `now_s`. `tip`: the block ends its chain (nothing resident
  // extends it), the only kind eviction takes; the model follows only tips, so an access of
  // a block that is no tip (anymore) ends its period, a return when it began earlier.
  void OnAccess(uint64_t key_hash, int block_class, uint32_t now_s, bool tip);

  // The chance that a block of `block_class` idle for `idle_s` seconds is used again within
  // the next `window_s` seconds (by default ever, up to the horizon); 0 until returns are seen.
  // The window is counted in whole idle buckets, at least the one `idle_s` is in.
  double ReturnChance(int block_class, uint32_t idle_s,
                      uint32_t window_s = kHorizonSeconds) const;

  // The standard error of ReturnChance (Greenwood's formula over the window's buckets).
  double ChanceError(int block_class, uint32_t idle_s,
                     uint32_t window_s = kHorizonSeconds) const;

  static int ClampClass(int block_class) {
    return block_class < 0 ? 0 : (block_class >= kClasses ? kClasses - 1 : block_class);
  }
  static int Bucket(uint32_t idle_s);
  static double BucketStart(int bucket);
  // The median idle time after which blocks came back (0 until returns are seen).
  double median_return_seconds() const { return median_return_s_; }

  size_t tracked() const { return tracked_.size(); }
  // Periods observed (returns and periods ended without one), after decay.
  double periods() const;
  size_t MemoryUsage() const;

 private:
  struct Tracked {
    uint64_t key_hash;
    uint32_t last_access_s;
    uint8_t block_class;
  };
  using Counts = std::array<std::array<double, kBuckets>, kClasses>;
  // By class, from each bucket to the horizon (index kBuckets: the empty product and sum).
  using Tails = std::array<std::array<double, kBuckets + 1>, kClasses>;

  // Ends the periods past the horizon and recomputes stays_ and greenwood_ from the counts and
  // the periods still running at `now_s`.
  void Refresh(uint32_t now_s);
  // The buckets a window of `window_s` seconds from `idle_s` idle spans: [first, last).
  static std::pair<int, int> Window(uint32_t idle_s, uint32_t window_s);
  void Decay();
  // Stops following tracked_[i]: the last one takes its place.
  void Untrack(size_t i);

  const size_t max_tracked_;
  uint64_t threshold_ = UINT64_MAX;  // Keys hashing at or below it are followed.
  // The followed keys, dense so that a refresh reads them in order (it reads every one), and
  // where each is in it.
  std::vector<Tracked> tracked_;
  std::unordered_map<uint64_t, uint32_t> index_;
  Counts returns_{};  // Periods that ended with a return, by class and bucket of their idle time.
  Counts ended_{};    // Periods that passed the horizon, by class.
  double observed_ = 0;  // Sum of returns_ and ended_.
  // The chance of no return from a bucket on, and Greenwood's sum from a bucket on: the
  // chance of a return within a window of buckets is 1 - stays_[first] / stays_[past the last].
  Tails stays_{};
  Tails greenwood_{};
  size_t accesses_since_refresh_ = 0;
  double median_return_s_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_POLICY_RETURN_MODEL_H_
