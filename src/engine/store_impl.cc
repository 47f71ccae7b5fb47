#include "src/engine/store_impl.h"

#include <chrono>
#include <string>
#include <utility>

#include "src/tier/shared/object_format.h"

namespace kvtier {
namespace {

template <typename T, typename Fn>
std::vector<T> ForEachKey(std::span<const BlockKey> keys, Fn fn) {
  std::vector<T> out;
  out.reserve(keys.size());
  for (const BlockKey& key : keys) out.push_back(fn(key));
  return out;
}

BlockMeta MetaOf(const DiskBlockInfo& info) {
  return {info.session, info.created_us, info.dtype};
}

Status BufferTooSmall(size_t buffer, size_t block) {
  return Status::OutOfRange("buffer of " + std::to_string(buffer) +
                            " bytes is smaller than the block (" + std::to_string(block) +
                            " bytes)");
}

}  // namespace

namespace {

std::vector<std::string> TenantNames(const Options& o) {
  std::vector<std::string> names;
  for (const TenantOptions& t : o.tenants) names.push_back(t.name);
  return names;
}

constexpr size_t kMaxUploadQueue = 4096;

}  // namespace

StoreImpl::StoreImpl(const Options& options, StoreServices services,
                     std::unique_ptr<MemoryTier> memory, std::unique_ptr<DiskTier> disk,
                     std::unique_ptr<SharedTier> shared)
    : options_(options),
      services_(std::move(services)),
      memory_(std::move(memory)),
      disk_(std::move(disk)),
      shared_(std::move(shared)),
      tenant_names_(TenantNames(options_)) {
  for (uint32_t i = 0; i < options_.tenants.size(); ++i) {
    tenant_ids_.emplace(options_.tenants[i].name, i);
  }
  memory_->set_event_listener(options_.event_listener);
  if (disk_) disk_->SetEventListener(options_.event_listener);
  if (shared_) {
    uploader_ = std::make_unique<SharedUploader>(memory_.get(), shared_.get(), tenant_names_,
                                                 kMaxUploadQueue,
                                                 options_.shared.upload_buffer_bytes,
                                                 options_.event_listener);
  }
  if (options_.eviction_observer != nullptr) {
    memory_->ObserveEvictions(options_.disk_admission, options_.eviction_observer);
  }
  SharedUploader* demote_to_shared = shared_on_put() ? nullptr : uploader_.get();
  if (disk_ || demote_to_shared != nullptr) {
    memory_->EnableDemotion(options_.disk_admission);
    demoter_ = std::make_unique<Demoter>(memory_.get(), disk_.get(), demote_to_shared);
  }
  if (shared_) {
    node_id_ = options_.shared.node_id.empty() ? g4::DefaultNodeId() : options_.shared.node_id;
    CatchUpOnNotices();
  }
  if (options_.retention_scan_seconds != 0) {
    StartLoop(std::chrono::seconds(options_.retention_scan_seconds), [this] { PurgeExpired(); });
  }
  if (shared_ && options_.shared.notice_poll_ms != 0) {
    StartLoop(std::chrono::milliseconds(options_.shared.notice_poll_ms), [this] {
      Result<uint64_t> applied = ApplyDeletionNotices();
      if (!applied.ok()) options_.env->Log("deletion notices: " + applied.status().ToString());
    });
  }
  if (shared_ && options_.shared.report_ms != 0) {
    StartLoop(std::chrono::milliseconds(options_.shared.report_ms), [this] { ReportToFleet(); });
  }
}

StoreImpl::~StoreImpl() {
  {
    MutexLock l(&loop_mu_);
    stopping_ = true;
  }
  loop_cv_.SignalAll();
  for (std::thread& t : loops_) t.join();
  if (shared_ && disk_) {
    MutexLock l(&notice_mu_);
    SaveNoticeState(options_.env->NowMicros());
  }
  if (shared_) {
    // A node that stops cleanly leaves the fleet's view.
    std::string report;
    {
      MutexLock l(&fleet_mu_);
      report = fleet_report_name_;
    }
    if (!report.empty()) (void)shared_->DeleteRecord(report);
  }
}

void StoreImpl::StartLoop(std::chrono::milliseconds interval, std::function<void()> work) {
  loops_.emplace_back([this, interval, work = std::move(work)] {
    for (;;) {
      {
        MutexLock l(&loop_mu_);
        if (!stopping_) loop_cv_.WaitFor(&loop_mu_, interval);
        if (stopping_) return;
      }
      work();
    }
  });
}

void StoreImpl::Audit(const audit::AuditEvent& event) {
  if (!services_.audit) return;
  Status s = services_.audit->Append(event);
  if (!s.ok()) options_.env->Log("audit log append failed: " + s.ToString());
}

Status StoreImpl::RecordAuthFailure(std::string_view tenant, std::string_view peer,
                                    std::string_view protocol, bool lockout) {
  if (!services_.audit) return Status::OK();
  audit::AuditEvent event;
  event.op = lockout ? audit::AuditOp::kAuthLockout : audit::AuditOp::kAuthFailure;
  event.scope = audit::AuditScope::kNode;
  event.tenant = std::string(tenant);
  event.actor = std::string(peer);
  event.scope_id = std::string(protocol);
  event.result = StatusCode::kUnauthenticated;
  return services_.audit->Append(event);
}

Result<TenantId> StoreImpl::FindTenant(std::string_view name) const {
  auto it = tenant_ids_.find(std::string(name));
  if (it == tenant_ids_.end()) return Status::NotFound("unknown tenant '" + std::string(name) + "'");
  return TenantId{it->second};
}

Status StoreImpl::CheckTenant(TenantId tenant) const {
  if (tenant.value >= options_.tenants.size()) {
    return Status::InvalidArgument("unknown tenant id " + std::to_string(tenant.value));
  }
  return Status::OK();
}

Status StoreImpl::CheckValue(std::span<const std::byte> value) const {
  if (value.empty()) return Status::InvalidArgument("block value is empty");
  if (value.size() > options_.max_block_bytes) {
    return Status::InvalidArgument("block of " + std::to_string(value.size()) +
                                   " bytes is over max_block_bytes (" +
                                   std::to_string(options_.max_block_bytes) + ")");
  }
  return Status::OK();
}

Status StoreImpl::Put(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
                      const PutOptions& options) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  KVTIER_RETURN_IF_ERROR(CheckWrite({key, value, options.parent, options.session, options.dtype,
                                     options.engine_hash, options.role}));
  Status s = memory_->Put(tenant.value, key, value, options.parent ? &*options.parent : nullptr,
                         {options.session, 0, options.dtype, false, options.engine_hash,
                          options.role});
  if (s.ok() && shared_on_put()) uploader_->Enqueue(tenant.value, key);
  return s;
}

