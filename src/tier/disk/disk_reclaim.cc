// Space: segment reclamation, reading a segment's record list, tenant budgets.
//
// Reclamation frees whole segments (docs/disk_format.md, "Reclamation"). When the sealed
// segment with the most dead bytes holds so little live data that all of it can move into the
// open segment, that segment is compacted: every live block moves, none is lost. Otherwise the
// oldest sealed segment goes: its live blocks that were read or looked up since they were last
// written or moved (the CLOCK "accessed" bit) are relocated, the others are dropped. Such a
// block went a whole trip around the disk without a read: the coldest data we hold, and
// copying it would spend SSD endurance on bytes unlikely to be read. Only the oldest segment's
// blocks have made that trip; a younger segment's unread blocks may have been written a
// moment ago. Tombstones move along while an older segment could still hold a record they
// delete.

#include <algorithm>
#include <cstring>
#include <utility>

#include "src/common/checksum.h"
#include "src/tier/disk/disk_tier_impl.h"

namespace kvtier::disk {
namespace {

// Bytes read at a time when scanning a segment without a footer: the first read is small
// (a crash often leaves a segment with few records), later ones grow up to the maximum.
constexpr size_t kFirstScanWindowBytes = 64 * kKiB;
constexpr size_t kScanWindowBytes = 4 * kMiB;

bool AllZero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace

Status DiskTierImpl::MakeTenantRoom(uint32_t tenant, uint64_t incoming) {
  const uint64_t budget = tenants_[tenant].config.budget_bytes;
  if (budget == 0) return Status::OK();
  if (incoming > budget) {
    return Status::ResourceExhausted("disk tier: tenant " + tenant_names_[tenant] +
                                     " has a budget of " + std::to_string(budget) +
                                     " bytes, too small for this write");
  }
  const uint64_t now = env_->NowMicros();
  const auto t = static_cast<uint16_t>(tenant);
  while (tenants_[tenant].used_bytes + incoming > budget) {
    uint32_t idx = index_.Front(t);
    if (idx == kNoEntry) return Status::Internal("disk tier: budget accounting out of step");
    DiskEntry& e = index_.at(idx);
    const bool expired = Expired(e, now);
    if (e.accessed && !expired) {
      e.accessed = false;  // Second chance: the hand passes it once.
      index_.MoveToBack(idx);
      continue;
    }
    Drop(idx, expired ? DropReason::kExpired : DropReason::kEvicted);
  }
  return Status::OK();
}

Result<std::vector<FooterEntry>> DiskTierImpl::ReadSegmentEntries(uint32_t id, File* file,
                                                                  uint64_t* corrupt) {
  Result<uint64_t> size = file->Size();
  if (!size.ok()) return size.status();
  const uint64_t file_bytes = *size;
  if (file_bytes >= kSegmentHeaderBytes + kTrailerBytes && file_bytes % kPageBytes == 0) {
    AlignedBuffer page(kTrailerBytes);
    size_t got = 0;
    if (page.size() != 0 && file->Read(file_bytes - kTrailerBytes, page.span(), &got).ok() &&
        got == kTrailerBytes) {
      Result<Trailer> trailer = DecodeTrailer(page.span());
      const uint64_t padded = trailer.ok() ? AlignUp(trailer->footer_bytes) : 0;
      if (trailer.ok() && trailer->segment_id == id &&
          trailer->footer_offset + padded + kTrailerBytes == file_bytes) {
        AlignedBuffer body(padded);
        if (body.size() == padded &&
            file->Read(trailer->footer_offset, body.span(), &got).ok() && got == padded) {
          Result<Footer> footer = DecodeFooter(body.span(), *trailer);
          if (footer.ok()) {
            std::vector<int> map;
            for (const std::string& name : footer->tenants) map.push_back(TenantIndex(name));
            std::vector<FooterEntry> entries;
            entries.reserve(footer->entries.size());
            for (FooterEntry& e : footer->entries) {
              if (map[e.tenant] < 0) continue;
              e.tenant = static_cast<uint16_t>(map[e.tenant]);
              entries.push_back(e);
            }
            return entries;
          }
        }
      }
    }
  }
  return ScanSegment(file, file_bytes, corrupt);
}

Result<std::vector<FooterEntry>> DiskTierImpl::ScanSegment(File* file, uint64_t file_bytes,
                                                           uint64_t* corrupt) {
  std::vector<FooterEntry> entries;
  AlignedBuffer window(kScanWindowBytes);
  if (window.size() == 0) return Status::ResourceExhausted("disk tier: out of memory");
  uint64_t window_offset = 0;
  size_t window_bytes = 0;
  size_t next_read = kFirstScanWindowBytes;
  uint64_t pos = kSegmentHeaderBytes;
  while (pos + kPageBytes <= file_bytes) {
    if (pos < window_offset || pos + kPageBytes > window_offset + window_bytes) {
      window_offset = pos;
      KVTIER_RETURN_IF_ERROR(file->Read(pos, window.prefix(next_read), &window_bytes));
      next_read = std::min(2 * next_read, kScanWindowBytes);
      window_bytes -= window_bytes % kPageBytes;
      if (window_bytes < kPageBytes) break;
    }
    std::span<const std::byte> at = window.span().subspan(pos - window_offset);
    at = at.first(window_bytes - (pos - window_offset));
    size_t header_bytes = 0;
    Result<RecordHeader> h = DecodeRecordHeader(at.first(kPageBytes), &header_bytes);
    if (!h.ok()) {
      // The end of the records: zeros (never written), the footer, or a torn record.
      uint32_t magic = 0;
      std::memcpy(&magic, at.data(), sizeof(magic));
      if (!AllZero(at.first(kPageBytes)) && magic != kFooterMagic) ++*corrupt;
      break;
    }
    const uint64_t record_bytes = RecordBytes(h->tenant.size(), h->stored_bytes);
    if (pos + record_bytes > file_bytes) {
      ++*corrupt;  // Torn: the header reached the disk, the end of the record did not.
      break;
    }
    bool intact;
    if (record_bytes <= at.size()) {
      intact = Checksum64(at.subspan(header_bytes, h->stored_bytes)) == h->payload_checksum;
    } else {
      AlignedBuffer whole(record_bytes);
      size_t got = 0;
      if (whole.size() == 0) return Status::ResourceExhausted("disk tier: out of memory");
      KVTIER_RETURN_IF_ERROR(file->Read(pos, whole.span(), &got));
      intact = got == record_bytes &&
               Checksum64(whole.span().subspan(header_bytes, h->stored_bytes)) ==
                   h->payload_checksum;
    }
    const int tenant = TenantIndex(h->tenant);
    if (!intact) {
      ++*corrupt;  // Its length is trustworthy (the header checksum held): skip just this one.
    } else if (tenant >= 0) {
      entries.push_back(FooterEntry{h->kind, static_cast<uint16_t>(tenant), h->key,
                                    static_cast<uint32_t>(pos / kPageBytes),
                                    static_cast<uint32_t>(record_bytes / kPageBytes),
                                    h->value_bytes, h->sequence, h->timestamp_us,
                                    static_cast<uint32_t>(h->stored_bytes), h->dtype, h->session,
                                    h->created_us});
    }
    pos += record_bytes;
  }
  return entries;
}

Status DiskTierImpl::ReclaimOneSegment(uint64_t reserve_bytes) {
  // Relocation writes at most half a segment per segment freed (bounded write amplification).
  const uint64_t limit = options_.segment_bytes / 2;
  uint32_t victim = 0;
  bool compact = false;  // Every live block moves, read or not.
  std::shared_ptr<File> file;
  {
    MutexLock l(&mu_);
    const Segment* oldest = nullptr;
    const Segment* emptiest = nullptr;
    uint32_t oldest_id = 0;
    uint32_t emptiest_id = 0;
    uint64_t most_dead = 0;
    for (const auto& [id, seg] : segments_) {  // In id order: oldest first.
      if (has_open_ && id == open_.id) continue;
      if (oldest == nullptr) {
        oldest = &seg;
        oldest_id = id;
      }
      const uint64_t dead = seg.file_bytes - std::min(seg.file_bytes, seg.live_bytes);
      if (emptiest == nullptr || dead > most_dead) {
        emptiest = &seg;
        emptiest_id = id;
        most_dead = dead;
      }
    }
    if (oldest == nullptr) return Status::ResourceExhausted("disk tier: no segment to reclaim");
    // Each record takes at least a page: an upper bound on the footer entries the moves add.
    const uint64_t live = emptiest->live_bytes;
    compact = emptiest_id != oldest_id && has_open_ && live <= limit &&
              FitsAfter(open_.end + live, open_.entries.size() + live / kPageBytes, reserve_bytes);
    victim = compact ? emptiest_id : oldest_id;
    file = compact ? emptiest->file : oldest->file;
  }
  uint64_t ignored_corrupt = 0;
  Result<std::vector<FooterEntry>> listed = ReadSegmentEntries(victim, file.get(), &ignored_corrupt);
  std::vector<PendingRecord> moves;
  if (listed.ok() && has_open_) {
    // Plan what moves: tombstones first (deletions must hold), then blocks (when not
    // compacting, only those accessed), while they fit beside the reserve and the limit.
    uint64_t end = open_.end;
    size_t entries = open_.entries.size();
    uint64_t moved = 0;
    MutexLock l(&mu_);
    const uint64_t now = env_->NowMicros();
    for (int pass = 0; pass < 2; ++pass) {
      for (const FooterEntry& e : *listed) {
        const bool tombstone = e.kind != RecordKind::kBlock;
        if (tombstone != (pass == 0)) continue;
        PendingRecord r;
        if (tombstone) {
          bool older_exists = false;
          for (const auto& [id, seg] : segments_) {
            if (id != victim && seg.min_sequence < e.sequence) older_exists = true;
          }
          if (!older_exists) continue;
        } else {
          uint32_t idx = index_.Find(e.tenant, e.key);
          if (idx == kNoEntry) continue;
          DiskEntry& d = index_.at(idx);
          if (d.segment != victim || d.offset_pages != e.offset_pages) continue;
          if (Expired(d, now)) {
            Drop(idx, DropReason::kExpired);
            continue;
          }
          const uint64_t bytes = uint64_t{e.record_pages} * kPageBytes;
          if (!(d.accessed || compact) || moved + bytes > limit ||
              !FitsAfter(end + bytes, entries + 1, reserve_bytes)) {
            Drop(idx, DropReason::kEvicted);
            continue;
          }
          r.last_access_us = d.last_access_us;
        }
        r.tenant = e.tenant;
        r.header.key = e.key;
        r.header.kind = e.kind;
        r.relocation = !tombstone;
        r.from_segment = victim;
        r.from_offset_pages = e.offset_pages;
        r.record_bytes = uint64_t{e.record_pages} * kPageBytes;
        end += r.record_bytes;
        ++entries;
        moved += r.record_bytes;
        moves.push_back(std::move(r));
      }
    }
  }
  // Read what moves, checking every record as a read would; refresh its timestamp.
  std::vector<PendingRecord> verified;
  for (PendingRecord& r : moves) {
    r.prebuilt = TakeBuffer(r.record_bytes);
    size_t got = 0;
    size_t header_bytes = 0;
    if (r.prebuilt.size() == 0 ||
        !file->Read(uint64_t{r.from_offset_pages} * kPageBytes, r.prebuilt.prefix(r.record_bytes),
                    &got)
             .ok() ||
        got != r.record_bytes) {
      continue;
    }
    std::span<std::byte> rec = r.prebuilt.prefix(r.record_bytes);
    Result<RecordHeader> h = DecodeRecordHeader(rec, &header_bytes);
    if (!h.ok() || h->key != r.header.key || h->kind != r.header.kind ||
        h->tenant != tenant_names_[r.tenant] ||
        RecordBytes(h->tenant.size(), h->stored_bytes) != r.record_bytes ||
        Checksum64(rec.subspan(header_bytes, h->stored_bytes)) != h->payload_checksum) {
      MutexLock l(&mu_);
      DropIfAt(r.tenant, r.header.key, victim, r.from_offset_pages, DropReason::kCorrupt);
      continue;
    }
    r.header = std::move(h).value();
    if (r.relocation) r.header.timestamp_us = std::max(r.header.timestamp_us, r.last_access_us);
    EncodeRecordHeader(r.header, rec);
    verified.push_back(std::move(r));
  }
  if (!verified.empty()) WriteRound(verified, 0, verified.size());
  for (PendingRecord& r : verified) {
    if (r.prebuilt.size() != 0) ReturnBuffer(std::move(r.prebuilt));
  }
  KVTIER_RETURN_IF_ERROR(DeleteSegment(victim));
  MutexLock l(&mu_);
  ++stats_.reclaimed_segments;
  return Status::OK();
}

Status DiskTierImpl::DeleteSegment(uint32_t id) {
  {
    MutexLock l(&mu_);
    // Whatever still points into the segment (cold blocks, failed moves) goes with it.
    for (uint32_t i = 0; i < index_.SlabSize(); ++i) {
      if (index_.at(i).in_use && index_.at(i).segment == id) Drop(i, DropReason::kEvicted);
    }
    segments_.erase(id);
  }
  KVTIER_RETURN_IF_ERROR(env_->RemoveFile(SegmentPath(id)));
  dir_synced_ = false;
  if (options_.durability == DiskTierOptions::Durability::kSynced) {
    KVTIER_RETURN_IF_ERROR(env_->SyncDir(options_.dir));
    dir_synced_ = true;
  }
  return Status::OK();
}

}  // namespace kvtier::disk
