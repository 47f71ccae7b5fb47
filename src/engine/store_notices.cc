// StoreImpl's side of deletion notices (deletion_notices.h): announcing this node's deletions
// and applying the other nodes'. Applying one removes the blocks it names from this node's G2
// and G3, and deletes them from G4 again in case this node's own uploads put them back there.

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

// Failed notices kept for another try. Past this, the oldest is dropped (and logged): a
// restart applies every notice still in G4 again, since a new follower starts from the first.
constexpr size_t kMaxNoticeRetries = 1000;

}  // namespace

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
  if (polled.ok()) {
    for (DeletionNotice& n : *polled) todo.push_back(std::move(n));
  }
  uint64_t applied = 0;
  for (DeletionNotice& n : todo) {
    if (ApplyNotice(n).ok()) {
      applied++;
      continue;
    }
    if (notice_retries_.size() == kMaxNoticeRetries) {
      options_.env->Log("deletion notice of " + notice_retries_.front().node +
                        " dropped after failing repeatedly; a restart applies it again");
      notice_retries_.pop_front();
    }
    notice_retries_.push_back(std::move(n));
  }
  notices_applied_.fetch_add(applied, std::memory_order_relaxed);
  notices_pending_.store(notice_retries_.size(), std::memory_order_relaxed);
  if (!polled.ok()) return polled.status();
  return applied;
}

Status StoreImpl::ApplyNotice(const DeletionNotice& notice) {
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
  Result<uint64_t> on_shared = uint64_t{0};
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
  if (on_shared.ok()) {
    r.shared_blocks = *on_shared;
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