std::optional<SharedArena> StoreImpl::shared_arena(TenantId tenant) const {
  const Arena* arena = memory_->arena();
  if (arena == nullptr || tenant.value >= arena->regions()) return std::nullopt;
  return SharedArena{arena->read_only_fd(tenant.value), arena->base(tenant.value),
                     arena->region_bytes()};
}

Result<BlockAllocation> StoreImpl::Allocate(TenantId tenant, const BlockKey& key, size_t size,
                                            const std::optional<BlockKey>& parent) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  if (size == 0 || size > options_.max_block_bytes) {
    return Status::InvalidArgument("block of " + std::to_string(size) +
                                   " bytes is empty or over max_block_bytes (" +
                                   std::to_string(options_.max_block_bytes) + ")");
  }
  std::vector<std::span<std::byte>> spans;
  Result<uint64_t> id =
      memory_->Reserve(tenant.value, key, size, parent ? &*parent : nullptr, &spans);
  if (!id.ok()) return id.status();
  return BlockAllocation(this, *id, tenant, key, size, std::move(spans));
}

Status StoreImpl::Commit(BlockAllocation allocation, const PutOptions& options) {
  if (!allocation.valid()) return Status::InvalidArgument("allocation is not valid");
  const uint64_t id = allocation.id();
  allocation.Release();  // From here the reservation is ours to publish.
  const TenantId tenant = allocation.tenant();
  const BlockKey key = allocation.key();
  Status s = memory_->CommitReserved(id, options.parent ? &*options.parent : nullptr,
                                     {options.session, 0, options.dtype, false,
                                      options.engine_hash, options.role});
  if (s.ok() && shared_on_put()) uploader_->Enqueue(tenant.value, key);
  return s;
}

std::vector<Status> StoreImpl::PutMany(TenantId tenant, std::span<const BlockWrite> writes) {
  std::vector<Status> out;
  out.reserve(writes.size());
  for (const BlockWrite& w : writes) {
    out.push_back(
        Put(tenant, w.key, w.value, {w.parent, w.session, w.dtype, w.engine_hash, w.role}));
  }
  return out;
}

