// MemoryTier: making room. Eviction (adaptive segmented LRU in depth lanes, tail-first chains,
// the ReturnModel's evidence, session hints and what they ask, budgets), G3 admission and
// demotion, and the reclamation of detached entries.

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "src/tier/memory/memory_tier.h"

namespace kvtier {
namespace {
// Each ghost remembers up to this many evicted keys per queued block: reuse in agent and chat
// traffic comes back after several cache-fulls (docs/store.md has the measurements).
constexpr size_t kGhostsPerQueuedBlock = 4;
// The admission sketch tracks the items its window sees: the blocks G2 holds and the others
// accessed meanwhile, up to this many per resident block, and never more than one per 64 KiB of
// G2 (the smallest block engines use). Its memory so follows what G2 holds: a large G2 of large
// blocks costs what its blocks need, not what its capacity would hold in 64 KiB blocks.
constexpr size_t kSketchItemsPerBlock = 16;
constexpr uint64_t kSketchBytesPerItem = 64 * 1024;
}  // namespace

void MemoryTier::RebalanceQueues(uint32_t tenant, uint32_t now) {
  TenantState& t = tenants_[tenant];
  const double queued = static_cast<double>(PagesOf(t.probation) + PagesOf(t.reused));
  while (static_cast<double>(PagesOf(t.reused)) > t.reused_share * queued) {
    const uint32_t victim = ChooseVictim(t.reused, now, /*evictable=*/false);
    if (victim == kNil) return;
    Dequeue(victim);
    Enqueue(victim, QueueId::kProbation);
  }
}

void MemoryTier::NoteAccess(const Entry& e, uint32_t now) {
  tenants_[e.tenant].returns.OnAccess(e.key.Hash64(), LaneOf(e), now, e.children == 0);
}

uint32_t MemoryTier::ChooseVictim(const Lanes& lanes, uint32_t now, bool evictable,
                                  bool* decided) {
  // The lanes' candidates; LRU's choice among them is the one queued first.
  std::array<uint32_t, ReturnModel::kClasses> heads;
  size_t count = 0;
  uint32_t oldest = kNil;
  uint32_t low = kNil;
  bool unused;
  if (decided == nullptr) decided = &unused;
  *decided = true;
  for (const EntryList& lane : lanes) {
    for (uint32_t idx = lane.head, next; idx != kNil; idx = next) {
      const Entry& e = table_.at(idx);
      next = e.next;
      if (evictable) {
        if (Expired(e, now)) return idx;
        // A leased block is being read; a parent of resident blocks goes after its children.
        if (e.readers > 0 || e.children > 0) continue;
        if (e.policy & kPolicyFinished) return idx;
        // A low-priority session's blocks are queued first (QueueFirstIfLow): the lane's first
        // evictable one goes, after any finished session's.
        if (session_slots_[e.session].priority == Store::SessionPriority::kLow) {
          if (low == kNil) low = idx;
          break;
        }
        // A block of a session a hint protects, queued before the hint: it joins its session's
        // queue, where ProtectedVictim weighs it (a block moves once, so scans stay short).
        if (session_slots_[e.session].protected_until != 0) {
          Dequeue(idx);
          Enqueue(idx, QueueId::kSession);
          continue;
        }
      }
      if (e.policy & kPolicyNoResume) return idx;  // Serves nothing.
      heads[count++] = idx;
      if (oldest == kNil || e.stamp < table_.at(oldest).stamp) oldest = idx;
      break;  // Within a lane the least recent block is the least likely to return.
    }
  }
  if (low != kNil) return low;
  if (oldest == kNil) return kNil;
  *decided = false;
  // What keeping a block buys is a return while the cache still holds it: the chances are of a
  // return within twice the time LRU's choice has stayed (that time is Che's characteristic
  // time of the cache now; a block kept past it lives about as long again). A block likely to
  // come back, but later than the cache would keep it, is no better than one that never does.
  const auto idle_of = [now](const Entry& e) {
    return now > e.last_access_s ? now - e.last_access_s : 0;
  };
  const uint32_t window = static_cast<uint32_t>(std::min<uint64_t>(
      uint64_t{kWindowEvictionAges} * idle_of(table_.at(oldest)), ReturnModel::kHorizonSeconds));
  struct Candidate {
    uint32_t index = kNil;
    double chance = 0;
    double error = 0;
  };
  Candidate lru, least;
  for (const uint32_t idx : std::span(heads.data(), count)) {
    const Entry& e = table_.at(idx);
    const ReturnModel& model = tenants_[e.tenant].returns;
    const uint32_t idle = idle_of(e);
    const Candidate c{idx, model.ReturnChance(LaneOf(e), idle, window),
                      model.ChanceError(LaneOf(e), idle, window)};
    if (idx == oldest) lru = c;
    if (least.index == kNil || c.chance < least.chance) least = c;
  }
  // Leave LRU's choice only on evidence: a gap in the chances of kSignificance standard
  // errors.
  return lru.chance - least.chance > kSignificance * std::hypot(lru.error, least.error)
             ? least.index
             : lru.index;
}

uint32_t MemoryTier::CountOf(const Lanes& lanes) {
  uint32_t n = 0;
  for (const EntryList& lane : lanes) n += lane.count;
  return n;
}

uint64_t MemoryTier::PagesOf(const Lanes& lanes) {
  uint64_t n = 0;
  for (const EntryList& lane : lanes) n += lane.pages;
  return n;
}

void MemoryTier::SetTurn(uint32_t index, std::optional<uint8_t> remembered_turn) {
  Entry& e = table_.at(index);
  e.turn_place = 0;
  if (remembered_turn) {
    // An evicted block put again: its conversation came back, at the depth it had.
    e.policy |= kPolicyRevisited;
    e.turn = *remembered_turn;
  }
  if (e.parent == kNil) return;
  const Entry& p = table_.at(e.parent);
  e.turn = std::max(e.turn, p.turn);
  if (remembered_turn) return;
  // A branch point (a shared system prompt, the context sub-agents share) continues no
  // conversation of its own, and its depth is not its branches'.
  if (p.policy & kPolicyBranched) return;
  if (!(p.policy & kPolicyRevisited) || p.turn == UINT8_MAX) {
    // The same request's next block (or a conversation past 255 turns).
    e.turn_place = p.turn_place == kTurnTail ? kTurnTail : p.turn_place + 1;
    return;
  }
  // A new turn: the chain behind it takes its depth and is no turn's tail.
  e.turn = static_cast<uint8_t>(p.turn + 1);
  for (uint32_t i = e.parent; i != kNil; i = table_.at(i).parent) {
    Entry& a = table_.at(i);
    if (a.turn >= e.turn || (a.policy & kPolicyBranched)) break;
    const QueueId queue = a.queue;
    const bool moves = queue != QueueId::kNone && LaneOf(e.turn, 0) != LaneOf(a);
    if (moves) Dequeue(i);
    a.turn = e.turn;
    a.turn_place = 0;
    if (moves) Enqueue(i, queue);
  }
}

Status MemoryTier::MakeRoom(uint32_t tenant, uint32_t pages, uint32_t now) {
  TenantState& t = tenants_[tenant];
  if (pages > total_pages_) {
    return Status::InvalidArgument("block of " + std::to_string(uint64_t{pages} * page_bytes_) +
                                   " bytes exceeds the G2 capacity of " +
                                   std::to_string(capacity_bytes_) + " bytes");
  }
  if (t.budget_pages != 0 && pages > t.budget_pages) {
    return Status::InvalidArgument("block of " + std::to_string(uint64_t{pages} * page_bytes_) +
                                   " bytes exceeds tenant '" + t.config.name +
                                   "' G2 budget of " + std::to_string(t.config.budget_bytes) +
                                   " bytes");
  }
  for (;;) {
    Result<bool> ready = TryMakeRoom(tenant, pages, now);
    if (!ready.ok()) return ready.status();
    if (*ready) return Status::OK();
    space_freed_.Wait(&mu_);
  }
}

Result<bool> MemoryTier::TryMakeRoom(uint32_t tenant, uint32_t pages, uint32_t now) {
  TenantState& t = tenants_[tenant];
  // Pages of demotions in flight count as free-soon, so eviction stops once enough are
  // on their way out; the put then waits for them.
  // When nothing is evictable but demotions are in flight, wait for them: each one that ends
  // frees its pages and may leave its parent evictable (a chain longer than the room needed
  // leaves G2 a block at a time). The same for copies to other tiers under lease (G4 uploads on
  // put, a flush to G3): a leased block is not evicted, and one evicted under its lease keeps
  // its pages until the copy ends.
  while (t.budget_pages != 0 && t.used_pages - t.demoting_pages + pages > t.budget_pages) {
    if (!EvictOne(tenant, now)) {
      if (t.demoting_pages > 0 || copy_leases_ > 0) return false;
      return Status::ResourceExhausted("tenant '" + t.config.name +
                                       "' is at its G2 budget and every block it holds is "
                                       "pinned, leased or a prefix of one");
    }
  }
  if (t.budget_pages != 0 && t.used_pages + pages > t.budget_pages) return false;
  while (uint64_t{free_pages_} + demoting_pages_ < pages) {
    if (!EvictAcrossTenants(now)) {
      if (demoting_pages_ > 0 || copy_leases_ > 0) return false;
      return Status::ResourceExhausted(
          "G2 is full and every block in it is pinned, leased or a prefix of one");
    }
  }
  // Demotions under way: keep G3's queue fed (EnableDemotion).
  if (demoting_pages_ > 0) {
    while (demoting_pages_ < demotion_headroom_pages_ &&
           uint64_t{free_pages_} + demoting_pages_ < pages + demotion_headroom_pages_ &&
           EvictAcrossTenants(now)) {
    }
  }
  return free_pages_ >= pages;
}

bool MemoryTier::EvictAcrossTenants(uint32_t now) {
  if (!shared_cache_) {
    // The tenant using the largest share of its budget (of the tier when unlimited) gives up
    // a block; if it cannot, the next.
    std::vector<std::pair<double, uint32_t>> order;
    for (uint32_t i = 0; i < tenants_.size(); ++i) {
      const TenantState& v = tenants_[i];
      const double limit = v.budget_pages ? double(v.budget_pages) : double(total_pages_);
      order.emplace_back(double(v.used_pages - v.demoting_pages) / limit, i);
    }
    std::sort(order.begin(), order.end(), std::greater<>());
    for (const auto& [share, tenant] : order) {
      if (EvictOne(tenant, now)) return true;
    }
    return false;
  }
  // Without budgets the tenants share the tier as one cache, and its victim is chosen as a
  // tenant's is, across them all: a block taken for a reason (expired, of a finished or
  // low-priority session, serving nothing) first, then the policies' victims, least recently
  // used first (while the tier's LRU check follows LRU, each tenant's LRU candidate by its own
  // last access: one LRU over every tenant's blocks); a block a hint protects only when no
  // tenant has another, from the session due back last.
  struct Pick {
    bool decided;
    double age;    // Minus the last access of the tenant's oldest queued block, or while the
                   // tier follows LRU of its LRU candidate (whole seconds)...
    double share;  // ...then the larger share of the tier.
    uint32_t index;
    auto operator<=>(const Pick&) const = default;
  };
  const auto tier_share = [this](const TenantState& t) {
    return double(t.used_pages - t.demoting_pages) / double(total_pages_);
  };
  std::optional<Pick> best;
  for (uint32_t i = 0; i < tenants_.size(); ++i) {
    bool decided = false;
    const uint32_t victim = NextVictim(i, now, /*protected_too=*/false, &decided);
    if (victim == kNil) continue;
    // Policies' victims: the tenant whose oldest queued block was accessed longest ago; while
    // the tier follows LRU, whose LRU candidate was.
    const TenantState& v = tenants_[i];
    uint32_t oldest = UINT32_MAX;
    if (lru_check_.follows_lru && !decided) {
      oldest = table_.at(victim).last_access_s;
    } else {
      for (const Lanes* queue : {&v.probation, &v.reused}) {
        for (const EntryList& lane : *queue) {
          if (lane.head != kNil) oldest = std::min(oldest, table_.at(lane.head).last_access_s);
        }
      }
    }
    const Pick pick{decided, -double(oldest), tier_share(v), victim};
    if (!best || pick > *best) best = pick;
  }
  if (!best) {
    for (const TenantState& t : tenants_) {
      if (t.protected_sessions.empty()) continue;
      const uint32_t victim = ProtectedVictim(t);
      if (victim == kNil) continue;
      const Pick pick{true, double(session_slots_[table_.at(victim).session].protected_until),
                      tier_share(t), victim};
      if (!best || pick > *best) best = pick;
    }
  }
  if (!best) return false;
  EvictVictim(best->index, now);
  return true;
}

uint32_t MemoryTier::NextVictim(uint32_t tenant, uint32_t now, bool protected_too,
                                bool* decided) {
  TenantState& t = tenants_[tenant];
  EndPassedProtections(t, now);
  uint32_t victim = ChooseVictim(t.probation, now, /*evictable=*/true, decided);
  if (victim == kNil) victim = ChooseVictim(t.reused, now, /*evictable=*/true, decided);
  // Protected blocks go only when nothing else of the tenant can.
  if (victim == kNil && protected_too) {
    victim = ProtectedVictim(t);
    *decided = true;
  }
  if (victim != kNil && LruCheckOf(t).follows_lru && !*decided) {
    if (const uint32_t lru = LruCandidate(t, now); lru != kNil) victim = lru;
  }
  return victim;
}

bool MemoryTier::EvictOne(uint32_t tenant, uint32_t now) {
  bool decided = false;
  const uint32_t victim = NextVictim(tenant, now, /*protected_too=*/true, &decided);
  if (victim == kNil) return false;
  EvictVictim(victim, now);
  return true;
}

uint32_t MemoryTier::LruCandidate(const TenantState& t, uint32_t now) const {
  int skipped = 0;
  for (uint32_t idx = t.recency.head; idx != kNil && skipped < kMaxRecencySkips;
       idx = table_.at(idx).recency_next, ++skipped) {
    const Entry& e = table_.at(idx);
    if (e.queue != QueueId::kNone && e.readers == 0 && e.children == 0 &&
        ProtectedUntil(e, now) == 0) {
      return idx;
    }
  }
  return kNil;
}

void MemoryTier::FollowLru(LruCheck& check, bool lru, double trial) {
  check.follows_lru = lru;
  check.ahead = check.squares = check.sampled = 0;
  check.trial = trial;
}

void MemoryTier::SetUpLruChecks() {
  shared_cache_ = std::none_of(tenants_.begin(), tenants_.end(),
                               [](const TenantState& t) { return t.budget_pages != 0; });
  // The checks not used hold no sampled LRU: the tenants' own when the tier's decides, the
  // tier's when each tenant's does.
  if (shared_cache_) {
    for (TenantState& t : tenants_) t.lru_check.shadow = ShadowLru(1);
  } else {
    lru_check_.shadow = ShadowLru(1);
  }
}

uint64_t MemoryTier::LruSaltOf(uint32_t tenant) const {
  if (!shared_cache_) return 0;
  // MurmurHash3's finaliser of the tenant's index, so that a tenant's keys stay a uniform
  // sample of the hash space (ShadowLru follows the small hashes).
  uint64_t salt = tenant;
  salt = (salt ^ (salt >> 33)) * 0xff51afd7ed558ccdULL;
  salt = (salt ^ (salt >> 33)) * 0xc4ceb9fe1a85ec53ULL;
  return salt ^ (salt >> 33);
}

void MemoryTier::CheckAgainstLru(uint32_t tenant, std::span<const BlockKey> keys, size_t found) {
  TenantState& t = tenants_[tenant];
  LruCheck& check = LruCheckOf(t);
  lookup_hashes_.resize(keys.size());
  const uint64_t salt = LruSaltOf(tenant);
  for (size_t i = 0; i < keys.size(); ++i) lookup_hashes_[i] = keys[i].Hash64() ^ salt;
  const ShadowLru::Served served = check.shadow.Lookup(
      lookup_hashes_, found, shared_cache_ ? table_.indexed() : t.stats.blocks);
  if (served.sampled == 0) return;
  const double fill = static_cast<double>(check.shadow.capacity());
  check.sampled += served.sampled;
  if (check.follows_lru) {
    // The trial runs its course; then the policy is measured afresh.
    if (check.sampled >= check.trial * fill) FollowLru(check, false, check.trial);
    return;
  }
  const double d = static_cast<double>(served.lru) - static_cast<double>(served.cache);
  check.ahead += d;
  check.squares += d * d;
  if (check.squares > 0 && check.ahead > kLruCheckSignificance * std::sqrt(check.squares)) {
    // A policy that loses again soon after a trial earns a longer one.
    const double trial = check.trial > 0
                             ? std::min(2 * check.trial, kMaxLruTrials * kLruTrialFills)
                             : kLruTrialFills;
    FollowLru(check, true, trial);
    ++t.stats.lru_trials;
    return;
  }
  if (check.sampled >= kLruCheckWindowFills * fill) {
    // The policy clearly ahead of LRU over the window: the next trial starts short again.
    if (-check.ahead > kLruCheckSignificance * std::sqrt(check.squares)) check.trial = 0;
    check.ahead /= 2;
    check.squares /= 2;
    check.sampled /= 2;
  }
}

bool MemoryTier::Expired(const Entry& e, uint32_t now) const {
  // A demoting block carries on to G3, where its retention continues.
  if (e.flags & kEntryDemoting) return false;
  const TenantConfig& config = tenants_[e.tenant].config;
  // Maximum age is a retention limit: pins do not extend it.
  if (config.max_age_s != 0 && now > e.created_s && now - e.created_s > config.max_age_s) {
    return true;
  }
  return config.ttl_s != 0 && e.pins == 0 && now > e.last_access_s &&
         now - e.last_access_s > config.ttl_s;
}

void MemoryTier::EvictVictim(uint32_t idx, uint32_t now) {
  const Entry& e = table_.at(idx);
  if (!Expired(e, now)) {
    TenantState& t = tenants_[e.tenant];
    const size_t remember =
        kGhostsPerQueuedBlock * (CountOf(t.probation) + CountOf(t.reused) + t.session_queued);
    GhostFilter& ghost = (e.flags & kEntryWasReused) ? t.ghost_reused : t.ghost_once;
    ghost.Insert(e.key.Hash64(), remember, e.turn);
  }
  Evict(idx, now);
}

void MemoryTier::Evict(uint32_t index, uint32_t now) {
  Entry& e = table_.at(index);
  if (Expired(e, now)) {
    Detach(index, DetachReason::kExpired);
  } else if (demotion_enabled_ && Admit(e)) {
    StartDemotion(index);
  } else {
    if (eviction_observer_ != nullptr) eviction_observer_->OnEvicted(e.tenant, e.key, Admit(e));
    Detach(index, DetachReason::kEvicted);
  }
}

bool MemoryTier::Admit(const Entry& e) {
  if (admission_.min_prefix_blocks > 1 && (e.flags & kEntryLongChain) == 0) {
    ++admission_stats_.skipped_short_prefix;
    return false;
  }
  if (admission_.frequency_gate &&
      sketch_->Estimate(SketchHash(e.tenant, e.key)) < admission_.min_accesses) {
    ++admission_stats_.skipped_infrequent;
    return false;
  }
  ++admission_stats_.admitted;
  return true;
}

void MemoryTier::StartDemotion(uint32_t index) {
  Entry& e = table_.at(index);
  Dequeue(index);
  e.flags |= kEntryDemoting;
  ++e.readers;  // The demoter's lease keeps the bytes in place.
  const uint32_t pages = PagesFor(e.size);
  tenants_[e.tenant].demoting_pages += pages;
  demoting_pages_ += pages;
  pending_demotions_.push_back(index);
  demotion_queued_.SignalAll();
}

void MemoryTier::SetAdmission(const AdmissionOptions& admission) {
  admission_ = admission;
  sketch_.emplace(SketchItems());
}

size_t MemoryTier::SketchItems() const {
  return static_cast<size_t>(std::min<uint64_t>(
      capacity_bytes_ / kSketchBytesPerItem,
      kSketchItemsPerBlock * std::max<uint64_t>(table_.indexed(), 1)));
}

void MemoryTier::EnableDemotion(const AdmissionOptions& admission) {
  MutexLock l(&mu_);
  SetAdmission(admission);
  demotion_enabled_ = true;
  demotion_headroom_pages_ =
      std::min<uint64_t>(total_pages_ / 8, kDemotionHeadroomBytes / page_bytes_);
}

void MemoryTier::ObserveEvictions(const AdmissionOptions& admission, EvictionObserver* observer) {
  MutexLock l(&mu_);
  SetAdmission(admission);
  eviction_observer_ = observer;
}

std::vector<MemoryTier::Demotion> MemoryTier::TakeDemotions(size_t max) {
  MutexLock l(&mu_);
  while (pending_demotions_.empty() && !demotion_stopped_) demotion_queued_.Wait(&mu_);
  std::vector<Demotion> out;
  while (!pending_demotions_.empty() && out.size() < max) {
    uint32_t idx = pending_demotions_.front();
    pending_demotions_.pop_front();
    const Entry& e = table_.at(idx);
    out.push_back({idx, e.tenant, e.key, MetaOf(e), Spans(idx)});
  }
  return out;
}

void MemoryTier::FinishDemotion(uint32_t entry) {
  MutexLock l(&mu_);
  Entry& e = table_.at(entry);
  const uint32_t pages = PagesFor(e.size);
  e.flags &= static_cast<uint8_t>(~kEntryDemoting);
  tenants_[e.tenant].demoting_pages -= pages;
  demoting_pages_ -= pages;
  --e.readers;
  if (e.state != EntryState::kResident) {
    Reclaim(entry);
  } else if (e.pins == 0) {
    Detach(entry, DetachReason::kEvicted);
  }
  // Pinned while demoting: it stays in G2, outside the queues until unpinned.
  space_freed_.SignalAll();
}

void MemoryTier::StopDemotion() {
  MutexLock l(&mu_);
  demotion_enabled_ = false;
  demotion_stopped_ = true;
  demotion_queued_.SignalAll();
}

MemoryTier::AdmissionStats MemoryTier::admission_stats() const {
  MutexLock l(&mu_);
  return admission_stats_;
}

void MemoryTier::Detach(uint32_t index, DetachReason reason) {
  Entry& e = table_.at(index);
  TenantState& t = tenants_[e.tenant];
  Dequeue(index);
  RecencyUnlink(t, index);
  // LRU would not serve an expired or deleted block either.
  if (reason != DetachReason::kEvicted) {
    LruCheckOf(t).shadow.Erase(e.key.Hash64() ^ LruSaltOf(e.tenant));
  }
  table_.Unindex(index);
  e.state = EntryState::kDetached;
  ReleaseSessionSlot(e.session);
  e.session = 0;
  --t.stats.blocks;
  if (e.pins > 0) --t.stats.pinned_blocks;
  e.pins = 0;
  switch (reason) {
    case DetachReason::kEvicted: ++t.stats.evictions; break;
    case DetachReason::kExpired: ++t.stats.expirations; break;
    case DetachReason::kDeleted: ++t.stats.deletes; break;
  }
  if (events_ != nullptr) events_->OnRemoved(e.tenant, e.key, BlockMedium::kCpu);
  Reclaim(index);
}

void MemoryTier::Reclaim(uint32_t index) {
  while (index != kNil) {
    Entry& e = table_.at(index);
    if (e.state != EntryState::kDetached || e.readers > 0) return;
    if ((e.flags & kEntryDataFreed) == 0) {
      std::vector<Extent> extents{e.extent};
      if (e.flags & kEntryMultiExtent) {
        auto it = more_extents_.find(index);
        extents.insert(extents.end(), it->second.begin(), it->second.end());
        more_extents_.erase(it);
      }
      FreeExtents(e.tenant, extents);
      e.flags = kEntryDataFreed;
    }
    if (e.children > 0) return;
    uint32_t parent = e.parent;
    table_.FreeEntry(index);
    if (parent == kNil) return;
    if (--table_.at(parent).children == 0 && table_.at(parent).state == EntryState::kResident) {
      OnLastChildGone(parent);
    }
    index = parent;
  }
}

void MemoryTier::OnLastChildGone(uint32_t index) {
  Entry& e = table_.at(index);
  if ((e.flags & kEntryNeedsState) == 0 || e.queue == QueueId::kNone) return;
  e.policy |= kPolicyNoResume;
  QueueFirst(index);
}

void MemoryTier::QueueFirst(uint32_t index) {
  Entry& e = table_.at(index);
  Dequeue(index);
  e.queue = QueueId::kProbation;
  EntryList* lane = QueueOf(e);
  if (lane->head == kNil) {
    table_.PushBack(lane, index, PagesFor(e.size));
  } else {
    table_.InsertBefore(lane, lane->head, index, PagesFor(e.size));
  }
}

void MemoryTier::FreeExtents(uint32_t tenant, const std::vector<Extent>& extents) {
  // The pages keep their memory, for this tenant's next blocks (ShedMemory takes it back).
  for (const Extent& x : extents) {
    pages_[tenant].Free(x);
    free_pages_ += x.num_pages;
    tenants_[tenant].used_pages -= x.num_pages;
  }
}

void MemoryTier::TakeMemory(uint32_t tenant, std::span<const Extent> extents,
                            std::vector<Extent>* to_back) {
  if (!arena_) return;
  for (const Extent& x : extents) {
    const uint32_t fresh = resident_[tenant].Add(x);
    if (fresh == 0) continue;
    if (back_on_allocate_ && to_back != nullptr) to_back->push_back(x);
    resident_pages_ += fresh;
  }
  ShedMemory();
}

void MemoryTier::ShedMemory() {
  if (!arena_) return;
  // Used pages never exceed the capacity, so enough free ones hold memory to get under it.
  for (uint32_t t = 0; t < pages_.size() && resident_pages_ > total_pages_; ++t) {
    std::vector<Extent> free_runs;
    pages_[t].ForEachFreeRun([&free_runs](const Extent& run) { free_runs.push_back(run); });
    std::vector<Extent> held;  // Free pages that hold memory.
    for (const Extent& run : free_runs) {
      resident_[t].ForEachIn(run, [&held](const Extent& x) { held.push_back(x); });
    }
    for (const Extent& x : held) {
      if (resident_pages_ <= total_pages_) break;
      arena_->Discard(t, uint64_t{x.first_page} * page_bytes_, uint64_t{x.num_pages} * page_bytes_);
      resident_pages_ -= resident_[t].Remove(x);
      ++discards_;
    }
  }
}

}  // namespace kvtier
