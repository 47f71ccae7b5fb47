// Appending records to segments: puts, tombstones and relocations all go through
// AppendRecords, which writes them in rounds (one round per segment, several I/Os in flight)
// and decides per round what is acknowledged (docs/disk_format.md, "Durability").

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "src/common/checksum.h"
#include "src/tier/disk/disk_tier_impl.h"

namespace kvtier::disk {

bool DiskTierImpl::FitsAfter(uint64_t end, size_t entries, uint64_t record_bytes) const {
  const uint64_t footer = AlignUp(FooterBodyBytes(tenant_table_bytes_, entries + 1));
  return end + record_bytes + footer + kTrailerBytes <= options_.segment_bytes;
}

Status DiskTierImpl::EncodeRecord(PendingRecord& r, std::span<std::byte> buf) const {
  const size_t header_bytes = RecordHeaderBytes(r.header.tenant.size());
  std::span<std::byte> payload = buf.subspan(header_bytes, r.record_bytes - header_bytes);
  size_t stored = r.payload.size();
  if (codec_ != nullptr) {
    std::optional<KvDtype> dtype;
    if (r.header.dtype != kDtypeUnknown) dtype = static_cast<KvDtype>(r.header.dtype);
    PayloadInfo info;
    Result<size_t> encoded = codec_->Encode(kFormatVersion, r.header.tenant, r.header.key, dtype,
                                            r.payload, payload, &info);
    if (!encoded.ok()) return encoded.status();
    stored = *encoded;
    r.header.codec = info.codec;
    r.header.flags = info.encrypted ? kFlagEncrypted : 0;
    r.header.key_version = info.key_version;
    r.header.nonce = info.nonce;
    r.header.tag = info.tag;
  } else {
    std::memcpy(payload.data(), r.payload.data(), stored);
  }
  r.header.stored_bytes = stored;
  r.record_bytes = RecordBytes(r.header.tenant.size(), stored);
  // Padding is zeroed so that a reused buffer never carries old bytes to disk.
  std::memset(payload.data() + stored, 0, r.record_bytes - header_bytes - stored);
  r.header.payload_checksum = Checksum64(payload.first(stored));
  EncodeRecordHeader(r.header, buf);
  return Status::OK();
}

DiskTierImpl::PendingRecord DiskTierImpl::Tombstone(RecordKind kind, uint32_t tenant,
                                                    const BlockKey& key, SessionId session) {
  PendingRecord r;
  r.header.kind = kind;
  r.header.key = key;
  r.header.session = session;
  r.header.tenant = tenant_names_[tenant];
  r.header.sequence = next_sequence_++;
  r.header.timestamp_us = env_->NowMicros();
  r.tenant = static_cast<uint16_t>(tenant);
  r.header.payload_checksum = Checksum64({});
  r.record_bytes = RecordBytes(r.header.tenant.size(), 0);
  return r;
}

std::vector<Status> DiskTierImpl::PutMany(uint32_t tenant, std::span<const PutRequest> requests) {
  std::vector<Status> statuses(requests.size());
  if (!ValidTenant(tenant)) {
    std::fill(statuses.begin(), statuses.end(),
              Status::InvalidArgument("disk tier: unknown tenant"));
    return statuses;
  }
  const std::string& name = tenant_names_[tenant];
  MutexLock w(&write_mu_);
  std::vector<PendingRecord> records;
  std::vector<size_t> owner;  // Request index of each record.
  {
    MutexLock l(&mu_);
    const uint64_t now = env_->NowMicros();
    absl::flat_hash_set<BlockKey, BlockKeyHasher> batch;
    uint64_t pending = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      const PutRequest& req = requests[i];
      // The most the record can take; the exact length is known once it is encoded.
      const uint64_t record_bytes = RecordBytes(name.size(), MaxStoredBytes(req.value.size()));
      if (req.value.empty() || req.value.size() > UINT32_MAX ||
          !FitsAfter(kSegmentHeaderBytes, 0, record_bytes)) {
        statuses[i] = Status::InvalidArgument(
            "disk tier: a block of " + std::to_string(req.value.size()) +
            " bytes cannot be stored in segments of " + std::to_string(options_.segment_bytes));
        continue;
      }
      const uint8_t dtype = req.dtype ? static_cast<uint8_t>(*req.dtype) : kDtypeUnknown;
      if (dtype > kMaxDtype) {
        statuses[i] = Status::InvalidArgument("disk tier: unknown dtype " + std::to_string(dtype));
        continue;
      }
      uint32_t idx = FindLive(tenant, req.key, now);
      if (idx != kNoEntry) {
        DiskEntry& e = index_.at(idx);
        e.accessed = true;
        e.last_access_us = std::max(e.last_access_us, now);
        continue;
      }
      if (!batch.insert(req.key).second) continue;
      Status room = MakeTenantRoom(tenant, pending + record_bytes);
      if (!room.ok()) {
        statuses[i] = std::move(room);
        continue;
      }
      pending += record_bytes;
      PendingRecord r;
      r.header.kind = RecordKind::kBlock;
      r.header.key = req.key;
      r.header.tenant = name;
      r.header.timestamp_us = now;
      r.header.created_us = req.created_us != 0 ? req.created_us : now;
      r.header.session = req.session;
      r.header.dtype = dtype;
      r.header.value_bytes = req.value.size();
      r.tenant = static_cast<uint16_t>(tenant);
      r.payload = req.value;
      r.record_bytes = record_bytes;
      records.push_back(std::move(r));
      owner.push_back(i);
    }
  }
  for (PendingRecord& r : records) r.header.sequence = next_sequence_++;
  AppendRecords(records);
  for (size_t k = 0; k < records.size(); ++k) statuses[owner[k]] = std::move(records[k].status);
  return statuses;
}