Result<std::vector<std::byte>> StoreImpl::ReadFromDisk(TenantId tenant, const BlockKey& key,
                                                       BlockMeta* meta) {
  if (!disk_) return Status::NotFound("block not stored");
  Result<DiskBlockInfo> info = disk_->Describe(tenant.value, key);
  if (!info.ok()) return info.status();
  *meta = MetaOf(*info);
  std::vector<std::byte> buffer(info->value_bytes);
  std::span<std::byte> out(buffer);
  std::vector<Result<size_t>> read = disk_->ReadMany(tenant.value, std::span(&key, 1),
                                                     std::span(&out, 1));
  if (!read[0].ok()) return read[0].status();
  buffer.resize(*read[0]);
  return buffer;
}

bool StoreImpl::PastMaxAge(TenantId tenant, uint64_t created_us, uint64_t now_us) const {
  const uint64_t max_age_us = options_.tenants[tenant.value].max_age_seconds * 1000000;
  return max_age_us != 0 && now_us > created_us && now_us - created_us > max_age_us;
}

std::optional<SharedObjectInfo> StoreImpl::KnownInSharedNow(const TenantKey& key,
                                                            uint64_t now_us) {
  if (options_.shared.exists_cache_ms == 0) return std::nullopt;
  MutexLock l(&known_mu_);
  auto it = known_in_shared_.find(key);
  if (it == known_in_shared_.end() || it->second.until_us <= now_us) return std::nullopt;
  shared_checks_cached_.fetch_add(1, std::memory_order_relaxed);
  return it->second.info;
}

void StoreImpl::RememberInShared(const TenantKey& key, const SharedObjectInfo& info,
                                 uint64_t now_us) {
  if (options_.shared.exists_cache_ms == 0) return;
  MutexLock l(&known_mu_);
  if (known_in_shared_.size() >= kMaxKnownInShared) {
    std::erase_if(known_in_shared_, [&](const auto& e) { return e.second.until_us <= now_us; });
    if (known_in_shared_.size() >= kMaxKnownInShared) known_in_shared_.clear();
  }
  known_in_shared_[key] = {info, now_us + options_.shared.exists_cache_ms * 1000};
}

void StoreImpl::ForgetInShared(const TenantKey& key) {
  MutexLock l(&known_mu_);
  known_in_shared_.erase(key);
}

std::vector<std::optional<SharedObjectInfo>> StoreImpl::InfoInShared(
    TenantId tenant, std::span<const BlockKey> keys, uint64_t now_us) {
  std::vector<std::optional<SharedObjectInfo>> info(keys.size());
  std::vector<TenantKey> flight_keys;  // Of the keys G4 is asked about.
  std::vector<size_t> asked;
  for (size_t i = 0; i < keys.size(); ++i) {
    const TenantKey k = InFlightKey(tenant, keys[i]);
    info[i] = KnownInSharedNow(k, now_us);
    if (info[i]) continue;
    flight_keys.push_back(k);
    asked.push_back(i);
  }
  size_t followed = 0;
  std::vector<std::optional<SharedObjectInfo>> answers = shared_checks_.DoMany(
      flight_keys,
      [&](std::span<const size_t> led) {
        std::vector<BlockKey> ask;
        ask.reserve(led.size());
        for (size_t j : led) ask.push_back(keys[asked[j]]);
        std::vector<std::optional<SharedObjectInfo>> found =
            shared_->ExistsMany(TenantName(tenant), ask);
        for (size_t j = 0; j < led.size(); ++j) {
          if (found[j]) RememberInShared(flight_keys[led[j]], *found[j], now_us);
        }
        return found;
      },
      &followed);
  if (followed > 0) shared_checks_coalesced_.fetch_add(followed, std::memory_order_relaxed);
  for (size_t j = 0; j < asked.size(); ++j) info[asked[j]] = std::move(answers[j]);
  return info;
}

std::vector<std::optional<uint64_t>> StoreImpl::CreatedInShared(TenantId tenant,
                                                               std::span<const BlockKey> keys) {
  const std::vector<std::optional<SharedObjectInfo>> info =
      InfoInShared(tenant, keys, options_.env->NowMicros());
  std::vector<std::optional<uint64_t>> created(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (info[i]) {
      created[i] = info[i]->created_us;
    } else if (auto staged = uploader_->Staged(tenant.value, keys[i])) {
      created[i] = staged->meta.created_us;
    }
  }
  return created;
}

