#include "src/tier/disk/disk_tier_impl.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include "src/common/checksum.h"
#include "src/env/sync_io_queue.h"

namespace kvtier {

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options,
                                                 std::vector<DiskTenantConfig> tenants, Env* env,
                                                 BlockCodec* codec) {
  return disk::DiskTierImpl::Open(options, std::move(tenants), env, codec);
}

namespace disk {
namespace {

constexpr size_t kMaxPooledQueues = 16;
constexpr size_t kMaxPooledBuffers = 64;
constexpr size_t kMaxPooledBytes = 96 * kMiB;

std::vector<std::string> Names(const std::vector<DiskTenantConfig>& tenants) {
  std::vector<std::string> names;
  for (const DiskTenantConfig& t : tenants) names.push_back(t.name);
  return names;
}

}  // namespace

Status DiskTierImpl::CheckOptions(const DiskTierOptions& o,
                                  const std::vector<DiskTenantConfig>& tenants) {
  if (o.dir.empty()) return Status::InvalidArgument("disk tier: dir is empty");
  if (o.segment_bytes % kPageBytes != 0 || o.segment_bytes < 16 * kPageBytes ||
      o.segment_bytes > 4 * kGiB) {
    return Status::InvalidArgument(
        "disk tier: segment_bytes must be a multiple of 4 KiB from 64 KiB to 4 GiB, got " +
        std::to_string(o.segment_bytes));
  }
  if (o.capacity_bytes / o.segment_bytes < 2) {
    return Status::InvalidArgument("disk tier: capacity_bytes must hold at least two segments");
  }
  if (o.io_depth == 0 || o.io_depth > 4096) {
    return Status::InvalidArgument("disk tier: io_depth must be 1 to 4096");
  }
  if (tenants.empty() || tenants.size() > UINT16_MAX) {
    return Status::InvalidArgument("disk tier: 1 to 65535 tenants required");
  }
  std::set<std::string> seen;
  for (const DiskTenantConfig& t : tenants) {
    if (t.name.empty() || t.name.size() > kMaxTenantNameBytes) {
      return Status::InvalidArgument("disk tier: tenant names must be 1 to 255 bytes");
    }
    if (!seen.insert(t.name).second) {
      return Status::InvalidArgument("disk tier: duplicate tenant " + t.name);
    }
  }
  return Status::OK();
}

Result<std::unique_ptr<DiskTier>> DiskTierImpl::Open(const DiskTierOptions& options,
                                                     std::vector<DiskTenantConfig> tenants,
                                                     Env* env, BlockCodec* codec) {
  KVTIER_RETURN_IF_ERROR(CheckOptions(options, tenants));
  if (env == nullptr) env = Env::Default();
  KVTIER_RETURN_IF_ERROR(env->CreateDir(options.dir));
  // A G3 larger than its file system fills the disk before its capacity: it then stops taking
  // writes and serves on (a file system may also grow later), so this is said, not refused.
  // (An Env without real files has no statvfs.)
  struct statvfs fs {};
  if (::statvfs(options.dir.c_str(), &fs) == 0 && fs.f_blocks > 0 &&
      options.capacity_bytes > uint64_t{fs.f_blocks} * fs.f_frsize) {
    env->Log("G3: capacity_bytes of " + std::to_string(options.capacity_bytes) +
             " is more than the file system of " + options.dir + " holds (" +
             std::to_string(uint64_t{fs.f_blocks} * fs.f_frsize) +
             " bytes): G3 stops taking writes when the disk is full, before its capacity");
  }
  Result<std::unique_ptr<FileLock>> lock = env->LockFile(options.dir + "/LOCK");
  if (!lock.ok()) return lock.status();
  std::unique_ptr<DiskTierImpl> tier(
      new DiskTierImpl(options, std::move(tenants), env, codec));
  tier->lock_ = std::move(lock).value();
  {
    MutexLock w(&tier->write_mu_);
    KVTIER_RETURN_IF_ERROR(tier->Recover());
  }
  std::unique_ptr<IoQueue> queue = tier->TakeQueue();
  tier->io_uring_ = queue->is_io_uring();
  tier->ReturnQueue(std::move(queue));
  return std::unique_ptr<DiskTier>(std::move(tier));
}

DiskTierImpl::DiskTierImpl(const DiskTierOptions& options, std::vector<DiskTenantConfig> tenants,
                           Env* env, BlockCodec* codec)
    : options_(options),
      env_(env),
      codec_(codec),
      codec_pool_(codec == nullptr
                      ? 0
                      : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8) - 1),
      max_segments_(options.capacity_bytes / options.segment_bytes),
      tenant_table_bytes_(TenantTableBytes(Names(tenants))),
      tenant_names_(Names(tenants)),
      index_(tenants.size()) {
  MutexLock l(&mu_);
  for (DiskTenantConfig& t : tenants) tenants_.push_back(TenantState{std::move(t), 0});
  stats_.capacity_bytes = max_segments_ * options.segment_bytes;
}