void DiskTierImpl::AppendRecords(std::vector<PendingRecord>& records) {
  size_t i = 0;
  while (i < records.size()) {
    if (!has_open_ || !FitsAfter(open_.end, open_.entries.size(), records[i].record_bytes)) {
      Status s = PrepareSegment(records[i].record_bytes);
      if (!s.ok()) {
        records[i].status = std::move(s);
        MutexLock l(&mu_);
        ++stats_.write_errors;
        ++i;
        continue;
      }
    }
    size_t j = i;
    uint64_t end = open_.end;
    size_t entries = open_.entries.size();
    while (j < records.size() && FitsAfter(end, entries, records[j].record_bytes)) {
      end += records[j].record_bytes;
      ++entries;
      ++j;
    }
    WriteRound(records, i, j);
    i = j;
  }
  NoteWriteOutcome(records);
}

void DiskTierImpl::NoteWriteOutcome(const std::vector<PendingRecord>& records) {
  const Status* failure = nullptr;
  bool wrote = false;
  for (const PendingRecord& r : records) {
    if (r.status.ok()) {
      wrote = true;
    } else if (failure == nullptr) {
      failure = &r.status;
    }
  }
  MutexLock l(&mu_);
  const uint64_t now = env_->NowMicros();
  if (failure != nullptr) {
    if (stats_.writable) {
      stats_.writable = false;
      stats_.write_fault_since_us = now;
      env_->Log("disk tier: writes are failing, G3 serves reads only: " + failure->ToString());
    }
    stats_.write_fault = failure->ToString();
  } else if (wrote && !stats_.writable) {
    stats_.writable = true;
    stats_.write_fault.clear();
    env_->Log("disk tier: writable again after " +
              std::to_string((now - stats_.write_fault_since_us) / 1000000) + " s");
    stats_.write_fault_since_us = 0;
  }
}

