// MemoryTier: sessions and their hints. A session's blocks name an interned slot; a hint
// retains a session (its blocks wait in the session's own queue and go last, the one due back
// last first), raises or lowers its priority, or finishes it (its blocks go first).

#include <string>
#include <utility>

#include "src/tier/memory/memory_tier.h"

namespace kvtier {

uint32_t MemoryTier::AcquireSessionSlot(uint32_t tenant, SessionId session) {
  if (session == 0) return 0;
  auto [it, inserted] = session_index_.try_emplace({tenant, session}, 0);
  if (inserted) {
    if (free_session_slots_.empty()) {
      it->second = static_cast<uint32_t>(session_slots_.size());
      session_slots_.emplace_back();
    } else {
      it->second = free_session_slots_.back();
      free_session_slots_.pop_back();
    }
    SessionSlot& s = session_slots_[it->second];
    s = SessionSlot();
    s.tenant = tenant;
    s.id = session;
  }
  ++session_slots_[it->second].refs;
  return it->second;
}

void MemoryTier::ReleaseSessionSlot(uint32_t slot) {
  if (slot == 0) return;
  SessionSlot& s = session_slots_[slot];
  if (--s.refs > 0) return;
  // Its last block is gone, so its queue is empty: forgotten, hints and all.
  if (s.protected_until != 0) {
    TenantState& t = tenants_[s.tenant];
    t.protected_sessions.erase({s.protected_until, slot});
    t.protection_ends.erase({s.protected_end, slot});
  }
  session_index_.erase({s.tenant, s.id});
  free_session_slots_.push_back(slot);
}

Status MemoryTier::HintSession(uint32_t tenant, SessionId session,
                               const Store::SessionHint& hint) {
  if (session == 0) return Status::InvalidArgument("session 0 means \"no session\"");
  const bool goes_on = hint.retain_seconds != 0 || hint.priority.has_value();
  if (!goes_on && !hint.finished) return Status::InvalidArgument("the session hint is empty");
  if (goes_on && hint.finished) {
    return Status::InvalidArgument("a finished session has no retention or priority");
  }
  if (hint.retain_seconds > max_hint_retain_seconds_) {
    return Status::InvalidArgument("retain_seconds " + std::to_string(hint.retain_seconds) +
                                   " is over the limit of " +
                                   std::to_string(max_hint_retain_seconds_) +
                                   " (memory.max_hint_retain_seconds)");
  }
  MutexLock l(&mu_);
  auto it = session_index_.find({tenant, session});
  if (it == session_index_.end()) return Status::NotFound("session has no block in G2");
  const uint32_t slot_index = it->second;
  SessionSlot& slot = session_slots_[slot_index];
  const uint32_t now = NowSeconds();
  ++tenants_[tenant].stats.session_hints;
  if (hint.retain_seconds != 0) {
    slot.retain_until_s = now + hint.retain_seconds;
    slot.retain_seconds = hint.retain_seconds;
  }
  if (hint.priority) {
    slot.came_back_s = 0;  // Its order is the hint's now: no longer high, it goes to the cold ends.
    const bool lowered = *hint.priority == Store::SessionPriority::kLow &&
                         slot.priority != Store::SessionPriority::kLow;
    slot.priority = *hint.priority;
    if (lowered) QueueSessionFirst(tenant, slot_index, 0);
  }
  if (hint.finished) {
    slot.retain_until_s = 0;
    slot.retain_seconds = 0;
    if (slot.finished) return Status::OK();  // Nothing put since: its blocks are marked.
    slot.finished = true;
  }
  UpdateProtection(slot_index, now);
  // Marked to be taken as soon as they are reached (one pass over the table per finished
  // session: a repeat costs nothing until it puts again).
  if (hint.finished) QueueSessionFirst(tenant, slot_index, kPolicyFinished);
  return Status::OK();
}

void MemoryTier::QueueSessionFirst(uint32_t tenant, uint32_t session_slot, uint8_t mark) {
  for (uint32_t idx = 0; idx < table_.high_water(); ++idx) {
    Entry& e = table_.at(idx);
    if (e.state != EntryState::kResident || e.tenant != tenant || e.session != session_slot) {
      continue;
    }
    e.policy |= mark;
    if (e.queue != QueueId::kNone) QueueFirst(idx);  // Not pinned or demoting.
  }
}

namespace {

// A retention's end: as long again after the time it named (0 = none).
uint32_t RetentionEnd(uint32_t retain_until_s, uint32_t retain_seconds) {
  return retain_until_s == 0 ? 0 : retain_until_s + retain_seconds;
}

}  // namespace

uint32_t MemoryTier::ProtectedUntil(const SessionSlot& slot, uint32_t now) {
  if (slot.finished) return 0;
  if (now < RetentionEnd(slot.retain_until_s, slot.retain_seconds)) return slot.retain_until_s;
  return slot.priority == Store::SessionPriority::kHigh ? UINT32_MAX : 0;
}

uint32_t MemoryTier::ProtectionEnd(const SessionSlot& slot, uint32_t now) {
  if (slot.finished) return 0;
  const uint32_t end = RetentionEnd(slot.retain_until_s, slot.retain_seconds);
  if (now < end) return end;
  return slot.priority == Store::SessionPriority::kHigh ? UINT32_MAX : 0;
}

QueueId MemoryTier::QueueFor(const Entry& e, QueueId queue) const {
  if (session_slots_[e.session].protected_until != 0) return QueueId::kSession;
  return queue == QueueId::kSession ? LaneQueueOf(e) : queue;
}

void MemoryTier::UpdateProtection(uint32_t session_slot, uint32_t now) {
  SessionSlot& s = session_slots_[session_slot];
  TenantState& t = tenants_[s.tenant];
  const uint32_t until = ProtectedUntil(s, now);
  const uint32_t end = ProtectionEnd(s, now);
  if (until == s.protected_until && end == s.protected_end) return;
  if (s.protected_until != 0) {
    t.protected_sessions.erase({s.protected_until, session_slot});
    t.protection_ends.erase({s.protected_end, session_slot});
  }
  s.protected_until = until;
  s.protected_end = end;
  if (until != 0) {
    t.protected_sessions.emplace(until, session_slot);
    t.protection_ends.emplace(end, session_slot);
    return;
  }
  // A session that has not come back in twice its retention, or is no longer of high priority,
  // has waited longer than the blocks queued meanwhile: its blocks go to the cold ends of their
  // probation lanes, in its queue's order (chains' tails first). Those it read or put since it
  // last came back (a second's slack: a lookup may come just before the put) go to the recent
  // ends instead, in the same order: its next request reads them, as its last one did.
  const uint32_t used_since = s.came_back_s == 0 ? UINT32_MAX : s.came_back_s - 1;
  s.came_back_s = 0;
  for (uint32_t idx = s.queue.tail, prev; idx != kNil; idx = prev) {
    prev = table_.at(idx).prev;
    if (table_.at(idx).last_access_s < used_since) QueueFirst(idx);
  }
  while (s.queue.head != kNil) {
    const uint32_t idx = s.queue.head;
    Dequeue(idx);
    Enqueue(idx, LaneQueueOf(table_.at(idx)));
  }
}

void MemoryTier::SessionCameBack(uint32_t session_slot, uint32_t now) {
  if (session_slot == 0) return;
  SessionSlot& s = session_slots_[session_slot];
  const bool resumes = std::exchange(s.finished, false);  // It goes on after all.
  // Its retention has served: it ends in a second, unless a new hint renews it.
  const bool returned = RetentionEnd(s.retain_until_s, s.retain_seconds) > now + 1;
  if (returned) {
    s.retain_until_s = now + 1;
    s.retain_seconds = 0;
    s.came_back_s = now;
  }
  if (resumes || returned) UpdateProtection(session_slot, now);
}

void MemoryTier::EndPassedProtections(TenantState& t, uint32_t now) {
  while (!t.protection_ends.empty() && t.protection_ends.begin()->first <= now) {
    UpdateProtection(t.protection_ends.begin()->second, now);
  }
}

uint32_t MemoryTier::ProtectedVictim(const TenantState& t) const {
  for (auto it = t.protected_sessions.rbegin(); it != t.protected_sessions.rend(); ++it) {
    // The queue's first block with no reader and no child: its chain's tail. A session whose
    // blocks are all read or are prefixes of other sessions' passes to the next.
    for (uint32_t idx = session_slots_[it->second].queue.head; idx != kNil;
         idx = table_.at(idx).next) {
      const Entry& e = table_.at(idx);
      if (e.readers == 0 && e.children == 0) return idx;
    }
  }
  return kNil;
}

}  // namespace kvtier