Result<std::vector<std::byte>> StoreImpl::ReadFromShared(TenantId tenant, const BlockKey& key,
                                                         BlockMeta* meta) {
  if (!shared_) return Status::NotFound("block not stored");
  if (std::optional<SharedUploader::StagedBlock> staged = uploader_->Staged(tenant.value, key)) {
    // Out of G2 and on its way to G4: served from the upload's copy.
    if (PastMaxAge(tenant, staged->meta.created_us, options_.env->NowMicros())) {
      return Status::NotFound("block expired (maximum age)");
    }
    *meta = staged->meta;
    std::vector<std::byte> block(staged->value->begin(), staged->value->end());
    Promote(tenant, key, block, *meta, TierLevel::kG4);
    return block;
  }
  bool followed = false;
  const TenantKey flight_key = InFlightKey(tenant, key);
  SharedRead read = shared_reads_.Do(
      flight_key,
      [&] {
        SharedRead r;
        // Promoted by a read that finished after this request missed G2: no second G4 read.
        if (Result<BlockHandle> held = memory_->LeaseForCopy(tenant.value, key, &r.meta);
            held.ok()) {
          std::vector<std::byte> copy(held->size());
          held->CopyTo(copy);
          r.block = std::move(copy);
          return r;
        }
        const uint64_t now = options_.env->NowMicros();
        const std::optional<SharedObjectInfo> info =
            std::move(InfoInShared(tenant, std::span(&key, 1), now)[0]);
        if (!info) return r;
        if (PastMaxAge(tenant, info->created_us, now)) {
          r.block = Status::NotFound("block expired (maximum age)");
          return r;
        }
        std::vector<Result<std::vector<std::byte>>> got =
            shared_->GetMany(TenantName(tenant), std::span(&key, 1));
        if (!got[0].ok()) {
          // Corrupt, unreadable (shredded key), gone or unreachable: a miss either way.
          ForgetInShared(flight_key);
          r.block = Status::NotFound("block not readable from G4: " + got[0].status().ToString());
          return r;
        }
        r.block = std::move(got[0]);
        r.meta = {info->session, info->created_us, info->dtype};
        // Before the flight ends: a request for the block after it finds the block in G2
        // instead of reading G4 again.
        Promote(tenant, key, *r.block, r.meta, TierLevel::kG4);
        return r;
      },
      &followed);
  if (followed) shared_reads_coalesced_.fetch_add(1, std::memory_order_relaxed);
  *meta = read.meta;
  return std::move(read.block);
}

Result<std::vector<std::byte>> StoreImpl::ReadFromLowerTiers(TenantId tenant,
                                                             const BlockKey& key,
                                                             BlockMeta* meta, TierLevel* from) {
  Result<std::vector<std::byte>> block = ReadFromDisk(tenant, key, meta);
  *from = TierLevel::kG3;
  if (block.ok() || !shared_) return block;
  *from = TierLevel::kG4;
  return ReadFromShared(tenant, key, meta);
}

void StoreImpl::Promote(TenantId tenant, const BlockKey& key, std::span<const std::byte> value,
                        const BlockMeta& meta, TierLevel from) {
  const bool promote =
      from == TierLevel::kG4 ? options_.shared.promote_on_hit : options_.promote_on_hit;
  if (!promote) return;
  BlockMeta promoted = meta;
  promoted.in_shared = from == TierLevel::kG4;
  if (memory_->Put(tenant.value, key, value, nullptr, promoted).ok()) {
    promoted_.fetch_add(1, std::memory_order_relaxed);
  }
}

Result<BlockHandle> StoreImpl::Get(TenantId tenant, const BlockKey& key) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  Result<BlockHandle> handle = memory_->Acquire(tenant.value, key);
  if (handle.ok() || (!disk_ && !shared_)) return handle;
  BlockMeta meta;
  TierLevel from;
  Result<std::vector<std::byte>> block = ReadFromLowerTiers(tenant, key, &meta, &from);
  if (!block.ok()) return block.status();
  if (from == TierLevel::kG3) Promote(tenant, key, *block, meta, from);  // G4's promoted.
  return BlockHandle(std::move(block).value());
}

std::vector<Result<BlockHandle>> StoreImpl::GetMany(TenantId tenant,
                                                    std::span<const BlockKey> keys) {
  return ForEachKey<Result<BlockHandle>>(keys, [&](const BlockKey& k) { return Get(tenant, k); });
}