void DiskTierImpl::PrepareRecords(std::vector<PendingRecord>& records,
                                  std::vector<AlignedBuffer>& bufs, size_t base, size_t from,
                                  size_t to) {
  std::vector<size_t> blocks;  // Records whose value is to be encoded.
  uint64_t value_bytes = 0;
  for (size_t k = from; k < to; ++k) {
    PendingRecord& r = records[k];
    if (r.prebuilt.size() != 0) continue;
    AlignedBuffer& buf = bufs[k - base];
    buf = TakeBuffer(r.record_bytes);
    if (buf.size() == 0) {
      r.status = Status::ResourceExhausted("disk tier: no memory for a write buffer");
    } else if (r.header.kind == RecordKind::kBlock) {
      blocks.push_back(k);
      value_bytes += r.payload.size();
    } else {
      std::memset(buf.data(), 0, r.record_bytes);
      EncodeRecordHeader(r.header, buf.prefix(r.record_bytes));
    }
  }
  // Straight into each record buffer; record_bytes shrinks to the encoded length.
  auto encode = [&](size_t i) {
    PendingRecord& r = records[blocks[i]];
    r.status = EncodeRecord(r, bufs[blocks[i] - base].prefix(r.record_bytes));
  };
  // Only a codec makes encoding cost more than a copy, and only large windows repay threads.
  if (codec_ != nullptr && value_bytes >= kParallelCodecBytes) {
    codec_pool_.ParallelFor(blocks.size(), encode);
  } else {
    for (size_t i = 0; i < blocks.size(); ++i) encode(i);
  }
  for (size_t k : blocks) {
    if (!records[k].status.ok()) ReturnBuffer(std::move(bufs[k - base]));
  }
}

size_t DiskTierImpl::EncodeWindowEnd(const std::vector<PendingRecord>& records, size_t from,
                                     size_t end) const {
  const size_t depth = std::max<size_t>(1, options_.io_depth);
  if (codec_ == nullptr) return std::min(end, from + depth);
  uint64_t value_bytes = 0;
  size_t k = from;
  while (k < end && k - from < depth &&
         (k - from < codec_pool_.parallelism() || value_bytes < kParallelCodecBytes)) {
    value_bytes += records[k].payload.size();
    ++k;
  }
  return k;
}

void DiskTierImpl::WriteRound(std::vector<PendingRecord>& records, size_t begin, size_t end) {
  std::unique_ptr<IoQueue> queue = TakeQueue();
  std::vector<AlignedBuffer> bufs(end - begin);
  std::vector<IoCompletion> done;
  size_t handled = 0;
  // Completions free their buffers at once, so at most depth buffers are held.
  auto handle_completions = [&] {
    for (; handled < done.size(); ++handled) {
      IoCompletion& c = done[handled];
      records[c.tag].status = std::move(c.status);
      AlignedBuffer& b = bufs[c.tag - begin];
      if (b.size() != 0) ReturnBuffer(std::move(b));
    }
  };
  uint64_t offset = open_.end;
  // Records are encoded a window at a time, in parallel, while the previous window's writes
  // are in flight.
  size_t prepared = begin;
  for (size_t k = begin; k < end; ++k) {
    if (k == prepared) {
      prepared = EncodeWindowEnd(records, k, end);
      PrepareRecords(records, bufs, begin, k, prepared);
    }
    PendingRecord& r = records[k];
    // A record that failed before it was submitted takes no space: the next one goes in its
    // place, and no hole is left.
    if (!r.status.ok()) continue;
    r.segment = open_.id;
    r.offset_pages = static_cast<uint32_t>(offset / kPageBytes);
    std::span<std::byte> data = r.prebuilt.size() != 0
                                    ? r.prebuilt.prefix(r.record_bytes)
                                    : bufs[k - begin].prefix(r.record_bytes);
    r.consumed_space = true;
    Status s = queue->Submit(IoOp{open_.file.get(), true, offset, data, k}, &done);
    if (!s.ok()) done.push_back(IoCompletion{k, std::move(s), 0});
    offset += r.record_bytes;
    handle_completions();
  }
  while (queue->WaitSome(&done)) handle_completions();
  handle_completions();
  ReturnQueue(std::move(queue));

  // The space is used whether or not each write succeeded.
  open_.end = offset;
  size_t first_failure = end;  // The first hole: a record whose write failed.
  for (size_t k = begin; k < end; ++k) {
    if (records[k].consumed_space && !records[k].status.ok()) {
      first_failure = k;
      break;
    }
  }
  for (size_t k = begin; k < end; ++k) {
    const PendingRecord& r = records[k];
    if (!r.status.ok()) continue;
    open_.entries.push_back(FooterEntry{r.header.kind, r.tenant, r.header.key, r.offset_pages,
                                        static_cast<uint32_t>(r.record_bytes / kPageBytes),
                                        r.header.value_bytes, r.header.sequence,
                                        r.header.timestamp_us,
                                        static_cast<uint32_t>(r.header.stored_bytes),
                                        r.header.dtype, r.header.session, r.header.created_us});
  }
  {
    MutexLock l(&mu_);
    Segment& seg = segments_[open_.id];
    seg.file_bytes = std::max(seg.file_bytes, open_.end);
  }
  open_.data_synced = false;

  if (options_.durability == DiskTierOptions::Durability::kSynced) {
    Status s = SyncOpenSegment();
    if (!s.ok()) {
      // After a failed fdatasync nothing written since the last good one is known to be on
      // disk: none of the round is acknowledged, and the segment takes no more writes.
      for (size_t k = begin; k < end; ++k) {
        if (records[k].status.ok()) {
          records[k].status = Status(s.code(), "not acknowledged as synced: " +
                                                   std::string(s.message()));
        }
      }
      AbandonOpenSegment();
      IndexRound(records, begin, end);
      return;
    }
  }
  if (first_failure != end) {
    // A failed write leaves a hole that stops a recovery scan, so the records after it survive
    // a restart only through the footer: seal now, and acknowledge them only if that worked.
    Status s = SealOpenSegment();
    if (!s.ok()) {
      for (size_t k = first_failure + 1; k < end; ++k) {
        if (records[k].status.ok()) {
          records[k].status = Status(s.code(), "written after a failed write in the same "
                                               "segment, whose footer failed: " +
                                                   std::string(s.message()));
        }
      }
    }
  }
  IndexRound(records, begin, end);
}

