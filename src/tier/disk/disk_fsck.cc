#include "src/tier/disk/disk_fsck.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "src/common/checksum.h"
#include "src/env/aligned_buffer.h"
#include "src/tier/disk/disk_format.h"
#include "src/tier/disk/tenant_keys.h"

namespace kvtier::disk {
namespace {

struct Record {
  RecordHeader header;
  uint64_t offset = 0;  // In its segment.
  uint64_t bytes = 0;   // RecordBytes: header, payload and padding.
  bool live = false;    // A block an open would index, or a tombstone that still deletes one.
};

struct Segment {
  uint32_t id = 0;
  std::string name;
  uint64_t file_bytes = 0;
  bool sealed = false;
  bool damaged = false;  // Corrupt or torn records, or a footer that disagrees with them.
  uint64_t bad_records = 0;  // How many: what a rewrite leaves behind.
  std::vector<Record> records;  // The intact ones, in file order.
};

std::string SegmentName(uint32_t id) {
  char name[32];
  std::snprintf(name, sizeof(name), "%010u.seg", id);
  return name;
}

bool AllZero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

Result<std::vector<std::byte>> ReadWhole(Env* env, const std::string& path) {
  Result<std::unique_ptr<File>> file = env->OpenFile(path, FileOptions{});
  if (!file.ok()) return file.status();
  Result<uint64_t> size = (*file)->Size();
  if (!size.ok()) return size.status();
  std::vector<std::byte> bytes(*size);
  size_t got = 0;
  KVTIER_RETURN_IF_ERROR((*file)->Read(0, bytes, &got));
  bytes.resize(got);
  return bytes;
}

// The footer of a sealed segment, or nullopt when it has none that is valid.
std::optional<Footer> ReadFooter(std::span<const std::byte> file, uint32_t id) {
  if (file.size() < kSegmentHeaderBytes + kTrailerBytes || file.size() % kPageBytes != 0) {
    return std::nullopt;
  }
  Result<Trailer> trailer = DecodeTrailer(file.last(kTrailerBytes));
  if (!trailer.ok() || trailer->segment_id != id) return std::nullopt;
  const uint64_t padded = AlignUp(trailer->footer_bytes);
  if (trailer->footer_offset + padded + kTrailerBytes != file.size()) return std::nullopt;
  Result<Footer> footer = DecodeFooter(file.subspan(trailer->footer_offset, padded), *trailer);
  if (!footer.ok()) return std::nullopt;
  return *footer;
}

// Decodes the record at `offset`: DataLoss when no record header decodes there or the record
// runs past `end` (torn); *corrupt says whether its payload fails its checksum.
Result<Record> ReadRecord(std::span<const std::byte> file, uint64_t offset, uint64_t end,
                          bool* corrupt) {
  *corrupt = false;
  if (offset + kPageBytes > end) return Status::DataLoss("record runs past the end");
  size_t header_bytes = 0;
  Result<RecordHeader> h = DecodeRecordHeader(file.subspan(offset, kPageBytes), &header_bytes);
  if (!h.ok()) return h.status();
  Record r;
  r.offset = offset;
  r.bytes = RecordBytes(h->tenant.size(), h->stored_bytes);
  if (offset + r.bytes > end) return Status::DataLoss("record runs past the end (torn)");
  *corrupt = Checksum64(file.subspan(offset + header_bytes, h->stored_bytes)) != h->payload_checksum;
  r.header = std::move(*h);
  return r;
}

// Reads one segment's intact records into *seg, counting what is wrong in *report.
void ScanSegment(std::span<const std::byte> file, Segment* seg, DiskCheckReport* report) {
  auto problem = [&](uint64_t offset, const std::string& what) {
    report->problems.push_back(seg->name + ": record at page " +
                               std::to_string(offset / kPageBytes) + ": " + what);
  };
  std::optional<Footer> footer = ReadFooter(file, seg->id);
  seg->sealed = footer.has_value();
  if (footer) {
    // An open takes the footer's word: check that every record it lists is there and intact.
    for (const FooterEntry& e : footer->entries) {
      const uint64_t offset = uint64_t{e.offset_pages} * kPageBytes;
      bool corrupt = false;
      Result<Record> r = ReadRecord(file, offset, file.size() - kTrailerBytes, &corrupt);
      if (!r.ok() || r->header.key != e.key || r->header.sequence != e.sequence ||
          r->header.kind != e.kind || r->header.tenant != footer->tenants[e.tenant] ||
          r->bytes != uint64_t{e.record_pages} * kPageBytes) {
        ++report->footer_mismatches;
        seg->damaged = true;
        ++seg->bad_records;
        problem(offset, "listed in the footer but " +
                            (r.ok() ? std::string("another record is there")
                                    : std::string(r.status().message())));
        continue;
      }
      if (corrupt) {
        ++report->corrupt_records;
        seg->damaged = true;
        ++seg->bad_records;
        problem(offset, "payload checksum mismatch");
        continue;
      }
      seg->records.push_back(std::move(*r));
    }
    return;
  }
  // Unsealed (a crash): an open scans from the first record to the first page that is not one.
  for (uint64_t offset = kSegmentHeaderBytes; offset + kPageBytes <= file.size();) {
    bool corrupt = false;
    Result<Record> r = ReadRecord(file, offset, file.size(), &corrupt);
    if (!r.ok()) {
      if (!AllZero(file.subspan(offset, kPageBytes))) {
        ++report->torn_records;
        seg->damaged = true;
        ++seg->bad_records;
        problem(offset, std::string(r.status().message()) + "; the scan stops here");
      }
      return;
    }
    offset += r->bytes;
    if (corrupt) {
      ++report->corrupt_records;
      seg->damaged = true;
      problem(r->offset, "payload checksum mismatch");
      continue;
    }
    seg->records.push_back(std::move(*r));
  }
}

using TenantKey = TenantKeyOf<std::string>;
using TenantSession = TenantSessionOf<std::string>;

// Marks the records that matter, as an open applies them by sequence: the newest copy of each
// block that no newer tombstone deletes, and the tombstones that still delete an older block.
void MarkLive(std::vector<Segment>* segments) {
  absl::flat_hash_map<std::string, uint64_t> erased_tenants;
  absl::flat_hash_map<TenantKey, uint64_t> erased_keys, newest;
  absl::flat_hash_map<TenantSession, uint64_t> erased_sessions;
  auto keep_max = [](auto& map, auto k, uint64_t v) {
    uint64_t& newest_so_far = map[std::move(k)];
    newest_so_far = std::max(newest_so_far, v);
  };
  for (const Segment& s : *segments) {
    for (const Record& r : s.records) {
      const RecordHeader& h = r.header;
      switch (h.kind) {
        case RecordKind::kEraseTenant: keep_max(erased_tenants, h.tenant, h.sequence); break;
        case RecordKind::kEraseKey: keep_max(erased_keys, TenantKey{h.tenant, h.key}, h.sequence); break;
        case RecordKind::kEraseSession:
          keep_max(erased_sessions, TenantSession{h.tenant, h.session}, h.sequence);
          break;
        case RecordKind::kBlock: keep_max(newest, TenantKey{h.tenant, h.key}, h.sequence); break;
      }
    }
  }
  auto lookup = [](const auto& map, const auto& k) {
    auto it = map.find(k);
    return it == map.end() ? uint64_t{0} : it->second;
  };
  // The oldest block of each tenant, key and session: a tombstone newer than it deletes it.
  absl::flat_hash_map<std::string, uint64_t> oldest_of_tenant;
  absl::flat_hash_map<TenantKey, uint64_t> oldest_of_key;
  absl::flat_hash_map<TenantSession, uint64_t> oldest_of_session;
  auto keep_min = [](auto& map, auto k, uint64_t v) {
    auto [it, inserted] = map.try_emplace(std::move(k), v);
    if (!inserted) it->second = std::min(it->second, v);
  };
  for (Segment& s : *segments) {
    for (Record& r : s.records) {
      const RecordHeader& h = r.header;
      if (h.kind != RecordKind::kBlock) continue;
      keep_min(oldest_of_tenant, h.tenant, h.sequence);
      keep_min(oldest_of_key, TenantKey{h.tenant, h.key}, h.sequence);
      if (h.session != 0) keep_min(oldest_of_session, TenantSession{h.tenant, h.session}, h.sequence);
      r.live = h.sequence == lookup(newest, TenantKey{h.tenant, h.key}) &&
               h.sequence > lookup(erased_tenants, h.tenant) &&
               h.sequence > lookup(erased_keys, TenantKey{h.tenant, h.key}) &&
               (h.session == 0 ||
                h.sequence > lookup(erased_sessions, TenantSession{h.tenant, h.session}));
    }
  }
  auto deletes_something = [](const auto& oldest, const auto& k, uint64_t sequence) {
    auto it = oldest.find(k);
    return it != oldest.end() && it->second < sequence;
  };
  for (Segment& s : *segments) {
    for (Record& r : s.records) {
      const RecordHeader& h = r.header;
      switch (h.kind) {
        case RecordKind::kBlock: break;
        case RecordKind::kEraseTenant:
          r.live = deletes_something(oldest_of_tenant, h.tenant, h.sequence);
          break;
        case RecordKind::kEraseKey:
          r.live = deletes_something(oldest_of_key, TenantKey{h.tenant, h.key}, h.sequence);
          break;
        case RecordKind::kEraseSession:
          r.live = deletes_something(oldest_of_session, TenantSession{h.tenant, h.session},
                                     h.sequence);
          break;
      }
    }
  }
  // Two intact copies of one block with the same sequence (a repair cut short): keep one.
  absl::flat_hash_map<TenantKey, bool> seen;
  for (Segment& s : *segments) {
    for (Record& r : s.records) {
      if (r.header.kind != RecordKind::kBlock || !r.live) continue;
      if (!seen.try_emplace(TenantKey{r.header.tenant, r.header.key}, true).second) r.live = false;
    }
  }
}

// Writes the live records of `seg` (read from `file`) into a new sealed segment `new_id`, via a
// temporary name, synced, before the old one is removed.
Status Rewrite(Env* env, const std::string& dir, const Segment& seg,
               std::span<const std::byte> file, uint32_t new_id) {
  std::vector<std::byte> out(kSegmentHeaderBytes);
  SegmentHeader sh;
  sh.segment_id = new_id;
  sh.created_us = env->NowMicros();
  EncodeSegmentHeader(sh, out);
  Footer footer;
  for (const Record& r : seg.records) {
    if (!r.live) continue;
    const RecordHeader& h = r.header;
    auto t = std::find(footer.tenants.begin(), footer.tenants.end(), h.tenant);
    if (t == footer.tenants.end()) t = footer.tenants.insert(t, h.tenant);
    FooterEntry e;
    e.kind = h.kind;
    e.tenant = static_cast<uint16_t>(t - footer.tenants.begin());
    e.key = h.key;
    e.offset_pages = static_cast<uint32_t>(out.size() / kPageBytes);
    e.record_pages = static_cast<uint32_t>(r.bytes / kPageBytes);
    e.value_bytes = h.value_bytes;
    e.sequence = h.sequence;
    e.timestamp_us = h.timestamp_us;
    e.stored_bytes = static_cast<uint32_t>(h.stored_bytes);
    e.dtype = h.dtype;
    e.session = h.session;
    e.created_us = h.created_us;
    footer.entries.push_back(e);
    const std::span<const std::byte> bytes = file.subspan(r.offset, r.bytes);
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  AlignedBuffer tail = EncodeFooter(footer, new_id, out.size());
  if (tail.size() == 0) return Status::ResourceExhausted("fsck: out of memory");
  out.insert(out.end(), tail.span().begin(), tail.span().end());

  const std::string final_path = dir + "/" + SegmentName(new_id);
  const std::string temp = final_path + ".fsck";
  FileOptions fo;
  fo.create = true;
  fo.truncate = true;
  Result<std::unique_ptr<File>> f = env->OpenFile(temp, fo);
  if (!f.ok()) return f.status();
  KVTIER_RETURN_IF_ERROR((*f)->Write(0, out));
  KVTIER_RETURN_IF_ERROR((*f)->Sync());
  f->reset();
  KVTIER_RETURN_IF_ERROR(env->RenameFile(temp, final_path));
  KVTIER_RETURN_IF_ERROR(env->SyncDir(dir));
  KVTIER_RETURN_IF_ERROR(env->RemoveFile(dir + "/" + seg.name));
  return env->SyncDir(dir);
}

}  // namespace

Result<DiskCheckReport> CheckDiskDirectory(Env* env, const std::string& dir, bool repair) {
  Result<std::vector<std::string>> names = env->ListDir(dir);
  if (!names.ok()) return names.status();
  Result<std::unique_ptr<FileLock>> lock = env->LockFile(dir + "/LOCK");
  if (!lock.ok()) {
    return Status::FailedPrecondition(dir + " is in use (its LOCK is held): stop the kvtierd "
                                      "that has it open, then check it");
  }
  DiskCheckReport report;
  std::vector<Segment> segments;
  uint32_t max_id = 0;
  for (const std::string& name : *names) {
    uint32_t id = 0;
    if (name.ends_with(".seg.fsck")) {
      ++report.orphan_segments;
      report.problems.push_back(name + ": left by an interrupted fsck --repair");
      if (repair) {
        KVTIER_RETURN_IF_ERROR(env->RemoveFile(dir + "/" + name));
        ++report.removed_segments;
      }
      continue;
    }
    if (!ParseSegmentFileName(name, &id)) {
      if (name != "LOCK") ++report.other_files;
      continue;
    }
    Segment s;
    s.id = id;
    s.name = name;
    segments.push_back(std::move(s));
    max_id = std::max(max_id, id);
  }
  std::sort(segments.begin(), segments.end(),
            [](const Segment& a, const Segment& b) { return a.id < b.id; });

  std::vector<Segment> usable;
  for (Segment& s : segments) {
    Result<std::vector<std::byte>> file = ReadWhole(env, dir + "/" + s.name);
    if (!file.ok()) return file.status();
    ++report.segments;
    s.file_bytes = file->size();
    report.segment_bytes += s.file_bytes;
    Result<SegmentHeader> header =
        DecodeSegmentHeader(std::span<const std::byte>(*file).first(
            std::min<size_t>(file->size(), kSegmentHeaderBytes)));
    if (header.status().code() == StatusCode::kFailedPrecondition) {
      return Status::FailedPrecondition(dir + "/" + s.name + ": " +
                                        std::string(header.status().message()));
    }
    if (!header.ok() || header->segment_id != s.id) {
      ++report.bad_segments;
      report.problems.push_back(s.name + ": " +
                                (header.ok() ? std::string("header names segment ") +
                                                   std::to_string(header->segment_id)
                                             : std::string(header.status().message())) +
                                "; an open removes it");
      if (repair) {
        KVTIER_RETURN_IF_ERROR(env->RemoveFile(dir + "/" + s.name));
        ++report.removed_segments;
      }
      continue;
    }
    ScanSegment(*file, &s, &report);
    (s.sealed ? report.sealed_segments : report.unsealed_segments)++;
    usable.push_back(std::move(s));
  }

  MarkLive(&usable);
  for (const Segment& s : usable) {
    uint64_t live = 0;
    for (const Record& r : s.records) {
      ++report.records;
      (r.header.kind == RecordKind::kBlock ? report.blocks : report.tombstones)++;
      if (!r.live) {
        ++report.dead_records;
        continue;
      }
      ++live;
      if (r.header.kind != RecordKind::kBlock) continue;
      ++report.live_blocks;
      DiskCheckReport::Tenant& t = report.tenants[r.header.tenant];
      ++t.live_blocks;
      t.live_value_bytes += r.header.value_bytes;
      t.live_stored_bytes += r.header.stored_bytes;
    }
    const bool orphan = live == 0;
    if (orphan && !s.damaged) ++report.orphan_segments;
    if (!repair) continue;
    const std::string path = dir + "/" + s.name;
    if (orphan) {
      report.dropped_records += s.bad_records;
      KVTIER_RETURN_IF_ERROR(env->RemoveFile(path));
      KVTIER_RETURN_IF_ERROR(env->SyncDir(dir));
      ++report.removed_segments;
    } else if (s.damaged || !s.sealed) {
      report.dropped_records += s.bad_records;
      Result<std::vector<std::byte>> file = ReadWhole(env, path);
      if (!file.ok()) return file.status();
      KVTIER_RETURN_IF_ERROR(Rewrite(env, dir, s, *file, ++max_id));
      ++report.rewritten_segments;
    }
  }
  return report;
}

}  // namespace kvtier::disk