Result<size_t> StoreImpl::Read(TenantId tenant, const BlockKey& key, std::span<std::byte> out) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  Result<BlockHandle> handle = memory_->Acquire(tenant.value, key);
  if (!handle.ok() && disk_) {
    // Straight from G3 into the caller's buffer, then promoted from there.
    Result<DiskBlockInfo> info = disk_->Describe(tenant.value, key);
    if (info.ok()) {
      if (out.size() < info->value_bytes) return BufferTooSmall(out.size(), info->value_bytes);
      std::vector<Result<size_t>> read =
          disk_->ReadMany(tenant.value, std::span(&key, 1), std::span(&out, 1));
      if (read[0].ok()) {
        Promote(tenant, key, out.first(*read[0]), MetaOf(*info), TierLevel::kG3);
      }
      if (read[0].ok() || !shared_) return std::move(read[0]);
    } else if (!shared_) {
      return info.status();
    }
  }
  if (!handle.ok() && shared_) {
    BlockMeta meta;
    Result<std::vector<std::byte>> block = ReadFromShared(tenant, key, &meta);
    if (!block.ok()) return block.status();
    if (out.size() < block->size()) return BufferTooSmall(out.size(), block->size());
    std::memcpy(out.data(), block->data(), block->size());
    return block->size();
  }
  if (!handle.ok()) return handle.status();
  if (out.size() < handle->size()) {
    return BufferTooSmall(out.size(), handle->size());
  }
  handle->CopyTo(out);
  return handle->size();
}

std::vector<Result<size_t>> StoreImpl::ReadMany(TenantId tenant, std::span<const BlockKey> keys,
                                                std::span<const std::span<std::byte>> outs) {
  std::vector<Result<size_t>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= outs.size()) {
      out.emplace_back(Status::InvalidArgument("ReadMany: fewer buffers than keys"));
    } else {
      out.push_back(Read(tenant, keys[i], outs[i]));
    }
  }
  return out;
}

Result<PrefixMatch> StoreImpl::LookupPrefix(TenantId tenant, std::span<const BlockKey> keys) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  // Alternate between the tiers: each run of consecutive blocks comes from the first tier
  // that has it; the walk ends where neither has the next block.
  PrefixMatch match;
  size_t done = 0;
  while (done < keys.size()) {
    size_t in_memory = memory_->LookupPrefix(tenant.value, keys.subspan(done), done == 0);
    match.tiers.insert(match.tiers.end(), in_memory, TierLevel::kG2);
    done += in_memory;
    if (done == keys.size() || !disk_) break;
    size_t on_disk = disk_->LookupPrefix(tenant.value, keys.subspan(done));
    if (on_disk == 0) break;
    match.tiers.insert(match.tiers.end(), on_disk, TierLevel::kG3);
    done += on_disk;
  }
  if (shared_ && done < keys.size()) {
    // The rest from G4 in one round of parallel existence checks, not one per block. G3 is
    // still asked first past a block only G4 holds: it admits selectively, so it may hold
    // later blocks (read from there, and not missed when G4 lacks them). G2 is not: a chain
    // leaves G2 tail first.
    const size_t first = done;
    std::vector<std::optional<uint64_t>> found = CreatedInShared(tenant, keys.subspan(first));
    const uint64_t now = options_.env->NowMicros();
    while (done < keys.size()) {
      const size_t on_disk = disk_ ? disk_->LookupPrefix(tenant.value, keys.subspan(done)) : 0;
      match.tiers.insert(match.tiers.end(), on_disk, TierLevel::kG3);
      done += on_disk;
      if (done == keys.size()) break;
      const std::optional<uint64_t>& created = found[done - first];
      if (!created || PastMaxAge(tenant, *created, now)) break;
      match.tiers.push_back(TierLevel::kG4);
      ++done;
    }
  }
  match.num_blocks = done;
  return match;
}

Result<PrefixMatch> StoreImpl::LookupPrefix(const Namespace& ns,
                                            std::span<const uint32_t> tokens) {
  Result<TenantId> tenant = FindTenant(ns.tenant);
  if (!tenant.ok()) return tenant.status();
  Result<std::vector<BlockKey>> keys = ComputeBlockKeys(ns, tokens);
  if (!keys.ok()) return keys.status();
  return LookupPrefix(*tenant, *keys);
}