void DiskTierImpl::IndexRound(std::vector<PendingRecord>& records, size_t begin, size_t end) {
  MutexLock l(&mu_);
  for (size_t k = begin; k < end; ++k) {
    PendingRecord& r = records[k];
    const auto record_pages = static_cast<uint32_t>(r.record_bytes / kPageBytes);
    if (!r.status.ok()) {
      ++stats_.write_errors;
      if (r.relocation) {
        DropIfAt(r.tenant, r.header.key, r.from_segment, r.from_offset_pages,
                 DropReason::kEvicted);
      }
      continue;
    }
    Segment& seg = segments_[r.segment];
    seg.min_sequence = std::min(seg.min_sequence, r.header.sequence);
    if (r.header.kind != RecordKind::kBlock) continue;
    uint32_t idx = index_.Find(r.tenant, r.header.key);
    if (r.relocation) {
      if (idx == kNoEntry) continue;
      DiskEntry& e = index_.at(idx);
      if (e.segment != r.from_segment || e.offset_pages != r.from_offset_pages) continue;
      auto from = segments_.find(e.segment);
      if (from != segments_.end()) from->second.live_bytes -= uint64_t{record_pages} * kPageBytes;
      seg.live_bytes += uint64_t{record_pages} * kPageBytes;
      e.segment = r.segment;
      e.offset_pages = r.offset_pages;
      e.accessed = false;
      ++stats_.relocated_blocks;
      continue;
    }
    // A rewrite of a key still indexed replaces its entry; only a new key is news.
    const bool news = idx == kNoEntry;
    if (!news) Drop(idx, DropReason::kReplaced);
    DiskEntry e;
    e.key = r.header.key;
    e.last_access_us = r.header.timestamp_us;
    e.created_us = r.header.created_us;
    e.session = r.header.session;
    e.segment = r.segment;
    e.offset_pages = r.offset_pages;
    e.record_pages = record_pages;
    e.value_bytes = static_cast<uint32_t>(r.header.value_bytes);
    e.stored_bytes = static_cast<uint32_t>(r.header.stored_bytes);
    e.dtype = r.header.dtype;
    e.tenant = r.tenant;
    AddEntry(e);
    if (news && events_ != nullptr) events_->OnStored(e.tenant, e.key, nullptr, BlockMedium::kDisk, nullptr);
    ++stats_.puts;
    stats_.put_bytes += r.header.value_bytes;
  }
}

