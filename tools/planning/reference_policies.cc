#include "tools/planning/reference_policies.h"

#include <algorithm>
#include <array>
#include <limits>
#include <queue>
#include <utility>

namespace kvtier::planning {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr size_t kNever = std::numeric_limits<size_t>::max();

// Up to four doubly linked lists threaded through arrays indexed by block id; the front of a
// list is its least recent block.
template <int kLists>
class BlockLists {
 public:
  explicit BlockLists(uint32_t ids) : prev_(ids, kNone), next_(ids, kNone), list_(ids, kNone) {}

  // The list holding `id`, or -1.
  int ListOf(uint32_t id) const { return list_[id] == kNone ? -1 : static_cast<int>(list_[id]); }
  size_t Size(int list) const { return size_[list]; }

  void PushBack(int list, uint32_t id) {
    list_[id] = static_cast<uint32_t>(list);
    prev_[id] = tail_[list];
    next_[id] = kNone;
    if (tail_[list] != kNone) next_[tail_[list]] = id;
    tail_[list] = id;
    if (head_[list] == kNone) head_[list] = id;
    ++size_[list];
  }
  void Remove(uint32_t id) {
    const uint32_t list = list_[id];
    if (prev_[id] != kNone) next_[prev_[id]] = next_[id]; else head_[list] = next_[id];
    if (next_[id] != kNone) prev_[next_[id]] = prev_[id]; else tail_[list] = prev_[id];
    list_[id] = kNone;
    --size_[list];
  }
  // REQUIRES: Size(list) > 0.
  uint32_t PopFront(int list) {
    const uint32_t id = head_[list];
    Remove(id);
    return id;
  }

 private:
  std::vector<uint32_t> prev_, next_, list_;
  std::array<uint32_t, kLists> head_ = MakeFilled(), tail_ = MakeFilled();
  std::array<size_t, kLists> size_{};

  static std::array<uint32_t, kLists> MakeFilled() {
    std::array<uint32_t, kLists> a;
    a.fill(kNone);
    return a;
  }
};

class Lru {
 public:
  Lru(uint32_t ids, uint64_t capacity) : lists_(ids), capacity_(capacity) {}
  bool Resident(uint32_t id) const { return lists_.ListOf(id) == 0; }
  void Access(uint32_t id, size_t) {
    lists_.Remove(id);
    lists_.PushBack(0, id);
  }
  void Insert(uint32_t id, size_t) {
    if (lists_.Size(0) >= capacity_) lists_.PopFront(0);
    lists_.PushBack(0, id);
  }

 private:
  BlockLists<1> lists_;
  uint64_t capacity_;
};

class Arc {
 public:
  Arc(uint32_t ids, uint64_t capacity) : lists_(ids), c_(static_cast<double>(capacity)) {}
  bool Resident(uint32_t id) const {
    const int l = lists_.ListOf(id);
    return l == kT1 || l == kT2;
  }
  void Access(uint32_t id, size_t) {
    lists_.Remove(id);
    lists_.PushBack(kT2, id);
  }
  void Insert(uint32_t id, size_t) {
    const double b1 = static_cast<double>(lists_.Size(kB1));
    const double b2 = static_cast<double>(lists_.Size(kB2));
    switch (lists_.ListOf(id)) {
      case kB1:
        p_ = std::min(c_, p_ + std::max(b2 / b1, 1.0));
        Replace(false);
        lists_.Remove(id);
        lists_.PushBack(kT2, id);
        return;
      case kB2:
        p_ = std::max(0.0, p_ - std::max(b1 / b2, 1.0));
        Replace(true);
        lists_.Remove(id);
        lists_.PushBack(kT2, id);
        return;
      default: break;
    }
    const double t1 = static_cast<double>(lists_.Size(kT1));
    const double l1 = t1 + b1;
    const double total = l1 + static_cast<double>(lists_.Size(kT2)) + b2;
    if (l1 >= c_) {
      if (t1 < c_) {
        lists_.PopFront(kB1);
        Replace(false);
      } else {
        lists_.PopFront(kT1);
      }
    } else if (total >= c_) {
      if (total >= 2 * c_) lists_.PopFront(kB2);
      Replace(false);
    }
    lists_.PushBack(kT1, id);
  }

 private:
  static constexpr int kT1 = 0, kT2 = 1, kB1 = 2, kB2 = 3;

  // Makes room in T1 + T2 by moving one block to its ghost list.
  void Replace(bool ghost_of_t2_hit) {
    const double t1 = static_cast<double>(lists_.Size(kT1));
    if (t1 >= 1 && (t1 > p_ || (ghost_of_t2_hit && t1 == p_))) {
      lists_.PushBack(kB1, lists_.PopFront(kT1));
    } else if (lists_.Size(kT2) > 0) {
      lists_.PushBack(kB2, lists_.PopFront(kT2));
    } else {
      lists_.PushBack(kB1, lists_.PopFront(kT1));
    }
  }