std::vector<Result<PrefixMatch>> StoreImpl::LookupPrefixMany(
    TenantId tenant, std::span<const std::span<const BlockKey>> prompts) {
  std::vector<Result<PrefixMatch>> out;
  out.reserve(prompts.size());
  for (std::span<const BlockKey> keys : prompts) out.push_back(LookupPrefix(tenant, keys));
  return out;
}

Status StoreImpl::Delete(TenantId tenant, const BlockKey& key) {
  return DeleteMany(tenant, {&key, 1})[0];
}

Status StoreImpl::DeleteHere(TenantId tenant, const BlockKey& key) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  // G2 first: it waits for a demotion of this block in flight, so the G3 delete sees it.
  Status in_memory = memory_->Erase(tenant.value, key);
  Status on_disk = Status::NotFound("block not stored");
  if (disk_) {
    on_disk = disk_->Erase(tenant.value, key);
    if (!on_disk.ok() && on_disk.code() != StatusCode::kNotFound) return on_disk;
  }
  if (shared_) {
    uploader_->Cancel(tenant.value, key);  // An upload in progress ends before the delete.
    // G4's delete is OK whether or not the object was there: it cannot tell NotFound.
    KVTIER_RETURN_IF_ERROR(shared_->Delete(TenantName(tenant), key));
    DeletionDone();
    if (options_.event_listener != nullptr) {
      options_.event_listener->OnRemoved(tenant.value, key, BlockMedium::kExternal);
    }
  }
  return in_memory.ok() ? in_memory : on_disk;
}

std::vector<Status> StoreImpl::DeleteMany(TenantId tenant, std::span<const BlockKey> keys) {
  std::vector<Status> out =
      ForEachKey<Status>(keys, [&](const BlockKey& k) { return DeleteHere(tenant, k); });
  if (!shared_ || !CheckTenant(tenant).ok()) return out;
  // Other nodes may hold copies of blocks this one never had: every key deleted here or
  // absent here is announced.
  DeletionNotice notice;
  notice.scope = DeletionNotice::Scope::kKeys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (out[i].ok() || out[i].code() == StatusCode::kNotFound) notice.keys.push_back(keys[i]);
  }
  if (notice.keys.empty()) return out;
  notice.tenant = TenantName(tenant);
  const Status announced = Announce(std::move(notice));
  if (!announced.ok()) {
    for (Status& s : out) {
      if (s.ok() || s.code() == StatusCode::kNotFound) s = announced;
    }
  }
  return out;
}

Status StoreImpl::Pin(TenantId tenant, const BlockKey& key) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  Status s = memory_->Pin(tenant.value, key);
  if (s.code() != StatusCode::kNotFound || (!disk_ && !shared_)) return s;
  // Pinning means "keep it in DRAM": bring a lower tier's block up first.
  BlockMeta meta;
  TierLevel from;
  Result<std::vector<std::byte>> block = ReadFromLowerTiers(tenant, key, &meta, &from);
  if (!block.ok()) return block.status();
  KVTIER_RETURN_IF_ERROR(memory_->Put(tenant.value, key, *block, nullptr, meta));
  return memory_->Pin(tenant.value, key);
}

std::vector<Status> StoreImpl::PinMany(TenantId tenant, std::span<const BlockKey> keys) {
  return ForEachKey<Status>(keys, [&](const BlockKey& k) { return Pin(tenant, k); });
}

Status StoreImpl::Unpin(TenantId tenant, const BlockKey& key) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  return memory_->Unpin(tenant.value, key);
}

std::vector<Status> StoreImpl::UnpinMany(TenantId tenant, std::span<const BlockKey> keys) {
  return ForEachKey<Status>(keys, [&](const BlockKey& k) { return Unpin(tenant, k); });
}

size_t StoreImpl::PurgeExpired() {
  const size_t purged = memory_->PurgeExpired() + (disk_ ? disk_->PurgeExpired() : 0);
  if (purged > 0) {
    audit::AuditEvent event;
    event.op = audit::AuditOp::kExpire;
    event.scope = audit::AuditScope::kNode;
    event.actor = "kvtier";
    event.blocks = purged;
    Audit(event);
  }
  return purged;
}

