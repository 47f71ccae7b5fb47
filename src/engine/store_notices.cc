// StoreImpl's side of deletion notices (deletion_notices.h): announcing this node's deletions
// and applying the other nodes'. Applying one removes the blocks it names from this node's G2
// and G3, and deletes them from G4 again in case this node's own uploads put them back there.
// Across restarts and G4 outages, where this node stands in reading them is kept beside G3,
// and a node that may have missed notices empties its own copies.

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

#include "src/engine/store_impl.h"

namespace kvtier {

Status StoreImpl::Announce(DeletionNotice notice) {
  notice.node = node_id_;
  notice.time_us = options_.env->NowMicros();
  const std::string name = NoticeName(notice.time_us, node_id_, notice_sequence_.fetch_add(1));
  const std::string body = EncodeNotice(notice);
  const Status s = shared_->PublishNotice(name, std::as_bytes(std::span(body)));
  if (!s.ok()) {
    return Status::Unavailable("deleted on this node and in G4, but the other nodes were not "
                               "told (their copies stay until they expire): " + s.ToString());
  }
  notices_published_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

namespace {

// Failed notices kept for another try. Past this, the oldest is dropped (and logged): what it
// names is already not served here, but a G3 tombstone or a G4 deletion may be missing.
constexpr size_t kMaxNoticeRetries = 1000;

// How often the read state is saved beside G3 while running (and at close). A crash loses at
// most this much progress, which costs re-reading those notices, never missing one.
constexpr uint64_t kNoticeStateSaveIntervalUs = 60'000'000;

std::string Seconds(uint64_t us) { return std::to_string(us / 1000000) + " s"; }

// Why a node whose last successful read of the notices was at `last_read_us` may have missed
// some (the janitor removes them after the retention), or "" when it cannot have.
std::string MissedNotices(uint64_t last_read_us, uint64_t now_us, const SharedTierOptions& o) {
  const uint64_t gap = now_us > last_read_us ? now_us - last_read_us : 0;
  const uint64_t retention = o.notice_retention_seconds * 1000000;
  if (gap + o.notice_margin_seconds * 1000000 <= retention) return "";
  return "it read no deletion notice for " + Seconds(gap) + ", and G4 keeps them for " +
         Seconds(retention);
}

}  // namespace

void StoreImpl::CatchUpOnNotices() {
  const uint64_t now = options_.env->NowMicros();
  {
    MutexLock l(&notice_mu_);
    // Without G3 (or with an empty one) nothing here predates this process: notices from now
    // on are enough.
    uint64_t resume = now;
    uint64_t last_read = now;
    if (disk_) {
      Result<NoticeReadState> state = LoadNoticeReadState(options_.env, options_.disk.dir);
      std::string why;
      if (state.ok()) {
        why = MissedNotices(state->last_read_us, now, options_.shared);
        if (why.empty()) {
          resume = state->resume_us;
          last_read = state->last_read_us;  // Until a read succeeds: restarts do not reset it.
        }
      } else if (disk_->Stats().blocks != 0) {
        why = state.status().code() == StatusCode::kNotFound
                  ? "it has no record of the deletion notices it read"
                  : state.status().ToString();
      }
      if (!why.empty()) DropLocalCopies(why);
    }
    follower_ = std::make_unique<NoticeFollower>(
        shared_.get(), node_id_, options_.shared.notice_margin_seconds * 1000000, resume);
    last_notice_read_us_ = last_read;
    if (disk_) SaveNoticeState(now);
  }
  if (options_.shared.notice_poll_ms == 0) return;
  // Before serving: blocks deleted elsewhere while this node was down go now.
  Result<uint64_t> applied = ApplyDeletionNotices();
  if (!applied.ok()) options_.env->Log("deletion notices at open: " + applied.status().ToString());
}

void StoreImpl::DropLocalCopies(const std::string& why) {
  options_.env->Log("emptying this node's G2 and G3: " + why +
                    " (blocks deleted on other nodes meanwhile may be among its copies)");
  for (uint32_t t = 0; t < options_.tenants.size(); ++t) {
    // Shreds may be among what it missed: cluster keys are loaded again from G4.
    if (services_.keys) services_.keys->ForgetTenant(options_.tenants[t].name);
    memory_->EraseTenant(t);
    if (!disk_) continue;
    Result<uint64_t> erased = disk_->EraseTenant(t);
    if (!erased.ok()) options_.env->Log("emptying G3: " + erased.status().ToString());
  }
  notice_gap_resets_.fetch_add(1, std::memory_order_relaxed);
}

void StoreImpl::SaveNoticeState(uint64_t now_us) {
  NoticeReadState state;
  state.last_read_us = last_notice_read_us_;
  // Resume before any notice still waiting for a retry, so that a restart applies it.
  state.resume_us = follower_->newest_us();
  for (const DeletionNotice& n : notice_retries_) {
    state.resume_us = std::min(state.resume_us, n.time_us);
  }
  const Status s = SaveNoticeReadState(options_.env, options_.disk.dir, state);
  if (!s.ok()) options_.env->Log("deletion notices: read state not saved: " + s.ToString());
  notice_state_saved_us_ = now_us;
}

Result<uint64_t> StoreImpl::ApplyDeletionNotices() {
  if (!shared_) return Status::FailedPrecondition("deletion notices travel through G4: none here");
  MutexLock l(&notice_mu_);
  // Earlier failures first (applying is idempotent), then what the other nodes published since.
  std::deque<DeletionNotice> todo;
  todo.swap(notice_retries_);
  uint64_t undecodable = 0;
  Result<std::vector<DeletionNotice>> polled = follower_->Poll(&undecodable);
  if (undecodable != 0) {
    options_.env->Log("deletion notices: " + std::to_string(undecodable) +
                      " not understood by this build, skipped");
  }
  const uint64_t now = options_.env->NowMicros();
  if (polled.ok()) {
    // Cut off from G4 for longer than it keeps notices, this node cannot know what it missed.
    const std::string why = MissedNotices(last_notice_read_us_, now, options_.shared);
    if (!why.empty()) DropLocalCopies(why);
    last_notice_read_us_ = now;
    for (DeletionNotice& n : *polled) {
      if (n.node != node_id_) other_nodes_.insert(n.node);
      todo.push_back(std::move(n));
    }
    other_nodes_seen_.store(other_nodes_.size(), std::memory_order_relaxed);
  }
  uint64_t applied = 0;
  for (DeletionNotice& n : todo) {
    if (ApplyNotice(n).ok()) {
      applied++;
      continue;
    }
    if (notice_retries_.size() == kMaxNoticeRetries) {
      options_.env->Log("deletion notice of " + notice_retries_.front().node +
                        " dropped after failing repeatedly: what it names is not served here, "
                        "but may be left in G3 or G4");
      notice_retries_.pop_front();
    }
    notice_retries_.push_back(std::move(n));
  }
  notices_applied_.fetch_add(applied, std::memory_order_relaxed);
  notices_pending_.store(notice_retries_.size(), std::memory_order_relaxed);
  if (disk_ && now - notice_state_saved_us_ >= kNoticeStateSaveIntervalUs) SaveNoticeState(now);
  if (!polled.ok()) return polled.status();
  return applied;
}

Status StoreImpl::ApplyNotice(const DeletionNotice& notice) {
  // A shred elsewhere: whatever this node holds of the tenant's cluster keys goes first.
  if (notice.shred && services_.keys) services_.keys->ForgetTenant(notice.tenant);
  auto it = tenant_ids_.find(notice.tenant);
  if (it == tenant_ids_.end()) return Status::OK();  // A tenant this node does not serve.
  const uint32_t tenant = it->second;
  audit::AuditEvent event;
  event.tenant = notice.tenant;
  event.actor = "node:" + notice.node;
  DeletionReport r;
  Status status;
  switch (notice.scope) {
    case DeletionNotice::Scope::kKeys:
      event.op = audit::AuditOp::kDeleteBlocks;
      event.scope = audit::AuditScope::kBlocks;
      for (const BlockKey& key : notice.keys) {
        // G2 first: it waits for a demotion of the block in flight, so G3 sees its copy.
        if (memory_->Erase(tenant, key).ok()) r.memory_blocks++;
        if (!disk_) continue;
        const Status s = disk_->Erase(tenant, key);
        if (s.ok()) {
          r.disk_blocks++;
        } else if (s.code() != StatusCode::kNotFound && status.ok()) {
          status = s;
        }
      }
      break;
    case DeletionNotice::Scope::kSession: {
      event.op = audit::AuditOp::kDeleteSession;
      event.scope = audit::AuditScope::kSession;
      event.scope_id = std::to_string(notice.session);
      r.memory_blocks = memory_->EraseSession(tenant, notice.session);
      if (disk_) {
        Result<uint64_t> n = disk_->EraseSession(tenant, notice.session);
        if (n.ok()) r.disk_blocks = *n;
        status = n.status();
      }
      break;
    }
    case DeletionNotice::Scope::kTenant: {
      event.op = audit::AuditOp::kDeleteTenant;
      event.scope = audit::AuditScope::kTenant;
      r.memory_blocks = memory_->EraseTenant(tenant);
      if (disk_) {
        Result<uint64_t> n = disk_->EraseTenant(tenant);
        if (n.ok()) r.disk_blocks = *n;
        status = n.status();
      }
      break;
    }
  }
  // Uploads of this node (queued puts, demotions) may have published copies to G4 after the
  // other node deleted them there: delete again, once they are out.
  if (uploader_) uploader_->Flush();
  const std::string& name = notice.tenant;
  Result<std::vector<BlockKey>> on_shared = std::vector<BlockKey>{};
  switch (notice.scope) {
    case DeletionNotice::Scope::kKeys:
      for (const BlockKey& key : notice.keys) {
        const Status s = shared_->Delete(name, key);
        if (!s.ok()) on_shared = s;
      }
      break;
    case DeletionNotice::Scope::kSession:
      on_shared = shared_->DeleteSession(name, notice.session);
      break;
    case DeletionNotice::Scope::kTenant:
      on_shared = shared_->DeleteTenant(name);
      break;
  }
  DeletionDone();
  if (on_shared.ok()) {
    r.shared_blocks = on_shared->size();
    AnnounceSharedRemovals(tenant, *on_shared);
  } else if (status.ok()) {
    status = on_shared.status();
  }
  if (!status.ok()) {
    options_.env->Log("deletion notice of " + notice.node + " for tenant " + notice.tenant +
                      " not fully applied (tried again at the next poll): " + status.ToString());
  }
  event.blocks = BlocksRemoved(r);
  event.result = status.code();
  Audit(event);
  return status;
}

}  // namespace kvtier