  BlockLists<4> lists_;
  double c_;
  double p_ = 0;  // Target size of T1.
};

class Belady {
 public:
  Belady(const BlockStream& stream, uint64_t capacity, bool bypass)
      : next_use_(stream.blocks.size(), kNever),
        resident_next_(stream.distinct_blocks, kNever),
        resident_(stream.distinct_blocks, 0),
        capacity_(capacity),
        bypass_(bypass) {
    std::vector<size_t> seen(stream.distinct_blocks, kNever);
    for (size_t j = stream.blocks.size(); j-- > 0;) {
      next_use_[j] = seen[stream.blocks[j]];
      seen[stream.blocks[j]] = j;
    }
  }
  bool Resident(uint32_t id) const { return resident_[id] != 0; }
  void Access(uint32_t id, size_t ref) { Schedule(id, next_use_[ref]); }
  void Insert(uint32_t id, size_t ref) {
    const size_t next = next_use_[ref];
    if (size_ >= capacity_) {
      while (!heap_.empty() && (resident_[heap_.top().second] == 0 ||
                                resident_next_[heap_.top().second] != heap_.top().first)) {
        heap_.pop();
      }
      if (bypass_ && heap_.top().first <= next) return;
      resident_[heap_.top().second] = 0;
      heap_.pop();
      --size_;
    }
    resident_[id] = 1;
    ++size_;
    Schedule(id, next);
  }

 private:
  void Schedule(uint32_t id, size_t next) {
    resident_next_[id] = next;
    heap_.emplace(next, id);
  }

  std::vector<size_t> next_use_;       // Per reference: the next reference of its block.
  std::vector<size_t> resident_next_;  // Per block: its next reference while resident.
  std::vector<uint8_t> resident_;
  // Farthest next reference first; stale entries are skipped when they surface.
  std::priority_queue<std::pair<size_t, uint32_t>> heap_;
  uint64_t size_ = 0;
  uint64_t capacity_;
  bool bypass_;
};

class Infinite {
 public:
  explicit Infinite(uint32_t ids) : seen_(ids, 0) {}
  bool Resident(uint32_t id) const { return seen_[id] != 0; }
  void Access(uint32_t, size_t) {}
  void Insert(uint32_t id, size_t) { seen_[id] = 1; }

 private:
  std::vector<uint8_t> seen_;
};

template <typename Cache>
std::vector<uint32_t> Drive(const BlockStream& stream, Cache& cache) {
  std::vector<uint32_t> hits;
  hits.reserve(stream.request_begin.empty() ? 0 : stream.request_begin.size() - 1);
  for (size_t r = 0; r + 1 < stream.request_begin.size(); ++r) {
    const size_t begin = stream.request_begin[r];
    const size_t end = stream.request_begin[r + 1];
    size_t ref = begin;
    while (ref < end && cache.Resident(stream.blocks[ref])) ++ref;
    hits.push_back(static_cast<uint32_t>(ref - begin));
    for (size_t j = begin; j < end; ++j) {
      if (cache.Resident(stream.blocks[j])) {
        cache.Access(stream.blocks[j], j);
      } else {
        cache.Insert(stream.blocks[j], j);
      }
    }
  }
  return hits;
}

}  // namespace

std::string_view ReferencePolicyName(ReferencePolicy policy) {
  switch (policy) {
    case ReferencePolicy::kLru: return "LRU";
    case ReferencePolicy::kArc: return "ARC";
    case ReferencePolicy::kOpt: return "OPT";
    case ReferencePolicy::kOptBypass: return "OPT+bypass";
    case ReferencePolicy::kInfinite: return "infinite";
  }
  return "?";
}

std::vector<uint32_t> SimulateReferencePolicy(const BlockStream& stream, ReferencePolicy policy,
                                              uint64_t capacity_blocks) {
  const uint32_t ids = stream.distinct_blocks;
  switch (policy) {
    case ReferencePolicy::kLru: {
      Lru c(ids, capacity_blocks);
      return Drive(stream, c);
    }
    case ReferencePolicy::kArc: {
      Arc c(ids, capacity_blocks);
      return Drive(stream, c);
    }
    case ReferencePolicy::kOpt:
    case ReferencePolicy::kOptBypass: {
      Belady c(stream, capacity_blocks, policy == ReferencePolicy::kOptBypass);
      return Drive(stream, c);
    }
    case ReferencePolicy::kInfinite: {
      Infinite c(ids);
      return Drive(stream, c);
    }
  }
  return {};
}

}  // namespace kvtier::planning