StoreStats StoreImpl::Stats() const {
  StoreStats stats;
  memory_->FillStats(&stats);
  if (disk_) {
    DiskTierStats d = disk_->Stats();
    stats.disk_capacity_bytes = d.capacity_bytes;
    stats.disk_used_bytes = d.used_bytes;
    stats.disk_blocks = d.blocks;
    stats.disk_hits = d.hits;
    stats.disk_misses = d.misses;
    stats.disk_corrupt_records = d.corrupt_records;
    stats.disk_unreadable_records = d.unreadable_records;
    stats.disk_logical_bytes = d.logical_bytes;
    stats.disk_stored_bytes = d.stored_bytes;
    stats.disk_evictions = d.evictions;
    stats.disk_io_uring = d.io_uring;
    stats.disk_read_errors = d.read_errors;
    stats.disk_write_errors = d.write_errors;
    stats.disk_writable = d.writable;
    stats.disk_write_fault = d.write_fault;
    stats.disk_write_fault_since_us = d.write_fault_since_us;
    MemoryTier::AdmissionStats a = memory_->admission_stats();
    stats.admitted_blocks = a.admitted;
    stats.skipped_short_prefix = a.skipped_short_prefix;
    stats.skipped_infrequent = a.skipped_infrequent;
  }
  if (shared_) {
    SharedTierStats g4 = shared_->Stats();
    stats.shared_hits = g4.hits;
    stats.shared_misses = g4.misses;
    stats.shared_read_bytes = g4.get_bytes;
    stats.shared_written_bytes = g4.put_bytes;
    stats.shared_reads_coalesced = shared_reads_coalesced_.load(std::memory_order_relaxed);
    stats.shared_checks_coalesced = shared_checks_coalesced_.load(std::memory_order_relaxed);
    stats.shared_checks_cached = shared_checks_cached_.load(std::memory_order_relaxed);
    stats.shared_puts = g4.puts;
    stats.shared_corrupt = g4.corrupt;
    stats.shared_errors = g4.errors;
    stats.shared_janitor_lease = g4.lease_held;
    stats.shared_nodes_seen = 1 + other_nodes_seen_.load(std::memory_order_relaxed);
    stats.shared_uploads_dropped = uploader_->dropped();
    stats.shared_upload_buffer_bytes = uploader_->staged_bytes();
  }
  if (demoter_) {
    stats.demoted_blocks = demoter_->demoted_blocks();
    stats.demotion_failures = demoter_->failures();
    stats.demotion_shared_skips = demoter_->shared_skipped();
    stats.demotion_disk_skips = demoter_->disk_skipped();
    stats.demotion_writes = demoter_->disk_writes();
  }
  stats.promoted_blocks = promoted_.load(std::memory_order_relaxed);
  stats.deletion_notices_published = notices_published_.load(std::memory_order_relaxed);
  stats.deletion_notices_applied = notices_applied_.load(std::memory_order_relaxed);
  stats.deletion_notices_pending = notices_pending_.load(std::memory_order_relaxed);
  stats.notice_gap_resets = notice_gap_resets_.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < options_.tenants.size(); ++i) {
    stats.tenants.push_back(memory_->StatsForTenant(i));
  }
  return stats;
}

Result<TenantStats> StoreImpl::StatsForTenant(TenantId tenant) const {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  return memory_->StatsForTenant(tenant.value);
}

Result<std::vector<HeldBlock>> StoreImpl::ListHeld(TenantId tenant, uint64_t* cursor,
                                                   size_t slots) const {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  // The cursor's top bit says which tier: clear for G2's entry slots, set for G3's.
  constexpr uint64_t kInDisk = uint64_t{1} << 63;
  std::vector<HeldBlock> held;
  if (*cursor == kHeldEnd) return held;
  if ((*cursor & kInDisk) == 0) {
    for (MemoryTier::Listed& b : memory_->ListResident(tenant.value, cursor, slots)) {
      held.push_back(HeldBlock{b.key, b.parent, b.depth, BlockMedium::kCpu});
    }
    if (*cursor != MemoryTier::kEndOfKeys) return held;
    *cursor = disk_ ? kInDisk : kHeldEnd;
    return held;
  }
  uint64_t slot = *cursor & ~kInDisk;
  for (const BlockKey& key : disk_->ListKeys(tenant.value, &slot, slots)) {
    held.push_back(HeldBlock{key, std::nullopt, 0, BlockMedium::kDisk});
  }
  *cursor = slot == DiskTier::kEndOfKeys ? kHeldEnd : (slot | kInDisk);
  return held;
}

