// Rebuilding the index at open (docs/disk_format.md, "Recovery"). Every segment contributes the
// records its footer lists, or, without a valid footer, those a scan finds intact. Records are
// applied by sequence number, whatever segment they sit in (relocation keeps a record's
// sequence): a block is indexed unless a newer copy of it, or a newer tombstone for its key,
// tenant or session, exists. Recovered segments are never appended to: new records go to a new
// segment, so a write still landing from a killed process cannot collide with ours.

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "src/tier/disk/disk_tier_impl.h"
#include "src/tier/disk/tenant_keys.h"

namespace kvtier::disk {
namespace {

using TenantKey = TenantKeyOf<uint16_t>;
using TenantSession = TenantSessionOf<uint16_t>;

}  // namespace

Status DiskTierImpl::Recover() {
  Result<std::vector<std::string>> names = env_->ListDir(options_.dir);
  if (!names.ok()) return names.status();
  std::vector<uint32_t> ids;
  for (const std::string& name : *names) {
    uint32_t id;
    if (ParseSegmentFileName(name, &id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());

  absl::flat_hash_map<TenantKey, uint64_t> erased_keys;      // Newest key tombstones.
  std::vector<uint64_t> erased_tenants(tenant_names_.size());  // Newest tenant tombstones.
  absl::flat_hash_map<TenantSession, uint64_t> erased_sessions;  // Newest session tombstones.
  std::vector<uint64_t> sequence_of;                         // Slab index -> sequence.
  uint64_t corrupt = 0;
  uint64_t max_sequence = 0;

  for (uint32_t id : ids) {
    const std::string path = SegmentPath(id);
    FileOptions fo;
    fo.direct_io = true;
    Result<std::unique_ptr<File>> opened = env_->OpenFile(path, fo);
    if (!opened.ok()) return opened.status();
    std::shared_ptr<File> file = std::move(opened).value();
    AlignedBuffer page(kSegmentHeaderBytes);
    if (page.size() == 0) return Status::ResourceExhausted("disk tier: out of memory");
    size_t got = 0;
    KVTIER_RETURN_IF_ERROR(file->Read(0, page.span(), &got));
    Result<SegmentHeader> header = DecodeSegmentHeader(page.prefix(got));
    if (header.status().code() == StatusCode::kFailedPrecondition) {
      return Status::FailedPrecondition(options_.dir + ": " + std::string(header.status().message()));
    }
    if (!header.ok() || header->segment_id != id) {
      // Nothing in it can be attributed to this directory: count it and free the space.
      env_->Log("disk tier: removing " + path + ": " +
                (header.ok() ? std::string("segment id mismatch") : header.status().ToString()));
      ++corrupt;
      KVTIER_RETURN_IF_ERROR(env_->RemoveFile(path));
      continue;
    }
    Result<uint64_t> size = file->Size();
    if (!size.ok()) return size.status();
    Result<std::vector<FooterEntry>> entries = ReadSegmentEntries(id, file.get(), &corrupt);
    if (!entries.ok()) return entries.status();

    MutexLock l(&mu_);
    Segment& seg = segments_[id];
    seg.file = file;
    seg.file_bytes = *size;
    seg.sealed = true;
    for (const FooterEntry& e : *entries) {
      seg.min_sequence = std::min(seg.min_sequence, e.sequence);
      max_sequence = std::max(max_sequence, e.sequence);
      const TenantKey tk{e.tenant, e.key};
      switch (e.kind) {
        case RecordKind::kEraseTenant: {
          erased_tenants[e.tenant] = std::max(erased_tenants[e.tenant], e.sequence);
          std::vector<uint32_t> doomed;
          for (uint32_t i = index_.Front(e.tenant); i != kNoEntry; i = index_.at(i).next) {
            if (sequence_of[i] < e.sequence) doomed.push_back(i);
          }
          for (uint32_t i : doomed) Drop(i, DropReason::kDeleted);
          break;
        }
        case RecordKind::kEraseKey: {
          uint64_t& newest = erased_keys[tk];
          newest = std::max(newest, e.sequence);
          uint32_t idx = index_.Find(e.tenant, e.key);
          if (idx != kNoEntry && sequence_of[idx] < e.sequence) Drop(idx, DropReason::kDeleted);
          break;
        }
        case RecordKind::kEraseSession: {
          // Blocks indexed before this tombstone was seen are dropped in one pass at the end.
          uint64_t& newest = erased_sessions[TenantSession{e.tenant, e.session}];
          newest = std::max(newest, e.sequence);
          break;
        }
        case RecordKind::kBlock: {
          if (e.sequence <= erased_tenants[e.tenant]) break;
          auto erased = erased_keys.find(tk);
          if (erased != erased_keys.end() && e.sequence <= erased->second) break;
          if (e.session != 0) {
            auto session = erased_sessions.find(TenantSession{e.tenant, e.session});
            if (session != erased_sessions.end() && e.sequence <= session->second) break;
          }
          uint32_t idx = index_.Find(e.tenant, e.key);
          if (idx != kNoEntry) {
            if (sequence_of[idx] >= e.sequence) break;
            Drop(idx, DropReason::kDeleted);
          }
          DiskEntry d;
          d.key = e.key;
          d.last_access_us = e.timestamp_us;
          d.created_us = e.created_us;
          d.session = e.session;
          d.segment = id;
          d.offset_pages = e.offset_pages;
          d.record_pages = e.record_pages;
          d.value_bytes = static_cast<uint32_t>(std::min<uint64_t>(e.value_bytes, UINT32_MAX));
          d.stored_bytes = e.stored_bytes;
          d.dtype = e.dtype;
          d.tenant = e.tenant;
          const uint32_t added = AddEntry(d);
          if (added >= sequence_of.size()) sequence_of.resize(added + 1);
          sequence_of[added] = e.sequence;
          break;
        }
      }
    }
  }
  next_segment_id_ = ids.empty() ? 1 : ids.back() + 1;
  next_sequence_ = max_sequence + 1;

  MutexLock l(&mu_);
  if (!erased_sessions.empty()) {
    for (uint32_t i = 0; i < index_.SlabSize(); ++i) {
      const DiskEntry& d = index_.at(i);
      if (!d.in_use || d.session == 0) continue;
      auto erased = erased_sessions.find(TenantSession{d.tenant, d.session});
      if (erased != erased_sessions.end() && sequence_of[i] < erased->second) {
        Drop(i, DropReason::kDeleted);
      }
    }
  }
  stats_.corrupt_records += corrupt;
  // Over-budget tenants (the budget shrank, or evictions were not yet reclaimed) shed their
  // own blocks now; expiry is applied lazily by reads and PurgeExpired.
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    KVTIER_RETURN_IF_ERROR(MakeTenantRoom(t, 0));
  }
  stats_.recovered_blocks = index_.size();
  return Status::OK();
}

}  // namespace kvtier::disk
