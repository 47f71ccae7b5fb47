// The parts of trace replay that the single-node replay (replay.cc) and the fleet replay
// (fleet_replay.cc) share: the trace's clock, the trace turned into store keys, the simulated
// G3, and a payload-free Store opened for a replay. Internal to tools/planning.
//
// Thread safety: as replay.h; a TraceClock may be read by every Store of one replay.

#ifndef KVTIER_TOOLS_PLANNING_REPLAY_INTERNAL_H_
#define KVTIER_TOOLS_PLANNING_REPLAY_INTERNAL_H_

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/events.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "tools/planning/replay.h"

namespace kvtier::planning::replay_internal {

inline constexpr uint64_t kMaxStoreBlockBytes = 1 * kGiB;  // Options::max_block_bytes limit.
inline constexpr uint32_t kDefaultPageBytes = 64 * kKiB;
inline constexpr uint32_t kMaxPageBytes = 2 * kMiB;
// Trace time 0 maps to this wall-clock instant, so TTL arithmetic never sees a zero clock.
inline constexpr uint64_t kEpochMicros = uint64_t{1'700'000'000} * 1'000'000;

// The trace's clock: the Store reads the time of the request being replayed.
class TraceClock final : public Env {
 public:
  uint64_t NowMicros() override { return now_.load(std::memory_order_relaxed); }
  void SetTraceMillis(uint64_t ms) {
    now_.store(kEpochMicros + ms * 1000, std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t> now_{kEpochMicros};
};

// Address space that backs every simulated value. The payload-free store reads only the
// span's size, so the pages are mapped PROT_NONE and never committed; a stray read would
// fault instead of silently succeeding.
class UntouchedBuffer {
 public:
  explicit UntouchedBuffer(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  ~UntouchedBuffer() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  UntouchedBuffer(const UntouchedBuffer&) = delete;
  UntouchedBuffer& operator=(const UntouchedBuffer&) = delete;

  bool ok() const { return data_ != nullptr; }
  std::span<const std::byte> Prefix(size_t n) const { return {data_, n}; }

 private:
  size_t bytes_;
  std::byte* data_ = nullptr;
};

// The trace turned into store keys once, shared by every replay of a capacity curve. Only a
// request's whole blocks are references: kvtier never keys a trailing partial block, so it is
// neither looked up nor stored.
struct PreparedTrace {
  std::vector<BlockKey> keys;  // One per block reference, request after request.
  std::vector<BlockKey> unique_keys;  // Per distinct block id.
  std::unordered_map<BlockKey, uint32_t, BlockKeyHasher> id_of;  // Its inverse.
  BlockStream stream;          // Distinct (tenant, hash id) of each reference, per request.
  std::vector<SessionId> sessions;  // Per request: 0 when the trace names none.
  uint64_t unique_bytes = 0;
  uint64_t block_bytes = 0;    // KV bytes of one block.
};

Result<PreparedTrace> Prepare(const Trace& trace, const ReplayOptions& options);

// The allocation page for a G2 of `capacity` bytes: `requested`, or 64 KiB raised until the
// capacity fits in 2^32 pages.
uint32_t PickPageBytes(uint64_t capacity, uint32_t requested);

// Simulated G3: a fixed number of block slots, evicted in CLOCK order.
class ClockTier {
 public:
  ClockTier(uint64_t slots, uint32_t ids) : slot_of_(ids, kNoSlot), capacity_(slots) {}
  bool Contains(uint32_t id) const { return slot_of_[id] != kNoSlot; }
  void Read(uint32_t id) { referenced_[slot_of_[id]] = 1; }
  // Writes an absent block; returns the block evicted for it, or kNoBlock.
  uint32_t Write(uint32_t id) {
    if (block_.size() < capacity_) {
      slot_of_[id] = static_cast<uint32_t>(block_.size());
      block_.push_back(id);
      referenced_.push_back(0);
      return kNoBlock;
    }
    while (referenced_[hand_]) {
      referenced_[hand_] = 0;
      hand_ = (hand_ + 1) % block_.size();
    }
    const uint32_t victim = block_[hand_];
    slot_of_[victim] = kNoSlot;
    block_[hand_] = id;
    slot_of_[id] = static_cast<uint32_t>(hand_);
    hand_ = (hand_ + 1) % block_.size();
    return victim;
  }
  static constexpr uint32_t kNoBlock = UINT32_MAX;

 private:
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  std::vector<uint32_t> slot_of_;  // Per block id.
  std::vector<uint32_t> block_;    // Per slot.
  std::vector<uint8_t> referenced_;
  uint64_t capacity_ = 0;
  size_t hand_ = 0;
};

// A payload-free Store on `clock` for one replay: G2 of `capacity` bytes, the replay's shares,
// TTL and G3 admission, every tenant of the trace (their ids in `tenants`, in the trace's
// order). `observer` and `events` may be null; both must outlive the Store.
// InvalidArgument when the capacity holds no block or needs more than 2^32 pages.
Result<std::unique_ptr<Store>> OpenReplayStore(const Trace& trace, const PreparedTrace& p,
                                               const ReplayOptions& options, uint64_t capacity,
                                               Env* clock, EvictionObserver* observer,
                                               BlockEventListener* events,
                                               std::vector<TenantId>* tenants);

// The session hint a request of the trace carries (retain_s, finished), as the replays send
// it after the request; nullopt when it carries none. retain_s is rounded up and capped at the
// Store's default maximum.
std::optional<Store::SessionHint> TraceHint(const TraceRequest& request);

// Prefill seconds of a request of `tokens` tokens whose first hits were served from each tier
// (`served` tokens, indexed by TierSlot): the reloads over each tier's link (the G2 model's
// where a tier has none) and the suffix computed on the GPUs.
// REQUIRES: reload_by_tier[0] holds a model.
double PrefillSecondsWithCache(
    const std::array<std::optional<PrefillModel>, kNumTiers>& reload_by_tier,
    const std::array<uint64_t, kNumTiers>& served, double tokens);

}  // namespace kvtier::planning::replay_internal

#endif  // KVTIER_TOOLS_PLANNING_REPLAY_INTERNAL_H_