DiskTierImpl::~DiskTierImpl() {
  MutexLock w(&write_mu_);
  // A footer makes the next open read one footer instead of scanning the segment. Failing to
  // write it loses nothing: recovery scans the records.
  if (has_open_) static_cast<void>(SealOpenSegment());
}

std::string DiskTierImpl::SegmentPath(uint32_t id) const {
  char name[32];
  std::snprintf(name, sizeof(name), "/%010u.seg", id);
  return options_.dir + name;
}

int DiskTierImpl::TenantIndex(const std::string& name) const {
  for (size_t i = 0; i < tenant_names_.size(); ++i) {
    if (tenant_names_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

bool DiskTierImpl::Expired(const DiskEntry& e, uint64_t now) const {
  const DiskTenantConfig& config = tenants_[e.tenant].config;
  const bool idle = config.ttl_us != 0 && now > e.last_access_us &&
                    now - e.last_access_us > config.ttl_us;
  const bool old = config.max_age_us != 0 && now > e.created_us &&
                   now - e.created_us > config.max_age_us;
  return idle || old;
}

uint64_t DiskTierImpl::MaxStoredBytes(uint64_t value_bytes) const {
  return codec_ == nullptr ? value_bytes : codec_->MaxEncodedBytes(value_bytes);
}

uint32_t DiskTierImpl::FindLive(uint32_t tenant, const BlockKey& key, uint64_t now) {
  uint32_t idx = index_.Find(static_cast<uint16_t>(tenant), key);
  if (idx != kNoEntry && Expired(index_.at(idx), now)) {
    Drop(idx, DropReason::kExpired);
    return kNoEntry;
  }
  return idx;
}

uint32_t DiskTierImpl::AddEntry(const DiskEntry& e) {
  const uint64_t bytes = uint64_t{e.record_pages} * kPageBytes;
  segments_[e.segment].live_bytes += bytes;
  tenants_[e.tenant].used_bytes += bytes;
  stats_.logical_bytes += e.value_bytes;
  stats_.stored_bytes += e.stored_bytes;
  return index_.Insert(e);
}

void DiskTierImpl::Drop(uint32_t index, DropReason reason) {
  const DiskEntry& e = index_.at(index);
  const uint64_t bytes = uint64_t{e.record_pages} * kPageBytes;
  auto seg = segments_.find(e.segment);
  if (seg != segments_.end()) seg->second.live_bytes -= bytes;
  tenants_[e.tenant].used_bytes -= bytes;
  stats_.logical_bytes -= e.value_bytes;
  stats_.stored_bytes -= e.stored_bytes;
  switch (reason) {
    case DropReason::kEvicted: ++stats_.evictions; break;
    case DropReason::kExpired: ++stats_.expirations; break;
    case DropReason::kCorrupt: ++stats_.corrupt_records; break;
    case DropReason::kUnreadable: ++stats_.unreadable_records; break;
    case DropReason::kReadError: ++stats_.read_errors; break;
    case DropReason::kDeleted: break;
    case DropReason::kReplaced: break;
  }
  if (events_ != nullptr && reason != DropReason::kReplaced) {
    events_->OnRemoved(e.tenant, e.key, BlockMedium::kDisk);
  }
  index_.Remove(index);
}

void DiskTierImpl::DropIfAt(uint32_t tenant, const BlockKey& key, uint32_t segment,
                            uint32_t offset_pages, DropReason reason) {
  uint32_t idx = index_.Find(static_cast<uint16_t>(tenant), key);
  if (idx == kNoEntry) return;
  const DiskEntry& e = index_.at(idx);
  if (e.segment == segment && e.offset_pages == offset_pages) Drop(idx, reason);
}

Result<size_t> DiskTierImpl::BlockSize(uint32_t tenant, const BlockKey& key) {
  if (!ValidTenant(tenant)) return Status::InvalidArgument("disk tier: unknown tenant");
  MutexLock l(&mu_);
  uint32_t idx = FindLive(tenant, key, env_->NowMicros());
  if (idx == kNoEntry) return Status::NotFound("block not on disk");
  return static_cast<size_t>(index_.at(idx).value_bytes);
}

Result<DiskBlockInfo> DiskTierImpl::Describe(uint32_t tenant, const BlockKey& key) {
  if (!ValidTenant(tenant)) return Status::InvalidArgument("disk tier: unknown tenant");
  MutexLock l(&mu_);
  uint32_t idx = FindLive(tenant, key, env_->NowMicros());
  if (idx == kNoEntry) return Status::NotFound("block not on disk");
  const DiskEntry& e = index_.at(idx);
  DiskBlockInfo info;
  info.value_bytes = e.value_bytes;
  info.session = e.session;
  info.created_us = e.created_us;
  if (e.dtype != kDtypeUnknown) info.dtype = static_cast<KvDtype>(e.dtype);
  return info;
}

size_t DiskTierImpl::LookupPrefix(uint32_t tenant, std::span<const BlockKey> keys) {
  if (!ValidTenant(tenant)) return 0;
  MutexLock l(&mu_);
  const uint64_t now = env_->NowMicros();
  size_t n = 0;
  for (const BlockKey& key : keys) {
    uint32_t idx = FindLive(tenant, key, now);
    if (idx == kNoEntry) break;
    DiskEntry& e = index_.at(idx);
    e.accessed = true;
    e.last_access_us = std::max(e.last_access_us, now);
    ++n;
  }
  return n;
}

DiskTierImpl::ReadOutcome DiskTierImpl::DecodeBlock(std::span<std::byte> record, uint32_t tenant,
                                                    const BlockKey& key, uint32_t value_bytes,
                                                    std::span<std::byte> out) const {
  ReadOutcome bad{Status::DataLoss(""), DropReason::kCorrupt, true};
  size_t header_bytes = 0;
  Result<RecordHeader> h = DecodeRecordHeader(record, &header_bytes);
  if (!h.ok()) {
    bad.status = h.status();
    return bad;
  }
  if (h->kind != RecordKind::kBlock || h->key != key || h->tenant != tenant_names_[tenant] ||
      h->value_bytes != value_bytes || header_bytes + h->stored_bytes > record.size()) {
    bad.status = Status::DataLoss("record does not match its index entry");
    return bad;
  }
  std::span<std::byte> payload = record.subspan(header_bytes, h->stored_bytes);
  if (Checksum64(payload) != h->payload_checksum) {
    bad.status = Status::DataLoss("payload checksum mismatch");
    return bad;
  }
  std::span<std::byte> value = out.first(value_bytes);
  const bool encoded = (h->flags & kFlagEncrypted) != 0 || h->codec != kCodecNone;
  Status s;
  if (codec_ != nullptr) {
    PayloadInfo info;
    info.codec = h->codec;
    info.encrypted = (h->flags & kFlagEncrypted) != 0;
    info.key_version = h->key_version;
    info.nonce = h->nonce;
    info.tag = h->tag;
    s = codec_->Decode(kFormatVersion, h->tenant, key, info, payload, value);
  } else if (encoded) {
    s = Status::FailedPrecondition("record was compressed or encrypted, and this tier has no "
                                   "block codec");
  } else {
    std::memcpy(value.data(), payload.data(), value.size());
  }
  if (s.ok()) return ReadOutcome{};
  ReadOutcome failed{s, DropReason::kCorrupt, false};
  switch (s.code()) {
    case StatusCode::kDataLoss:
    case StatusCode::kInvalidArgument:
      failed.drop_entry = true;
      break;
    case StatusCode::kFailedPrecondition:  // Shredded (BlockCodec::IsShredded), or no codec.
    case StatusCode::kNotFound:            // A key version the keystore never had.
      failed.drop = DropReason::kUnreadable;
      failed.drop_entry = true;
      break;
    default:  // Out of memory, a key store I/O error: the record may be fine; keep it.
      break;
  }
  return failed;
}

std::vector<Result<size_t>> DiskTierImpl::ReadMany(uint32_t tenant,
                                                   std::span<const BlockKey> keys,
                                                   std::span<const std::span<std::byte>> outs) {
  const size_t n = keys.size();
  if (!ValidTenant(tenant)) {
    return std::vector<Result<size_t>>(n, Status::InvalidArgument("disk tier: unknown tenant"));
  }
  if (outs.size() != n) {
    return std::vector<Result<size_t>>(
        n, Status::InvalidArgument("disk tier: one output buffer per key required"));
  }
  std::vector<Result<size_t>> results(n, Status::NotFound("block not on disk"));
  std::vector<Location> locs(n);
  {
    MutexLock l(&mu_);
    const uint64_t now = env_->NowMicros();
    for (size_t i = 0; i < n; ++i) {
      uint32_t idx = FindLive(tenant, keys[i], now);
      if (idx == kNoEntry) {
        ++stats_.misses;
        continue;
      }
      DiskEntry& e = index_.at(idx);
      if (outs[i].size() < e.value_bytes) {
        results[i] = Status::InvalidArgument("output buffer of " + std::to_string(outs[i].size()) +
                                             " bytes for a block of " +
                                             std::to_string(e.value_bytes));
        continue;
      }
      auto seg = segments_.find(e.segment);
      if (seg == segments_.end()) {
        results[i] = Status::Internal("disk tier: index entry names a missing segment");
        continue;
      }
      e.accessed = true;
      e.last_access_us = std::max(e.last_access_us, now);
      locs[i] = Location{seg->second.file, e.segment, e.offset_pages, e.record_pages,
                         e.value_bytes};
    }
  }

  std::unique_ptr<IoQueue> queue = TakeQueue();
  std::vector<AlignedBuffer> bufs(n);
  std::vector<IoCompletion> done;
  std::vector<DropReason> failure(n, DropReason::kEvicted);
  std::vector<bool> failed(n, false);
  uint64_t hits = 0;
  uint64_t kept_failures = 0;  // Failed reads of blocks that stay indexed.
  uint64_t read_bytes = 0;
  size_t handled = 0;
  // Completed reads not yet verified and decoded, as indexes into `done`. With a codec they
  // wait until there is one per thread of codec_pool_, then are decoded together; later reads
  // stay in flight meanwhile.
  std::vector<size_t> ready;
  const size_t decode_batch = codec_ == nullptr ? 1 : codec_pool_.parallelism();
  std::vector<ReadOutcome> got;
  auto decode_ready = [&] {
    got.assign(ready.size(), ReadOutcome{});
    auto decode = [&](size_t j) {
      const IoCompletion& c = done[ready[j]];
      const auto i = static_cast<size_t>(c.tag);
      got[j] = DecodeBlock(bufs[i].prefix(std::min(c.bytes, bufs[i].size())), tenant, keys[i],
                           locs[i].value_bytes, outs[i]);
    };
    if (ready.size() > 1) {
      codec_pool_.ParallelFor(ready.size(), decode);
    } else if (ready.size() == 1) {
      decode(0);
    }
    for (size_t j = 0; j < ready.size(); ++j) {
      const auto i = static_cast<size_t>(done[ready[j]].tag);
      if (got[j].status.ok()) {
        results[i] = size_t{locs[i].value_bytes};
        ++hits;
        read_bytes += locs[i].value_bytes;
      } else if (got[j].drop_entry) {
        failed[i] = true;
        failure[i] = got[j].drop;
      } else {
        results[i] = std::move(got[j].status);
        ++kept_failures;
      }
      ReturnBuffer(std::move(bufs[i]));
    }
    ready.clear();
  };
  auto handle_completions = [&](bool last) {
    for (; handled < done.size(); ++handled) {
      const IoCompletion& c = done[handled];
      if (c.status.ok()) {
        ready.push_back(handled);
        continue;
      }
      const auto i = static_cast<size_t>(c.tag);
      failed[i] = true;
      failure[i] = DropReason::kReadError;
      ReturnBuffer(std::move(bufs[i]));
    }
    if (last || ready.size() >= decode_batch) decode_ready();
  };
  for (size_t i = 0; i < n; ++i) {
    if (locs[i].file == nullptr) continue;
    const size_t bytes = size_t{locs[i].record_pages} * kPageBytes;
    bufs[i] = TakeBuffer(bytes);
    if (bufs[i].size() == 0) {
      results[i] = Status::ResourceExhausted("disk tier: no memory for a read buffer");
      locs[i].file = nullptr;
      continue;
    }
    IoOp op{locs[i].file.get(), false, uint64_t{locs[i].offset_pages} * kPageBytes,
            bufs[i].prefix(bytes), i};
    Status s = queue->Submit(op, &done);
    if (!s.ok()) done.push_back(IoCompletion{i, std::move(s), 0});
    handle_completions(false);
  }
  while (queue->WaitSome(&done)) handle_completions(false);
  handle_completions(true);
  ReturnQueue(std::move(queue));

  MutexLock l(&mu_);
  stats_.hits += hits;
  stats_.misses += kept_failures;
  stats_.read_bytes += read_bytes;
  for (size_t i = 0; i < n; ++i) {
    if (!failed[i]) continue;
    ++stats_.misses;
    DropIfAt(tenant, keys[i], locs[i].segment, locs[i].offset_pages, failure[i]);
  }
  return results;
}

Status DiskTierImpl::Erase(uint32_t tenant, const BlockKey& key) {
  if (!ValidTenant(tenant)) return Status::InvalidArgument("disk tier: unknown tenant");
  MutexLock w(&write_mu_);
  bool present = false;
  {
    MutexLock l(&mu_);
    uint32_t idx = FindLive(tenant, key, env_->NowMicros());
    if (idx != kNoEntry) {
      present = true;
      Drop(idx, DropReason::kDeleted);
    }
  }
  // Written even when the index has no entry: an evicted copy may still sit in a segment and
  // must not come back at the next open.
  KVTIER_RETURN_IF_ERROR(
      WriteTombstone(Tombstone(RecordKind::kEraseKey, tenant, key), "block no longer served"));
  return present ? Status::OK() : Status::NotFound("block not on disk");
}

Status DiskTierImpl::WriteTombstone(PendingRecord tombstone, const std::string& what) {
  std::vector<PendingRecord> records;
  records.push_back(std::move(tombstone));
  AppendRecords(records);
  if (records[0].status.ok()) return Status::OK();
  return Status(records[0].status.code(),
                what + ", but the deletion was not recorded on disk (it may return after a "
                       "restart): " + std::string(records[0].status.message()));
}

std::vector<BlockKey> DiskTierImpl::ListKeys(uint32_t tenant, uint64_t* cursor, size_t slots) {
  std::vector<BlockKey> keys;
  MutexLock l(&mu_);
  const uint64_t end = std::min<uint64_t>(index_.SlabSize(), *cursor + slots);
  for (uint64_t i = *cursor; i < end; ++i) {
    const disk::DiskEntry& e = index_.at(static_cast<uint32_t>(i));
    if (e.in_use && e.tenant == tenant) keys.push_back(e.key);
  }
  *cursor = end < index_.SlabSize() ? end : kEndOfKeys;
  return keys;
}

Result<uint64_t> DiskTierImpl::EraseTenant(uint32_t tenant) {
  if (!ValidTenant(tenant)) return Status::InvalidArgument("disk tier: unknown tenant");
  MutexLock w(&write_mu_);
  uint64_t removed = 0;
  {
    MutexLock l(&mu_);
    const auto t = static_cast<uint16_t>(tenant);
    for (uint32_t idx = index_.Front(t); idx != kNoEntry; idx = index_.Front(t)) {
      Drop(idx, DropReason::kDeleted);
      ++removed;
    }
  }
  KVTIER_RETURN_IF_ERROR(WriteTombstone(Tombstone(RecordKind::kEraseTenant, tenant, BlockKey()),
                                        "tenant's blocks no longer served"));
  return removed;
}

Result<uint64_t> DiskTierImpl::EraseSession(uint32_t tenant, SessionId session) {
  if (!ValidTenant(tenant)) return Status::InvalidArgument("disk tier: unknown tenant");
  if (session == 0) return Status::InvalidArgument("disk tier: session 0 names no session");
  MutexLock w(&write_mu_);
  uint64_t removed = 0;
  {
    MutexLock l(&mu_);
    const auto t = static_cast<uint16_t>(tenant);
    for (uint32_t idx = index_.Front(t); idx != kNoEntry;) {
      const uint32_t next = index_.at(idx).next;
      if (index_.at(idx).session == session) {
        Drop(idx, DropReason::kDeleted);
        ++removed;
      }
      idx = next;
    }
  }
  // Written even when nothing was indexed: evicted copies may still sit in segments.
  KVTIER_RETURN_IF_ERROR(
      WriteTombstone(Tombstone(RecordKind::kEraseSession, tenant, BlockKey(), session),
                     "session's blocks no longer served"));
  return removed;
}

size_t DiskTierImpl::PurgeExpired() {
  MutexLock l(&mu_);
  const uint64_t now = env_->NowMicros();
  size_t purged = 0;
  for (uint32_t i = 0; i < index_.SlabSize(); ++i) {
    if (index_.at(i).in_use && Expired(index_.at(i), now)) {
      Drop(i, DropReason::kExpired);
      ++purged;
    }
  }
  return purged;
}

Status DiskTierImpl::Sync() {
  MutexLock w(&write_mu_);
  if (has_open_) KVTIER_RETURN_IF_ERROR(SyncOpenSegment());
  std::vector<std::shared_ptr<File>> files;
  {
    MutexLock l(&mu_);
    for (const auto& [id, seg] : segments_) files.push_back(seg.file);
  }
  // Sealed segments may hold footers and records written without a sync (kWritten).
  for (const std::shared_ptr<File>& f : files) KVTIER_RETURN_IF_ERROR(f->Sync());
  if (!dir_synced_) {
    KVTIER_RETURN_IF_ERROR(env_->SyncDir(options_.dir));
    dir_synced_ = true;
  }
  return Status::OK();
}

DiskTierStats DiskTierImpl::Stats() const {
  MutexLock l(&mu_);
  DiskTierStats s = stats_;
  s.blocks = index_.size();
  s.used_bytes = 0;
  s.live_bytes = 0;
  for (const auto& [id, seg] : segments_) {
    s.used_bytes += seg.file_bytes;
    s.live_bytes += seg.live_bytes;
  }
  s.segments = segments_.size();
  s.index_memory_bytes = index_.MemoryBytes();
  s.io_uring = io_uring_;
  return s;
}

std::unique_ptr<IoQueue> DiskTierImpl::TakeQueue() {
  {
    MutexLock l(&pool_mu_);
    if (!queues_.empty()) {
      std::unique_ptr<IoQueue> q = std::move(queues_.back());
      queues_.pop_back();
      return q;
    }
  }
  Result<std::unique_ptr<IoQueue>> q = env_->NewIoQueue(options_.io_depth, options_.use_io_uring);
  if (q.ok()) return std::move(q).value();
  return NewSyncIoQueue(options_.io_depth);
}

void DiskTierImpl::ReturnQueue(std::unique_ptr<IoQueue> q) {
  MutexLock l(&pool_mu_);
  if (queues_.size() < kMaxPooledQueues) queues_.push_back(std::move(q));
}

AlignedBuffer DiskTierImpl::TakeBuffer(size_t bytes) {
  {
    MutexLock l(&pool_mu_);
    // The smallest pooled buffer that is large enough, if it is not wastefully large.
    size_t best = buffers_.size();
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const size_t size = buffers_[i].size();
      if (size >= bytes && size <= 2 * bytes + kPageBytes &&
          (best == buffers_.size() || size < buffers_[best].size())) {
        best = i;
      }
    }
    if (best != buffers_.size()) {
      std::swap(buffers_[best], buffers_.back());
      AlignedBuffer b = std::move(buffers_.back());
      buffers_.pop_back();
      pooled_bytes_ -= b.size();
      return b;
    }
  }
  return AlignedBuffer(bytes);
}

void DiskTierImpl::ReturnBuffer(AlignedBuffer buf) {
  if (buf.size() == 0) return;
  MutexLock l(&pool_mu_);
  if (buffers_.size() < kMaxPooledBuffers && pooled_bytes_ + buf.size() <= kMaxPooledBytes) {
    pooled_bytes_ += buf.size();
    buffers_.push_back(std::move(buf));
  }
}

}  // namespace disk
}  // namespace kvtier