Status DiskTierImpl::PrepareSegment(uint64_t record_bytes) {
  if (has_open_) {
    // A failed seal abandons the segment; its records are still found by a scan.
    static_cast<void>(SealOpenSegment());
  }
  size_t segments;
  {
    MutexLock l(&mu_);
    segments = segments_.size();
  }
  // Only after a restart with a smaller capacity can the directory be over it.
  while (segments >= max_segments_) {
    KVTIER_RETURN_IF_ERROR(ReclaimOneSegment(0));
    MutexLock l(&mu_);
    segments = segments_.size();
  }
  KVTIER_RETURN_IF_ERROR(CreateSegment());
  if (segments + 1 == max_segments_) {
    // The directory is now full: free the emptiest sealed segment, moving its hot blocks into
    // the new one but leaving room for the record that asked for space.
    Status s = ReclaimOneSegment(record_bytes);
    if (!s.ok()) {
      env_->Log("disk tier: reclaiming a segment failed: " + s.ToString());
    }
  }
  if (!has_open_ || !FitsAfter(open_.end, open_.entries.size(), record_bytes)) {
    return Status::ResourceExhausted("disk tier: no room for a record of " +
                                     std::to_string(record_bytes) + " bytes");
  }
  return Status::OK();
}

Status DiskTierImpl::CreateSegment() {
  const uint32_t id = next_segment_id_++;
  const std::string path = SegmentPath(id);
  FileOptions fo;
  fo.create = true;
  fo.truncate = true;
  fo.direct_io = true;
  Result<std::unique_ptr<File>> file = env_->OpenFile(path, fo);
  if (!file.ok()) return file.status();
  std::shared_ptr<File> shared = std::move(file).value();
  AlignedBuffer header(kSegmentHeaderBytes);
  if (header.size() == 0) return Status::ResourceExhausted("disk tier: out of memory");
  EncodeSegmentHeader(SegmentHeader{id, env_->NowMicros()}, header.span());
  Status s = shared->Write(0, header.span());
  // Preallocated, appends do not change the file size: on ext4, direct writes that do are
  // serialised, and the allocation fails early (ENOSPC) rather than in the middle of a round.
  Status allocated = s.ok() ? shared->Allocate(options_.segment_bytes) : Status::OK();
  if (!allocated.ok() && allocated.code() != StatusCode::kUnimplemented) s = allocated;
  if (!s.ok()) {
    static_cast<void>(env_->RemoveFile(path));  // Best effort: an empty segment holds nothing.
    return s;
  }
  open_ = OpenSegment{};
  open_.id = id;
  open_.file = shared;
  open_.end = kSegmentHeaderBytes;
  has_open_ = true;
  dir_synced_ = false;
  MutexLock l(&mu_);
  Segment& seg = segments_[id];
  seg.file = std::move(shared);
  seg.file_bytes = allocated.ok() ? options_.segment_bytes : kSegmentHeaderBytes;
  return Status::OK();
}

Status DiskTierImpl::SyncOpenSegment() {
  if (!open_.data_synced) {
    KVTIER_RETURN_IF_ERROR(open_.file->Sync());
    open_.data_synced = true;
  }
  if (!open_.dir_synced) {
    KVTIER_RETURN_IF_ERROR(env_->SyncDir(options_.dir));
    open_.dir_synced = true;
  }
  return Status::OK();
}

Status DiskTierImpl::SealOpenSegment() {
  Footer footer;
  footer.tenants = tenant_names_;
  footer.entries = std::move(open_.entries);
  const uint64_t footer_offset = open_.end;
  AlignedBuffer buf = EncodeFooter(footer, open_.id, footer_offset);
  Status s = buf.size() == 0 ? Status::ResourceExhausted("disk tier: out of memory")
                             : open_.file->Write(footer_offset, buf.span());
  // The trailer must be the file's last page; this also returns the unused preallocation.
  if (s.ok()) s = open_.file->Truncate(footer_offset + buf.size());
  if (s.ok()) {
    open_.data_synced = false;
    if (options_.durability == DiskTierOptions::Durability::kSynced) s = SyncOpenSegment();
  }
  if (s.ok()) {
    MutexLock l(&mu_);
    segments_[open_.id].file_bytes = footer_offset + buf.size();
  }
  AbandonOpenSegment();
  return s;
}

void DiskTierImpl::AbandonOpenSegment() {
  {
    MutexLock l(&mu_);
    segments_[open_.id].sealed = true;
  }
  open_ = OpenSegment{};
  has_open_ = false;
}

}  // namespace kvtier::disk