void StoreImpl::AnnounceSharedRemovals(uint32_t tenant, const std::vector<BlockKey>& keys) {
  if (options_.event_listener == nullptr) return;
  for (const BlockKey& key : keys) {
    options_.event_listener->OnRemoved(tenant, key, BlockMedium::kExternal);
  }
}

template <typename EraseMemory, typename EraseDisk, typename EraseShared>
Result<DeletionReport> StoreImpl::EraseEverywhere(TenantId tenant, audit::AuditEvent event,
                                                  DeletionNotice notice,
                                                  EraseMemory erase_memory, EraseDisk erase_disk,
                                                  EraseShared erase_shared) {
  Result<DeletionReport> report = [&]() -> Result<DeletionReport> {
    DeletionReport r;
    r.memory_blocks = erase_memory();
    if (disk_) {
      Result<uint64_t> on_disk = erase_disk();
      if (!on_disk.ok()) return on_disk.status();
      r.disk_blocks = *on_disk;
    }
    if (shared_) {
      // Uploads queued before the deletion must not publish a copy after it.
      if (uploader_) uploader_->Flush();
      Result<std::vector<BlockKey>> on_shared = erase_shared();
      DeletionDone();
      if (!on_shared.ok()) return on_shared.status();
      r.shared_blocks = on_shared->size();
      AnnounceSharedRemovals(tenant.value, *on_shared);
      KVTIER_RETURN_IF_ERROR(Announce(std::move(notice)));
    }
    return r;
  }();
  if (report.ok()) event.blocks = BlocksRemoved(*report);
  event.result = report.status().code();
  Audit(event);
  return report;
}

Status StoreImpl::HintSession(TenantId tenant, SessionId session, const SessionHint& hint) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  return memory_->HintSession(tenant.value, session, hint);
}

Result<DeletionReport> StoreImpl::DeleteSession(TenantId tenant, SessionId session,
                                                std::string_view actor) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  if (session == 0) return Status::InvalidArgument("session 0 means \"no session\"");
  audit::AuditEvent event;
  event.op = audit::AuditOp::kDeleteSession;
  event.scope = audit::AuditScope::kSession;
  event.tenant = TenantName(tenant);
  event.actor = std::string(actor);
  event.scope_id = std::to_string(session);
  DeletionNotice notice;
  notice.scope = DeletionNotice::Scope::kSession;
  notice.tenant = TenantName(tenant);
  notice.session = session;
  return EraseEverywhere(
      tenant, std::move(event), std::move(notice),
      [&] { return memory_->EraseSession(tenant.value, session); },
      [&] { return disk_->EraseSession(tenant.value, session); },
      [&] { return shared_->DeleteSession(TenantName(tenant), session); });
}

Result<DeletionReport> StoreImpl::DeleteTenant(TenantId tenant, std::string_view actor) {
  return EraseTenant(tenant, actor, /*shred=*/false);
}

Result<DeletionReport> StoreImpl::EraseTenant(TenantId tenant, std::string_view actor,
                                              bool shred) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  audit::AuditEvent event;
  event.op = audit::AuditOp::kDeleteTenant;
  event.tenant = TenantName(tenant);
  event.actor = std::string(actor);
  DeletionNotice notice;
  notice.scope = DeletionNotice::Scope::kTenant;
  notice.tenant = TenantName(tenant);
  notice.shred = shred;
  Result<DeletionReport> report =
      EraseEverywhere(tenant, std::move(event), std::move(notice),
                      [&] { return memory_->EraseTenant(tenant.value); },
                      [&] { return disk_->EraseTenant(tenant.value); },
                      [&] { return shared_->DeleteTenant(TenantName(tenant)); });
  if (report.ok() && options_.event_listener != nullptr) {
    options_.event_listener->OnCleared(tenant.value);
  }
  return report;
}

Result<DeletionReport> StoreImpl::ShredTenant(TenantId tenant, std::string_view actor) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  if (!services_.keys) {
    return Status::FailedPrecondition("crypto-shredding needs a master key (security.master_key)");
  }
  // The keys first: from this moment no encrypted copy anywhere can be read. The KeyManager
  // records the shred in the audit log. A tenant that never sealed anything has no keys.
  // With cluster keys the notice tells the other nodes to forget theirs.
  Status shred = services_.keys->ShredTenant(TenantName(tenant), actor);
  if (!shred.ok() && shred.code() != StatusCode::kNotFound) return shred;
  return EraseTenant(tenant, actor, /*shred=*/true);
}

}  // namespace kvtier
