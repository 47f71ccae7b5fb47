#include "src/tier/memory/memory_tier.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

namespace kvtier {

Result<std::unique_ptr<MemoryTier>> MemoryTier::Open(const MemoryTierOptions& options,
                                                     bool payload_free,
                                                     std::vector<TenantConfig> tenants,
                                                     Env* env) {
  if (!payload_free) {
    // A G2 the machine cannot back would be found out by the OOM killer, after puts were
    // acknowledged: refuse it now, with the reason.
    std::string source;
    const uint64_t usable = UsableMemoryBytes(&source);
    if (options.capacity_bytes > usable) {
      return Status::ResourceExhausted(
          "memory.capacity of " + std::to_string(options.capacity_bytes) +
          " bytes is more than this process can have: " + std::to_string(usable) + " bytes (" +
          source + "); lower memory.capacity");
    }
  }
  if (!payload_free && env != nullptr) {
    if (const std::string why = SmallPagesReason(options.arena_file); !why.empty()) {
      env->Log("G2 is on 4 KiB pages, where a copy out of it takes 10-25% longer than on huge "
               "pages (a TLB miss per page): " + why + ", or put memory.arena_file on "
               "hugetlbfs (docs/operations.md, \"Huge pages\")");
    }
  }
  if (!payload_free && !options.arena_file.empty()) {
    return OpenFromFile(options, std::move(tenants), env);
  }
  std::unique_ptr<Arena> arena;
  if (!payload_free) {
    Result<std::unique_ptr<Arena>> created =
        Arena::Create(tenants.size(), options.capacity_bytes);
    if (!created.ok()) return created.status();
    arena = std::move(created).value();
  }
  std::unique_ptr<MemoryTier> tier(
      new MemoryTier(std::move(arena), false, options, std::move(tenants), env));
  if (options.prefault) tier->StartProvisioning();
  return tier;
}

void MemoryTier::StartProvisioning() {
  if (!arena_) return;
  {
    MutexLock l(&mu_);
    provisioned_ = false;
  }
  provisioner_ = std::thread([this] {
    const uint64_t start_us = env_->NowMicros();
    uint64_t pages = 0;
    while (!stop_provisioning_.load(std::memory_order_relaxed)) {
      Result<std::optional<uint64_t>> step = ProvisionStep();
      if (!step.ok()) {
        env_->Log("G2: memory not taken up front (puts take it as they go): " +
                  step.status().ToString());
        break;
      }
      if (!*step) {
        if (pages > 0) {
          env_->Log("G2: took " + std::to_string(pages * page_bytes_ >> 20) +
                    " MiB of memory up front in " +
                    std::to_string((env_->NowMicros() - start_us) / 1000) +
                    " ms, serving meanwhile");
        }
        break;
      }
      pages += **step;
    }
    MutexLock l(&mu_);
    provisioned_ = true;
    provision_done_.SignalAll();
  });
}

bool MemoryTier::WaitProvisioned(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock l(&mu_);
  while (!provisioned_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    provision_done_.WaitFor(&mu_, deadline - now);
  }
  return true;
}

Result<std::optional<uint64_t>> MemoryTier::ProvisionStep() {
  // Pages per step. They are backed outside the lock: a put never waits for them (held across
  // the backing, the lock was taken back at once by this loop, and a put could wait for the
  // whole of G2's provisioning: up to 1.6 s for 2 GiB).
  constexpr uint64_t kStepBytes = 32 * kMiB;
  uint32_t tenant = 0;
  Extent next{};
  uint64_t discards = 0;
  {
    MutexLock l(&mu_);
    std::optional<Extent> found = NextToProvision(&tenant);
    if (!found) return std::optional<uint64_t>();
    next = *found;
    next.num_pages = static_cast<uint32_t>(std::min<uint64_t>(
        {next.num_pages, provision_.left, std::max<uint64_t>(kStepBytes / page_bytes_, 1)}));
    discards = discards_;
  }
  // Free pages that hold no memory: a put may allocate some of them meanwhile and back them
  // itself (backing twice changes nothing), or fill them before this reaches them.
  KVTIER_RETURN_IF_ERROR(arena_->Back(tenant, uint64_t{next.first_page} * page_bytes_,
                                      uint64_t{next.num_pages} * page_bytes_));
  MutexLock l(&mu_);
  // Memory given back meanwhile may be some of these pages, given back before or after this
  // backed them: count none of them, and back them again in the next step (over what is
  // resident now).
  if (discards_ != discards) return std::optional<uint64_t>(0);
  const uint64_t before = resident_pages_;
  TakeMemory(tenant, std::span<const Extent>(&next, 1), nullptr);
  const uint64_t taken = resident_pages_ - before;
  provision_.left -= std::min(provision_.left, taken);
  return std::optional<uint64_t>(taken);
}

std::optional<Extent> MemoryTier::NextToProvision(uint32_t* tenant) {
  // In configuration order, each tenant up to its budget: the lowest free pages of its region,
  // which its allocator hands out first.
  for (; provision_.tenant < pages_.size(); ++provision_.tenant) {
    const uint32_t t = provision_.tenant;
    if (resident_pages_ >= total_pages_) return std::nullopt;
    if (!provision_.started) {
      provision_.started = true;
      provision_.left = std::min<uint64_t>(
          total_pages_ - resident_pages_,
          tenants_[t].budget_pages ? tenants_[t].budget_pages : total_pages_);
    }
    // The first free pages of the tenant's region that hold no memory yet.
    std::vector<Extent> free_runs;
    pages_[t].ForEachFreeRun([&free_runs](const Extent& run) { free_runs.push_back(run); });
    std::optional<Extent> next;
    for (const Extent& run : free_runs) {
      uint64_t p = run.first_page;
      const uint64_t end = uint64_t{run.first_page} + run.num_pages;
      resident_[t].ForEachIn(run, [&](const Extent& held) {
        if (!next && held.first_page > p) {
          next = Extent{static_cast<uint32_t>(p), static_cast<uint32_t>(held.first_page - p)};
        }
        p = uint64_t{held.first_page} + held.num_pages;
      });
      if (!next && p < end) next = Extent{static_cast<uint32_t>(p), static_cast<uint32_t>(end - p)};
      if (next) break;
    }
    if (provision_.left > 0 && next) {
      *tenant = t;
      return next;
    }
    provision_.started = false;
  }
  return std::nullopt;
}

MemoryTier::MemoryTier(std::unique_ptr<Arena> arena, bool named_files,
                       const MemoryTierOptions& options, std::vector<TenantConfig> tenants,
                       Env* env)
    : arena_(std::move(arena)),
      capacity_bytes_(options.capacity_bytes),
      page_bytes_(options.page_bytes),
      total_pages_(static_cast<uint32_t>(options.capacity_bytes / options.page_bytes)),
      back_on_allocate_(arena_ != nullptr && (options.prefault || named_files)),
      max_reused_share_(options.max_reused_share),
      max_hint_retain_seconds_(options.max_hint_retain_seconds),
      env_(env) {
  MutexLock l(&mu_);
  free_pages_ = total_pages_;
  session_slots_.resize(1);
  tenants_.resize(tenants.size());
  pages_.reserve(tenants.size());
  for (size_t i = 0; i < tenants.size(); ++i) {
    pages_.emplace_back(total_pages_);
    resident_.emplace_back();
    TenantState& t = tenants_[i];
    t.config = std::move(tenants[i]);
    t.budget_pages = t.config.budget_bytes / page_bytes_;
    t.stats.name = t.config.name;
    t.stats.memory_budget_bytes = t.config.budget_bytes;
    t.reused_share = options.initial_reused_share;
  }
  SetUpLruChecks();
}

MemoryTier::~MemoryTier() {
  if (provisioner_.joinable()) {
    stop_provisioning_ = true;
    provisioner_.join();
  }
  if (arena_lock_ == nullptr) return;
  Status s = SaveSnapshot();
  if (!s.ok()) env_->Log("G2: no warm restart (the next start is empty): " + s.ToString());
}

EntryList* MemoryTier::QueueOf(const Entry& e) {
  TenantState& t = tenants_[e.tenant];
  switch (e.queue) {
    case QueueId::kProbation: return &t.probation[LaneOf(e)];
    case QueueId::kReused: return &t.reused[LaneOf(e)];
    case QueueId::kSession: return &session_slots_[e.session].queue;
    case QueueId::kNone: return nullptr;
  }
  return nullptr;
}

void MemoryTier::Dequeue(uint32_t index) {
  Entry& e = table_.at(index);
  if (EntryList* q = QueueOf(e)) table_.Remove(q, index, PagesFor(e.size));
  if (e.queue == QueueId::kSession) --tenants_[e.tenant].session_queued;
  e.queue = QueueId::kNone;
}

void MemoryTier::Enqueue(uint32_t index, QueueId queue) {
  Entry& e = table_.at(index);
  e.queue = QueueFor(e, queue);
  if (e.queue == QueueId::kSession) ++tenants_[e.tenant].session_queued;
  e.stamp = next_stamp_ += kStampStep;
  table_.PushBack(QueueOf(e), index, PagesFor(e.size));
  QueueFirstIfLow(index);
}

void MemoryTier::QueueFirstIfLow(uint32_t index) {
  // A low-priority session's blocks enter every queue at its cold end, whichever way they come
  // (put, read, unpin, end of demotion, rebalance): ChooseVictim takes them first.
  if (session_slots_[table_.at(index).session].priority == Store::SessionPriority::kLow) {
    QueueFirst(index);
  }
}

void MemoryTier::EnqueueNew(uint32_t index, QueueId queue) {
  Entry& e = table_.at(index);
  // A chain's new block goes just ahead of its parent when they share a lane, so eviction
  // reaches the tail of a chain before its head. Re-queued blocks go to the back as usual.
  e.queue = QueueFor(e, queue);
  if (e.queue == QueueId::kSession) ++tenants_[e.tenant].session_queued;
  EntryList* lane = QueueOf(e);
  if (e.parent != kNil && QueueOf(table_.at(e.parent)) == lane) {
    e.stamp = table_.at(e.parent).stamp - 1;
    table_.InsertBefore(lane, e.parent, index, PagesFor(e.size));
  } else {
    e.stamp = next_stamp_ += kStampStep;
    table_.PushBack(lane, index, PagesFor(e.size));
  }
  QueueFirstIfLow(index);
}

BlockMeta MemoryTier::MetaOf(const Entry& e) const {
  BlockMeta meta;
  meta.session = session_slots_[e.session].id;
  meta.created_us = uint64_t{e.created_s} * 1000000;
  if (e.dtype != 0) meta.dtype = static_cast<KvDtype>(e.dtype);
  meta.in_shared = (e.flags & kEntryInShared) != 0;
  if (e.flags & kEntryNeedsState) meta.role = BlockRole::kKvNeedsState;
  if (e.flags & kEntryStateValue) meta.role = BlockRole::kState;
  return meta;
}

void MemoryTier::Touch(uint32_t index, uint32_t now) {
  Entry& e = table_.at(index);
  TenantState& t = tenants_[e.tenant];
  e.last_access_s = std::max(e.last_access_s, now);
  RecencyUnlink(t, index);
  RecencyLink(t, index, kNil);
  e.policy = static_cast<uint8_t>((e.policy | kPolicyRevisited) & ~kPolicyFinished);
  NoteAccess(e, now);
  if (sketch_) sketch_->Increment(SketchHash(e.tenant, e.key));
  if (e.queue == QueueId::kNone) return;  // Pinned or demoting: outside the queues.
  Dequeue(index);
  e.flags |= kEntryWasReused;
  Enqueue(index, QueueId::kReused);
  RebalanceQueues(e.tenant, now);
}

void MemoryTier::RecencyLink(TenantState& t, uint32_t index, uint32_t parent) {
  // Just ahead of a resident parent, as in the queues: LRU takes a chain's tail first too.
  if (parent != kNil) {
    table_.InsertBefore<&Entry::recency_prev, &Entry::recency_next>(&t.recency, parent, index, 0);
  } else {
    table_.PushBack<&Entry::recency_prev, &Entry::recency_next>(&t.recency, index, 0);
  }
}

void MemoryTier::RecencyUnlink(TenantState& t, uint32_t index) {
  table_.Remove<&Entry::recency_prev, &Entry::recency_next>(&t.recency, index, 0);
}

QueueId MemoryTier::QueueForNewBlock(uint32_t tenant, const BlockKey& key,
                                     std::optional<uint8_t>* remembered_turn) {
  // Each ghost hit moves the share by one step, weighted as ARC weights its target: by the
  // size of the other ghost over this one's, so the rarer signal counts for more. A step is
  // one block's part of the queues, kept within [1/8192, 1/1024]: large caches still adapt
  // within a few hundred thousand puts, small ones do not swing on every hit.
  TenantState& t = tenants_[tenant];
  const double queued =
      static_cast<double>(std::max<uint32_t>(CountOf(t.probation) + CountOf(t.reused), 1));
  const double step = std::clamp(1.0 / queued, 1.0 / 8192, 1.0 / 1024);
  const uint64_t fp = key.Hash64();
  const double once = static_cast<double>(std::max<size_t>(t.ghost_once.size(), 1));
  const double reused = static_cast<double>(std::max<size_t>(t.ghost_reused.size(), 1));
  if ((*remembered_turn = t.ghost_reused.Find(fp))) {
    t.reused_share =
        std::min(max_reused_share_, t.reused_share + step * std::max(once / reused, 1.0));
  } else if ((*remembered_turn = t.ghost_once.Find(fp))) {
    t.reused_share = std::max(0.0, t.reused_share - step * std::max(reused / once, 1.0));
  } else {
    return QueueId::kProbation;
  }
  return QueueId::kReused;
}

uint32_t MemoryTier::FindLive(uint32_t tenant, const BlockKey& key, uint32_t now) {
  uint32_t idx = table_.Find(tenant, key);
  if (idx != kNil && Expired(table_.at(idx), now)) {
    Detach(idx, DetachReason::kExpired);
    return kNil;
  }
  return idx;
}

Status MemoryTier::AllocateFor(uint32_t tenant, const BlockKey& key, uint32_t pages,
                               std::vector<Extent>* extents, std::vector<Extent>* to_back,
                               const BlockKey* parent) {
  const uint32_t now = NowSeconds();
  TenantState& t = tenants_[tenant];
  uint32_t existing = FindLive(tenant, key, now);
  if (existing != kNil) {
    Touch(existing, now);
    ++t.stats.duplicate_puts;
    return Status::AlreadyExists("block is resident");
  }
  // The parent is the chain's tail, the first block eviction would take; evicting it to make
  // room for its own child would leave the child unreachable from G2. A lease keeps it while
  // anything else can go; a chain longer than G2 (or the budget) still gives it up.
  const uint32_t held = parent == nullptr ? kNil : FindLive(tenant, *parent, now);
  const bool lease = held != kNil && table_.at(held).readers < UINT16_MAX;
  if (lease) ++table_.at(held).readers;
  Status s = MakeRoom(tenant, pages, now);
  if (lease) {
    --table_.at(held).readers;
    Reclaim(held);
    if (s.code() == StatusCode::kResourceExhausted) s = MakeRoom(tenant, pages, now);
  }
  if (!s.ok()) {
    ++t.stats.rejected_puts;
    return s;
  }
  const size_t first = extents->size();
  pages_[tenant].Allocate(pages, extents);  // MakeRoom guaranteed the pages are free.
  free_pages_ -= pages;
  t.used_pages += pages;
  TakeMemory(tenant, std::span(*extents).subspan(first), to_back);
  return Status::OK();
}

void MemoryTier::Publish(uint32_t tenant, const BlockKey& key, size_t size,
                         std::vector<Extent> extents, const BlockKey* parent,
                         const BlockMeta& meta) {
  const uint32_t now = NowSeconds();
  TenantState& t = tenants_[tenant];
  uint32_t existing = FindLive(tenant, key, now);
  if (existing != kNil) {
    // A concurrent put of the same key committed first; blocks are immutable, keep that one.
    FreeExtents(tenant, extents);
    Touch(existing, now);
    ++t.stats.duplicate_puts;
    return;
  }
  uint32_t idx = table_.NewEntry();
  Entry& e = table_.at(idx);
  e.key = key;
  e.tenant = tenant;
  e.size = static_cast<uint32_t>(size);
  e.extent = extents[0];
  e.last_access_s = now;
  e.created_s = meta.created_us == 0 ? now : static_cast<uint32_t>(meta.created_us / 1000000);
  e.session = AcquireSessionSlot(tenant, meta.session);
  SessionCameBack(e.session, now);
  e.dtype = meta.dtype ? static_cast<uint8_t>(*meta.dtype) : 0;
  if (meta.in_shared) e.flags |= kEntryInShared;
  if (meta.role == BlockRole::kKvNeedsState) e.flags |= kEntryNeedsState;
  if (meta.role == BlockRole::kState) e.flags |= kEntryStateValue;
  e.state = EntryState::kResident;
  if (extents.size() > 1) {
    e.flags |= kEntryMultiExtent;
    more_extents_.emplace(idx, std::vector<Extent>(extents.begin() + 1, extents.end()));
  }
  LinkIntoChain(idx, parent, now);
  RecencyLink(t, idx, e.parent);
  table_.Index(idx);
  ++t.stats.blocks;
  std::optional<uint8_t> remembered_turn;
  const QueueId queue = QueueForNewBlock(tenant, key, &remembered_turn);
  if (queue == QueueId::kReused) e.flags |= kEntryWasReused;
  SetTurn(idx, remembered_turn);
  NoteAccess(e, now);
  EnqueueNew(idx, queue);
  RebalanceQueues(tenant, now);
  if (sketch_) {
    if (const size_t items = SketchItems(); items > sketch_->expected_items()) {
      sketch_->Reserve(items);
    }
    sketch_->Increment(SketchHash(tenant, key));
  }
  ++t.stats.puts;
  t.stats.put_bytes += size;
  if (events_ != nullptr) {
    events_->OnStored(tenant, key, parent, BlockMedium::kCpu,
                      meta.engine_hash ? &*meta.engine_hash : nullptr);
  }
}

Status MemoryTier::Put(uint32_t tenant, const BlockKey& key, std::span<const std::byte> value,
                       const BlockKey* parent, const BlockMeta& meta) {
  std::vector<Extent> extents, to_back;
  {
    MutexLock l(&mu_);
    Status s = AllocateFor(tenant, key, PagesFor(value.size()), &extents, &to_back, parent);
    if (s.code() == StatusCode::kAlreadyExists) return Status::OK();
    KVTIER_RETURN_IF_ERROR(s);
  }
  // Outside the lock: nobody else sees these pages yet.
  KVTIER_RETURN_IF_ERROR(BackOrFree(tenant, to_back, extents));
  CopyIn(tenant, extents, value);
  MutexLock l(&mu_);
  Publish(tenant, key, value.size(), std::move(extents), parent, meta);
  return Status::OK();
}

Status MemoryTier::BackOrFree(uint32_t tenant, const std::vector<Extent>& to_back,
                              const std::vector<Extent>& extents) {
  for (const Extent& x : to_back) {
    Status backed = arena_->Back(tenant, uint64_t{x.first_page} * page_bytes_,
                                 uint64_t{x.num_pages} * page_bytes_);
    if (!backed.ok()) {
      MutexLock l(&mu_);
      FreeExtents(tenant, extents);
      ++tenants_[tenant].stats.rejected_puts;
      return backed;
    }
  }
  return Status::OK();
}

std::vector<std::span<std::byte>> MemoryTier::MutableSpans(uint32_t tenant,
                                                           const std::vector<Extent>& extents,
                                                           size_t size) const {
  std::vector<std::span<std::byte>> spans;
  size_t remaining = size;
  for (const Extent& x : extents) {
    size_t n = std::min<size_t>(remaining, uint64_t{x.num_pages} * page_bytes_);
    spans.emplace_back(arena_->base(tenant) + uint64_t{x.first_page} * page_bytes_, n);
    remaining -= n;
  }
  return spans;
}

Result<uint64_t> MemoryTier::Reserve(uint32_t tenant, const BlockKey& key, size_t size,
                                     const BlockKey* parent,
                                     std::vector<std::span<std::byte>>* spans) {
  if (!arena_) return Status::FailedPrecondition("a payload-free store has no arena");
  std::vector<Extent> extents, to_back;
  {
    MutexLock l(&mu_);
    KVTIER_RETURN_IF_ERROR(AllocateFor(tenant, key, PagesFor(size), &extents, &to_back, parent));
  }
  KVTIER_RETURN_IF_ERROR(BackOrFree(tenant, to_back, extents));
  MutexLock l(&mu_);
  *spans = MutableSpans(tenant, extents, size);
  const uint64_t id = next_reservation_++;
  reservations_.emplace(id, Reservation{tenant, key, size, std::move(extents)});
  return id;
}

Status MemoryTier::CommitReserved(uint64_t id, const BlockKey* parent, const BlockMeta& meta) {
  MutexLock l(&mu_);
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return Status::InvalidArgument("no such allocation");
  Reservation r = std::move(it->second);
  reservations_.erase(it);
  Publish(r.tenant, r.key, r.size, std::move(r.extents), parent, meta);
  return Status::OK();
}

void MemoryTier::AbortReserved(uint64_t id) {
  MutexLock l(&mu_);
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  FreeExtents(it->second.tenant, it->second.extents);
  reservations_.erase(it);
}

void MemoryTier::LinkIntoChain(uint32_t index, const BlockKey* parent, uint32_t now) {
  Entry& e = table_.at(index);
  if (parent == nullptr) return;
  uint32_t p = table_.Find(e.tenant, *parent);
  if (p == kNil) return;
  e.parent = p;
  Entry& pe = table_.at(p);
  ++pe.children;
  pe.policy &= static_cast<uint8_t>(~kPolicyNoResume);
  if (pe.children > 1) pe.policy |= kPolicyBranched;
  NoteAccess(pe, now);  // No longer a tip.
  e.depth = pe.depth == UINT16_MAX ? pe.depth : static_cast<uint16_t>(pe.depth + 1);
  // Mark the chain once it is long enough for G3; ancestors already marked stop the walk, so
  // each block is marked at most once.
  if (admission_.min_prefix_blocks > 1 && e.depth + 1u >= admission_.min_prefix_blocks) {
    for (uint32_t i = index; i != kNil && (table_.at(i).flags & kEntryLongChain) == 0;
         i = table_.at(i).parent) {
      table_.at(i).flags |= kEntryLongChain;
    }
  }
}

void MemoryTier::CopyIn(uint32_t tenant, const std::vector<Extent>& extents,
                        std::span<const std::byte> value) const {
  if (!arena_) return;
  size_t offset = 0;
  std::byte* base = arena_->base(tenant);
  for (const Extent& x : extents) {
    size_t n = std::min<size_t>(value.size() - offset, uint64_t{x.num_pages} * page_bytes_);
    std::memcpy(base + uint64_t{x.first_page} * page_bytes_, value.data() + offset, n);
    offset += n;
  }
}

std::vector<std::span<const std::byte>> MemoryTier::Spans(uint32_t index) const {
  const Entry& e = table_.at(index);
  std::vector<std::span<const std::byte>> spans;
  if (!arena_) return spans;
  size_t remaining = e.size;
  std::byte* base = arena_->base(e.tenant);
  auto add = [&](const Extent& x) {
    size_t n = std::min<size_t>(remaining, uint64_t{x.num_pages} * page_bytes_);
    spans.emplace_back(base + uint64_t{x.first_page} * page_bytes_, n);
    remaining -= n;
  };
  add(e.extent);
  if (e.flags & kEntryMultiExtent) {
    for (const Extent& x : more_extents_.at(index)) add(x);
  }
  return spans;
}

Result<BlockHandle> MemoryTier::Acquire(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  const uint32_t now = NowSeconds();
  TenantState& t = tenants_[tenant];
  uint32_t idx = FindLive(tenant, key, now);
  if (idx == kNil) {
    ++t.stats.misses;
    return Status::NotFound("block not in G2");
  }
  Entry& e = table_.at(idx);
  if (e.readers == UINT16_MAX) {
    return Status::ResourceExhausted("too many concurrent read leases on one block");
  }
  ++e.readers;
  Touch(idx, now);
  ++t.stats.hits;
  t.stats.get_bytes += e.size;
  return BlockHandle(this, idx, e.size, Spans(idx));
}

Result<BlockHandle> MemoryTier::LeaseForCopy(uint32_t tenant, const BlockKey& key,
                                             BlockMeta* meta) {
  MutexLock l(&mu_);
  uint32_t idx = FindLive(tenant, key, NowSeconds());
  if (idx == kNil) return Status::NotFound("block not in G2");
  Entry& e = table_.at(idx);
  if (e.readers == UINT16_MAX) {
    return Status::ResourceExhausted("too many concurrent read leases on one block");
  }
  ++e.readers;
  ++copy_leases_;
  *meta = MetaOf(e);
  return BlockHandle(&copy_releaser_, idx, e.size, Spans(idx));
}

void MemoryTier::EndCopyLease(uint32_t entry) {
  MutexLock l(&mu_);
  --copy_leases_;
  --table_.at(entry).readers;
  Reclaim(entry);
  space_freed_.SignalAll();  // A put may be waiting for this block's pages, or to evict it.
}

void MemoryTier::ReleaseLease(uint32_t entry) {
  MutexLock l(&mu_);
  --table_.at(entry).readers;
  Reclaim(entry);
}

size_t MemoryTier::LookupPrefix(uint32_t tenant, std::span<const BlockKey> keys, bool whole) {
  MutexLock l(&mu_);
  const uint32_t now = NowSeconds();
  TenantState& t = tenants_[tenant];
  std::vector<uint32_t> found_entries;
  for (const BlockKey& key : keys) {
    uint32_t idx = FindLive(tenant, key, now);
    if (idx == kNil) break;
    found_entries.push_back(idx);
  }
  const size_t found = found_entries.size();
  if (whole) CheckAgainstLru(tenant, keys, found);
  // Deepest first, so that the head of the prefix is the most recent and tails go first.
  for (auto it = found_entries.rbegin(); it != found_entries.rend(); ++it) Touch(*it, now);
  t.stats.hits += found;
  if (found < keys.size()) ++t.stats.misses;
  return found;
}

Status MemoryTier::Erase(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  for (;;) {
    uint32_t idx = FindLive(tenant, key, NowSeconds());
    if (idx == kNil) return Status::NotFound("block not in G2");
    if (table_.at(idx).flags & kEntryDemoting) {
      // Let the copy reach G3 first, so the caller's G3 delete that follows removes it.
      space_freed_.Wait(&mu_);
      continue;
    }
    Detach(idx, DetachReason::kDeleted);
    return Status::OK();
  }
}

template <typename Match>
uint64_t MemoryTier::EraseWhere(uint32_t tenant, Match match) {
  uint64_t erased = 0;
  for (;;) {
    bool waiting = false;
    for (uint32_t idx = 0; idx < table_.high_water(); ++idx) {
      const Entry& e = table_.at(idx);
      if (e.state != EntryState::kResident || e.tenant != tenant || !match(e)) continue;
      if (e.flags & kEntryDemoting) {
        waiting = true;  // Let the copy reach G3 first, so the G3 erase that follows sees it.
        continue;
      }
      Detach(idx, DetachReason::kDeleted);
      ++erased;
    }
    if (!waiting) return erased;
    space_freed_.Wait(&mu_);
  }
}

uint64_t MemoryTier::EraseSession(uint32_t tenant, SessionId session) {
  MutexLock l(&mu_);
  auto it = session_index_.find({tenant, session});
  if (session == 0 || it == session_index_.end()) return 0;
  const uint32_t slot = it->second;
  // While EraseWhere waits for demotions the slot may be freed and reused by another session;
  // its fields tell them apart. (EraseWhere calls the predicate with mu_ held.)
  return EraseWhere(tenant, [&](const Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return e.session == slot && session_slots_[slot].id == session &&
           session_slots_[slot].tenant == tenant;
  });
}

uint64_t MemoryTier::EraseTenant(uint32_t tenant) {
  MutexLock l(&mu_);
  return EraseWhere(tenant, [](const Entry&) { return true; });
}

Status MemoryTier::Pin(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  const uint32_t now = NowSeconds();
  uint32_t idx = FindLive(tenant, key, now);
  if (idx == kNil) return Status::NotFound("block not in G2");
  Entry& e = table_.at(idx);
  if (e.pins == UINT16_MAX) return Status::ResourceExhausted("pin count of the block overflows");
  if (e.pins++ == 0) {
    Dequeue(idx);
    ++tenants_[tenant].stats.pinned_blocks;
  }
  Touch(idx, now);
  return Status::OK();
}

Status MemoryTier::Unpin(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  const uint32_t now = NowSeconds();
  uint32_t idx = FindLive(tenant, key, now);
  if (idx == kNil) return Status::NotFound("block not in G2");
  Entry& e = table_.at(idx);
  if (e.pins == 0) return Status::FailedPrecondition("block is not pinned");
  if (--e.pins == 0) {
    --tenants_[tenant].stats.pinned_blocks;
    // TTL counts from the unpin, not from before the pin.
    e.last_access_s = std::max(e.last_access_s, now);
    // A demoting block rejoins a queue when its demotion finishes.
    if ((e.flags & kEntryDemoting) == 0) {
      e.flags |= kEntryWasReused;
      Enqueue(idx, QueueId::kReused);
      RebalanceQueues(tenant, now);
    }
  }
  return Status::OK();
}

size_t MemoryTier::PurgeExpired() {
  MutexLock l(&mu_);
  const uint32_t now = NowSeconds();
  size_t purged = 0;
  if (std::none_of(tenants_.begin(), tenants_.end(), [](const TenantState& t) {
        return t.config.ttl_s != 0 || t.config.max_age_s != 0;
      })) {
    return 0;
  }
  // The whole table, not just the queues: maximum age applies to pinned blocks too.
  for (uint32_t idx = 0; idx < table_.high_water(); ++idx) {
    const Entry& e = table_.at(idx);
    if (e.state == EntryState::kResident && Expired(e, now)) {
      Detach(idx, DetachReason::kExpired);
      ++purged;
    }
  }
  return purged;
}

std::vector<BlockKey> MemoryTier::ResidentKeys(uint32_t tenant) const {
  MutexLock l(&mu_);
  std::vector<BlockKey> keys;
  for (uint32_t i = 0; i < table_.high_water(); ++i) {
    const Entry& e = table_.at(i);
    if (e.state == EntryState::kResident && e.tenant == tenant) keys.push_back(e.key);
  }
  return keys;
}

std::vector<MemoryTier::Listed> MemoryTier::ListResident(uint32_t tenant, uint64_t* cursor,
                                                         size_t slots) const {
  std::vector<Listed> listed;
  MutexLock l(&mu_);
  const uint64_t end = std::min<uint64_t>(table_.high_water(), *cursor + slots);
  for (uint64_t i = *cursor; i < end; ++i) {
    const Entry& e = table_.at(static_cast<uint32_t>(i));
    if (e.state != EntryState::kResident || e.tenant != tenant) continue;
    Listed b{e.key, std::nullopt, e.depth};
    if (e.parent != kNil) b.parent = table_.at(e.parent).key;
    listed.push_back(b);
  }
  *cursor = end < table_.high_water() ? end : kEndOfKeys;
  return listed;
}

TenantStats MemoryTier::StatsForTenant(uint32_t tenant) const {
  MutexLock l(&mu_);
  const TenantState& t = tenants_[tenant];
  TenantStats s = t.stats;
  s.bytes = t.used_pages * page_bytes_;
  return s;
}

void MemoryTier::FillStats(StoreStats* stats) const {
  MutexLock l(&mu_);
  stats->memory_capacity_bytes = capacity_bytes_;
  stats->memory_free_bytes = uint64_t{free_pages_} * page_bytes_;
  stats->memory_used_bytes = stats->memory_capacity_bytes - stats->memory_free_bytes;
  // The largest run a put of any tenant could take in one piece.
  uint32_t largest = 0;
  size_t bytes = table_.MemoryUsage();
  for (const ExtentAllocator& a : pages_) {
    largest = std::max(largest, a.largest_free_run());
    bytes += a.MemoryUsage();
  }
  stats->memory_largest_free_extent_bytes = uint64_t{std::min(largest, free_pages_)} * page_bytes_;
  stats->blocks = table_.indexed();
  stats->multi_extent_blocks = more_extents_.size();
  for (const TenantState& t : tenants_) {
    bytes += t.ghost_once.MemoryUsage() + t.ghost_reused.MemoryUsage() + t.returns.MemoryUsage() +
             t.lru_check.shadow.MemoryUsage();
  }
  bytes += lru_check_.shadow.MemoryUsage();
  stats->index_bytes = bytes;
  stats->memory_restored_blocks = restored_blocks_;
  stats->memory_restore_dropped_blocks = restore_dropped_blocks_;
  stats->memory_restore_micros = restore_micros_;
}

}  // namespace kvtier
