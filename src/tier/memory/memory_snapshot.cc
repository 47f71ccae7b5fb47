// MemoryTier: warm restart. The index of G2 written beside a named arena file at close, and
// the adoption of its blocks in place at the next open (memory_tier.h has the contract).
//
// Index file (little-endian; written to a temporary name, then renamed), through a shared
// mapping rather than write(2), which hugetlbfs (where a huge-page arena lives) does not
// have for regular files; the file is rounded up to its file system's block size:
//   length   u64, the bytes of what follows up to the trailer's end
//   header   magic u64, version u32, page_bytes u32, total_pages u64, saved_us u64,
//            tenants u32, reserved u32, blocks u64
//   tenants  per tenant: reused_share f64, name length u32, name
//   blocks   per block, oldest first within each lane of each tenant's probation, then of its
//            reused queue, then
//            the pinned: key[32], parent key[32], checksum u64 (XXH3 of the bytes), session
//            u64, tenant u32 (into the table above), size u32, created_s u32, last_access_s
//            u32, depth u16, pins u16, queue u8, flags u8, dtype u8, has_parent u8, turn u8,
//            policy u8 (these two from version 3 on), turn_place u8 (from version 4 on),
//            extents u32, then (first_page u32, num_pages u32) per extent, pages of the
//            tenant's region file
//   trailer  XXH3 of everything before it, u64

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/common/byte_codec.h"
#include "src/common/checksum.h"
#include "src/common/worker_pool.h"
#include "src/tier/memory/arena_files.h"
#include "src/tier/memory/memory_tier.h"

namespace kvtier {
namespace {

constexpr uint64_t kIndexMagic = 0x5844493247545653ull;  // "SVTG2IDX"
// 2: one region file per tenant. 3: each block's conversation depth (turn) and policy bits.
// 4: its place in the turn that put it (turn_place).
constexpr uint32_t kIndexVersion = 4;
constexpr uint32_t kOldestIndexVersion = 2;
constexpr size_t kHeaderBytes = 48;
constexpr size_t kBlockFixedBytes = 111;  // 110 in version 3, 108 in version 2.
constexpr size_t kTrailerBytes = 8;
// Flags that describe the block itself, as opposed to its state in this process.
constexpr uint8_t kSavedFlags =
    kEntryLongChain | kEntryInShared | kEntryWasReused | kEntryNeedsState | kEntryStateValue;
// An index this large is not one this code wrote (about 120 bytes per block).
constexpr uint64_t kMaxIndexBytes = uint64_t{16} << 30;
constexpr uint32_t kMaxTenantNameBytes = 4096;

std::string IndexPath(const std::string& arena_file) { return arena_file + ".index"; }

// The file of one tenant's region: arena_file, a dot, and 16 hex digits of its name's hash.
std::string RegionPath(const std::string& arena_file, const std::string& tenant) {
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(Checksum64(std::as_bytes(std::span(tenant)))));
  return arena_file + "." + hash;
}

// Removes region files beside `arena_file` that are not in `keep`, and `arena_file` itself
// (a G2 of one region for every tenant, which earlier versions wrote): memory on tmpfs that
// nothing would use again.
void RemoveStaleRegions(const std::string& arena_file, const std::vector<std::string>& keep,
                        Env* env) {
  namespace fs = std::filesystem;
  const fs::path file(arena_file);
  const std::string prefix = file.filename().string() + ".";
  std::error_code ec;
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix) || name.size() != prefix.size() + 16 ||
        name.find_first_not_of("0123456789abcdef", prefix.size()) != std::string::npos) {
      continue;
    }
    const bool kept = std::any_of(keep.begin(), keep.end(), [&](const std::string& k) {
      return fs::path(k).filename() == name;
    });
    if (!kept) (void)env->RemoveFile((dir / name).string());
  }
  (void)env->RemoveFile(arena_file);
}

// Checksum64 of a block's pieces.
uint64_t ChecksumOf(const std::vector<std::span<std::byte>>& spans) {
  if (spans.size() == 1) return Checksum64(spans[0]);
  Checksum64Stream stream;
  for (std::span<const std::byte> s : spans) stream.Update(s);
  return stream.Value();
}

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Writes `bytes` to `path` (created 0600, replaced) through a shared mapping, preceded by
// their length.
Status WriteMapped(const std::string& path, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Unavailable(Errno("creating", path));
  struct stat st {};
  const uint64_t block = ::fstat(fd, &st) == 0 && st.st_blksize > 0 ? st.st_blksize : 4096;
  const uint64_t size = (8 + bytes.size() + block - 1) / block * block;
  void* p = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(size)) == 0) {
    p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    Status s = Status::ResourceExhausted(Errno("sizing and mapping", path));
    ::close(fd);
    return s;
  }
  const uint64_t length = bytes.size();
  std::memcpy(p, &length, 8);
  std::memcpy(static_cast<char*>(p) + 8, bytes.data(), bytes.size());
  const bool synced = ::msync(p, size, MS_SYNC) == 0;
  ::munmap(p, size);
  ::close(fd);
  return synced ? Status::OK() : Status::Unavailable(Errno("syncing", path));
}

// What WriteMapped wrote; NotFound when there is no such file.
Result<std::vector<std::byte>> ReadMapped(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? Status::NotFound(path) : Status::Unavailable(Errno("opening", path));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 8) {
    ::close(fd);
    return Status::DataLoss("the G2 index " + path + " is truncated");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return Status::Unavailable(Errno("mapping", path));
  uint64_t length = 0;
  std::memcpy(&length, p, 8);
  Result<std::vector<std::byte>> out = Status::DataLoss(
      "the G2 index " + path + " says it holds " + std::to_string(length) + " bytes of its " +
      std::to_string(size));
  if (length <= size - 8 && length <= max_bytes) {
    const auto* begin = static_cast<const std::byte*>(p) + 8;
    out = std::vector<std::byte>(begin, begin + length);
  }
  ::munmap(p, size);
  return out;
}

// Runs fn(i) for i in [0, n) on the machine's cores (at most 8): checksumming G2 runs at
// memory bandwidth only in parallel.
void ForEachInParallel(size_t n, const std::function<void(size_t)>& fn) {
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  WorkerPool pool(threads - 1);
  pool.ParallelFor(n, fn);
}

}  // namespace

struct MemoryTier::Snapshot {
  struct Block {
    BlockKey key;
    std::optional<BlockKey> parent;
    uint64_t checksum = 0;
    SessionId session = 0;
    uint32_t tenant = 0;  // Into `tenants`.
    uint32_t size = 0;
    uint32_t created_s = 0;
    uint32_t last_access_s = 0;
    uint16_t depth = 0;
    uint16_t pins = 0;
    QueueId queue = QueueId::kNone;
    uint8_t flags = 0;
    uint8_t dtype = 0;
    uint8_t turn = 0;
    uint8_t policy = 0;
    uint8_t turn_place = 0;
    std::vector<Extent> extents;
  };
  std::vector<std::string> tenants;
  std::vector<double> reused_shares;
  std::vector<Block> blocks;
};

namespace {

BlockKey ReadKey(ByteReader* r) {
  std::array<uint8_t, kBlockKeySize> bytes{};
  r->Raw(bytes.data(), bytes.size());
  return BlockKey(bytes);
}

}  // namespace

Result<std::unique_ptr<MemoryTier>> MemoryTier::OpenFromFile(const MemoryTierOptions& options,
                                                             std::vector<TenantConfig> tenants,
                                                             Env* env) {
  const uint64_t start_us = env->NowMicros();
  const std::string& path = options.arena_file;
  Result<std::unique_ptr<FileLock>> lock = env->LockFile(path + ".lock");
  if (!lock.ok()) {
    if (lock.status().code() != StatusCode::kFailedPrecondition) return lock.status();
    return Status::FailedPrecondition("the G2 arena file " + path +
                                      " is in use by another process (another kvtierd with the "
                                      "same data_dir or memory.arena_file?)");
  }
  Status owner = WriteArenaOwner(path, options.arena_data_dir, env);
  if (!owner.ok()) env->Log("G2: cannot record the arena's data directory: " + owner.ToString());
  // The index is deleted before the arena changes: from here on only this run's own index,
  // written at its clean close, can describe the bytes.
  Snapshot snapshot;
  std::string cold;  // Why nothing is adopted; empty when the index is usable.
  Result<std::vector<std::byte>> index = ReadMapped(IndexPath(path), kMaxIndexBytes);
  if (!index.ok()) {
    cold = index.status().code() == StatusCode::kNotFound
               ? "no index of a previous run (first start, or it did not stop cleanly)"
               : index.status().ToString();
  } else {
    Status removed = env->RemoveFile(IndexPath(path));
    if (!removed.ok()) return removed;
    Result<Snapshot> parsed = ParseSnapshot(*index, options.page_bytes);
    if (parsed.ok()) {
      snapshot = std::move(parsed).value();
    } else {
      cold = parsed.status().message();
    }
  }
  // One file per tenant, named by a hash of its name (names may hold any byte), so a tenant's
  // blocks are found again whatever its position in the configuration. Files of tenants no
  // longer configured, and the single file of the layout before per-tenant regions, go.
  std::vector<std::string> paths;
  for (const TenantConfig& t : tenants) paths.push_back(RegionPath(path, t.name));
  RemoveStaleRegions(path, paths, env);
  Result<std::unique_ptr<Arena>> arena =
      Arena::OpenFiles(paths, options.capacity_bytes, cold.empty());
  if (arena.ok()) {
    // The regions are sparse: what G2 may hold must fit beside what they already hold. (A
    // hugetlbfs mounted without a size reports no blocks at all: nothing to check then; a
    // put finds out, from Arena::Back.)
    uint64_t backed = 0;
    for (size_t i = 0; i < paths.size(); ++i) backed += (*arena)->BackedBytes(i);
    const std::string dir = std::filesystem::path(path).parent_path().string();
    struct statvfs fs {};
    if (::statvfs(dir.empty() ? "." : dir.c_str(), &fs) == 0 && fs.f_blocks > 0 &&
        uint64_t{fs.f_bavail} * fs.f_frsize + backed < options.capacity_bytes) {
      arena = Status::ResourceExhausted(
          "the file system of " + path + " has " +
          std::to_string(uint64_t{fs.f_bavail} * fs.f_frsize + backed) +
          " bytes for a G2 of " + std::to_string(options.capacity_bytes));
    }
  }
  if (arena.status().code() == StatusCode::kResourceExhausted) {
    // A small /dev/shm (containers default to 64 MiB) must not keep the daemon from serving.
    // Nothing of the files is used: they all go, the lock (still held) last.
    for (const std::string& p : paths) (void)env->RemoveFile(p);
    (void)env->RemoveFile(path + ".lock");
    env->Log("G2: warm restart off, G2 is anonymous memory: " + arena.status().ToString() +
             "; give the file system room for memory.capacity or set memory.arena_file");
    arena = Arena::Create(tenants.size(), options.capacity_bytes);
    if (!arena.ok()) return arena.status();
    return std::unique_ptr<MemoryTier>(
        new MemoryTier(std::move(arena).value(), false, options, std::move(tenants), env));
  }
  if (!arena.ok()) return arena.status();
  std::unique_ptr<MemoryTier> tier(
      new MemoryTier(std::move(arena).value(), true, options, std::move(tenants), env));
  tier->arena_file_ = path;
  tier->arena_lock_ = std::move(lock).value();
  if (!cold.empty()) {
    env->Log("G2: starting empty, " + cold);
  } else {
    tier->Adopt(snapshot, start_us);
  }
  // The memory is taken right away (a file system that fills up later would refuse puts), in
  // the background: start-up does not wait for the capacity, only for what was adopted.
  tier->StartProvisioning();
  return tier;
}

Result<MemoryTier::Snapshot> MemoryTier::ParseSnapshot(std::span<const std::byte> bytes,
                                                       uint64_t page_bytes) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes) {
    return Status::DataLoss("the G2 index is truncated");
  }
  uint64_t trailer = 0;
  std::memcpy(&trailer, bytes.data() + bytes.size() - kTrailerBytes, kTrailerBytes);
  if (Checksum64(bytes.first(bytes.size() - kTrailerBytes)) != trailer) {
    return Status::DataLoss("the G2 index fails its checksum");
  }
  ByteReader r(bytes.first(bytes.size() - kTrailerBytes));
  if (r.U64() != kIndexMagic) return Status::DataLoss("the G2 index has a foreign magic number");
  const uint32_t version = r.U32();
  if (version < kOldestIndexVersion || version > kIndexVersion) {
    return Status::DataLoss("the G2 index is version " + std::to_string(version) +
                            "; this kvtierd reads versions " +
                            std::to_string(kOldestIndexVersion) + " to " +
                            std::to_string(kIndexVersion));
  }
  const uint32_t saved_page_bytes = r.U32();
  if (saved_page_bytes != page_bytes) {
    return Status::DataLoss("memory.page_bytes changed from " + std::to_string(saved_page_bytes) +
                            " to " + std::to_string(page_bytes));
  }
  r.U64();  // total_pages: each extent is checked against the capacity of this run instead.
  r.U64();  // saved_us
  const uint32_t num_tenants = r.U32();
  r.U32();
  const uint64_t num_blocks = r.U64();
  Snapshot s;
  for (uint32_t i = 0; i < num_tenants && r.ok(); ++i) {
    s.reused_shares.push_back(std::bit_cast<double>(r.U64()));
    const uint32_t length = r.U32();
    if (length > kMaxTenantNameBytes) return Status::DataLoss("the G2 index has an invalid tenant");
    std::string name(length, '\0');
    r.Raw(name.data(), name.size());
    s.tenants.push_back(std::move(name));
  }
  for (uint64_t i = 0; i < num_blocks && r.ok(); ++i) {
    Snapshot::Block b;
    b.key = ReadKey(&r);
    const BlockKey parent = ReadKey(&r);
    b.checksum = r.U64();
    b.session = r.U64();
    b.tenant = r.U32();
    b.size = r.U32();
    b.created_s = r.U32();
    b.last_access_s = r.U32();
    b.depth = r.U16();
    b.pins = r.U16();
    const uint8_t queue = r.U8();
    b.flags = r.U8() & kSavedFlags;
    b.dtype = r.U8();
    if (r.U8() != 0) b.parent = parent;
    if (version >= 3) {
      b.turn = r.U8();
      b.policy = r.U8();
    }
    if (version >= 4) b.turn_place = std::min(r.U8(), kTurnTail);
    const uint32_t extents = r.U32();
    if (queue > static_cast<uint8_t>(QueueId::kReused) || b.tenant >= s.tenants.size() ||
        extents == 0 || extents > b.size / page_bytes + 1) {
      return Status::DataLoss("the G2 index has an invalid record");
    }
    b.queue = static_cast<QueueId>(queue);
    for (uint32_t x = 0; x < extents; ++x) {
      const uint32_t first = r.U32();
      b.extents.push_back({first, r.U32()});
    }
    s.blocks.push_back(std::move(b));
  }
  if (!r.ok()) return Status::DataLoss("the G2 index is truncated");
  return s;
}

void MemoryTier::Adopt(const Snapshot& snapshot, uint64_t start_us) {
  MutexLock l(&mu_);
  std::vector<uint32_t> tenant_of(snapshot.tenants.size(), UINT32_MAX);
  for (size_t i = 0; i < snapshot.tenants.size(); ++i) {
    for (uint32_t t = 0; t < tenants_.size(); ++t) {
      if (tenants_[t].config.name != snapshot.tenants[i]) continue;
      tenant_of[i] = t;
      tenants_[t].reused_share =
          std::clamp(snapshot.reused_shares[i], 0.0, max_reused_share_);
    }
  }
  // A block is trusted when its tenant is still configured, its pages lie inside this run's
  // arena and add up to its size, and its bytes still have the checksum they had at close.
  const uint64_t total_pages = total_pages_;
  std::vector<uint8_t> trusted(snapshot.blocks.size(), 0);
  ForEachInParallel(snapshot.blocks.size(), [&](size_t i) {
    const Snapshot::Block& b = snapshot.blocks[i];
    if (tenant_of[b.tenant] == UINT32_MAX || b.size == 0) return;
    uint64_t pages = 0;
    for (const Extent& x : b.extents) {
      if (x.num_pages == 0 || uint64_t{x.first_page} + x.num_pages > total_pages) return;
      pages += x.num_pages;
    }
    if (pages != PagesFor(b.size)) return;
    trusted[i] = ChecksumOf(MutableSpans(tenant_of[b.tenant], b.extents, b.size)) == b.checksum;
  });
  std::vector<uint32_t> entry_of(snapshot.blocks.size(), kNil);
  uint64_t dropped = 0;
  for (size_t i = 0; i < snapshot.blocks.size(); ++i) {
    const Snapshot::Block& b = snapshot.blocks[i];
    const uint32_t tenant = tenant_of[b.tenant];
    // Overlapping pages or a key twice would mean the index is not what was written.
    size_t claimed = 0;
    while (trusted[i] && claimed < b.extents.size() &&
           pages_[tenant].Claim(b.extents[claimed])) {
      ++claimed;
    }
    // Each region spans the capacity, so the capacity itself (lowered since?) is checked here.
    if (!trusted[i] || claimed < b.extents.size() || table_.Find(tenant, b.key) != kNil ||
        PagesFor(b.size) > free_pages_) {
      for (size_t x = 0; x < claimed; ++x) pages_[tenant].Free(b.extents[x]);
      ++dropped;
      continue;
    }
    free_pages_ -= PagesFor(b.size);
    TakeMemory(tenant, b.extents, nullptr);  // The bytes are there: nothing to back.
    const uint32_t idx = table_.NewEntry();
    Entry& e = table_.at(idx);
    e.key = b.key;
    e.tenant = tenant;
    e.size = b.size;
    e.extent = b.extents[0];
    e.last_access_s = b.last_access_s;
    e.created_s = b.created_s;
    e.session = AcquireSessionSlot(tenant, b.session);
    e.depth = b.depth;
    e.dtype = b.dtype;
    e.flags = b.flags;
    e.turn = b.turn;
    e.policy = b.policy & kPolicyBits;
    e.turn_place = b.turn_place;
    e.state = EntryState::kResident;
    if (b.extents.size() > 1) {
      e.flags |= kEntryMultiExtent;
      more_extents_.emplace(idx, std::vector<Extent>(b.extents.begin() + 1, b.extents.end()));
    }
    table_.Index(idx);
    TenantState& t = tenants_[tenant];
    // Recency in snapshot order; the LRU check starts afresh.
    RecencyLink(t, idx, kNil);
    t.used_pages += PagesFor(b.size);
    ++t.stats.blocks;
    e.pins = b.pins;
    if (e.pins > 0) {
      ++t.stats.pinned_blocks;
    } else {
      Enqueue(idx, b.queue == QueueId::kReused ? QueueId::kReused : QueueId::kProbation);
    }
    entry_of[i] = idx;
  }
  // Chains once every block is in: a parent may come after its child in queue order.
  for (size_t i = 0; i < snapshot.blocks.size(); ++i) {
    const Snapshot::Block& b = snapshot.blocks[i];
    if (entry_of[i] == kNil || !b.parent) continue;
    Entry& e = table_.at(entry_of[i]);
    const uint32_t p = table_.Find(e.tenant, *b.parent);
    if (p == kNil) continue;
    e.parent = p;
    ++table_.at(p).children;
  }
  // Budgets lowered since the last run: the oldest blocks go.
  const uint32_t now = NowSeconds();
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    TenantState& ts = tenants_[t];
    while (ts.budget_pages != 0 && ts.used_pages > ts.budget_pages && EvictOne(t, now)) {
      ++dropped;
    }
  }
  // What no adopted block holds (dropped blocks, bytes of the previous run) is memory no
  // longer needed: every free page gives its memory back (resident_ has adopted pages only).
  for (uint32_t t = 0; t < pages_.size(); ++t) {
    pages_[t].ForEachFreeRun([&](const Extent& x) {
      arena_->Discard(t, uint64_t{x.first_page} * page_bytes_, uint64_t{x.num_pages} * page_bytes_);
    });
  }
  uint64_t pages = 0;
  for (const TenantState& t : tenants_) pages += t.used_pages;
  restored_blocks_ = table_.indexed();
  restore_dropped_blocks_ = dropped;
  restore_micros_ = env_->NowMicros() - start_us;
  env_->Log("G2: adopted " + std::to_string(restored_blocks_) + " blocks (" +
            std::to_string(pages * page_bytes_ >> 20) + " MiB) of the previous run from " +
            arena_file_ +
            " in " + std::to_string(restore_micros_ / 1000) + " ms; " + std::to_string(dropped) +
            " dropped (checksum, tenant gone, past the capacity or budget)");
}

Status MemoryTier::SaveSnapshot() {
  const uint64_t start_us = env_->NowMicros();
  MutexLock l(&mu_);
  // Queue order, oldest first, so that adoption rebuilds the same eviction order; then the
  // pinned blocks, which are in no queue. Demotions have all finished by now (the demoter
  // stops first); reserved space was never published and stays free.
  std::vector<uint32_t> order;
  for (const TenantState& t : tenants_) {
    for (const Lanes* queue : {&t.probation, &t.reused}) {
      for (const EntryList& lane : *queue) {
        for (uint32_t i = lane.head; i != kNil; i = table_.at(i).next) order.push_back(i);
      }
    }
    // Hints are not kept across restarts: protected sessions' blocks come back in the lanes.
    for (const auto& [until, slot] : t.protected_sessions) {
      const EntryList& queue = session_slots_[slot].queue;
      for (uint32_t i = queue.head; i != kNil; i = table_.at(i).next) order.push_back(i);
    }
  }
  for (uint32_t i = 0; i < table_.high_water(); ++i) {
    const Entry& e = table_.at(i);
    if (e.state == EntryState::kResident && e.queue == QueueId::kNone && e.pins > 0 &&
        (e.flags & kEntryDemoting) == 0) {
      order.push_back(i);
    }
  }
  std::vector<std::vector<Extent>> extents(order.size());
  size_t size = kHeaderBytes + kTrailerBytes;
  for (const TenantState& t : tenants_) size += 12 + t.config.name.size();
  for (size_t k = 0; k < order.size(); ++k) {
    const Entry& e = table_.at(order[k]);
    extents[k].push_back(e.extent);
    if (e.flags & kEntryMultiExtent) {
      const std::vector<Extent>& more = more_extents_.at(order[k]);
      extents[k].insert(extents[k].end(), more.begin(), more.end());
    }
    size += kBlockFixedBytes + 8 * extents[k].size();
  }
  std::vector<std::vector<std::span<std::byte>>> spans(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    spans[k] = MutableSpans(table_.at(order[k]).tenant, extents[k], table_.at(order[k]).size);
  }
  std::vector<uint64_t> checksums(order.size());
  ForEachInParallel(order.size(), [&](size_t k) { checksums[k] = ChecksumOf(spans[k]); });

  std::vector<std::byte> bytes(size);
  ByteWriter w(bytes);
  w.U64(kIndexMagic);
  w.U32(kIndexVersion);
  w.U32(static_cast<uint32_t>(page_bytes_));
  w.U64(total_pages_);
  w.U64(env_->NowMicros());
  w.U32(static_cast<uint32_t>(tenants_.size()));
  w.U32(0);
  w.U64(order.size());
  for (const TenantState& t : tenants_) {
    w.U64(std::bit_cast<uint64_t>(t.reused_share));
    w.U32(static_cast<uint32_t>(t.config.name.size()));
    w.Raw(t.config.name.data(), t.config.name.size());
  }
  uint64_t block_bytes = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const Entry& e = table_.at(order[k]);
    const bool has_parent = e.parent != kNil;
    w.Raw(e.key.bytes().data(), kBlockKeySize);
    const BlockKey parent = has_parent ? table_.at(e.parent).key : BlockKey();
    w.Raw(parent.bytes().data(), kBlockKeySize);
    w.U64(checksums[k]);
    w.U64(session_slots_[e.session].id);
    w.U32(e.tenant);
    w.U32(e.size);
    w.U32(e.created_s);
    w.U32(e.last_access_s);
    w.U16(e.depth);
    w.U16(e.pins);
    w.U8(static_cast<uint8_t>(e.queue == QueueId::kSession ? LaneQueueOf(e) : e.queue));
    w.U8(e.flags & kSavedFlags);
    w.U8(e.dtype);
    w.U8(has_parent ? 1 : 0);
    w.U8(e.turn);
    w.U8(e.policy);
    w.U8(e.turn_place);
    w.U32(static_cast<uint32_t>(extents[k].size()));
    for (const Extent& x : extents[k]) {
      w.U32(x.first_page);
      w.U32(x.num_pages);
    }
    block_bytes += e.size;
  }
  const uint64_t trailer = Checksum64(std::span<const std::byte>(bytes).first(w.pos()));
  w.U64(trailer);

  const std::string index = IndexPath(arena_file_);
  const std::string temporary = index + ".tmp";
  KVTIER_RETURN_IF_ERROR(WriteMapped(temporary, bytes));
  if (::rename(temporary.c_str(), index.c_str()) != 0) {
    return Status::Unavailable(Errno("renaming to", index));
  }
  env_->Log("G2: saved " + std::to_string(order.size()) + " blocks (" +
            std::to_string(block_bytes >> 20) + " MiB) for a warm restart in " +
            std::to_string((env_->NowMicros() - start_us) / 1000) + " ms (" + index + ")");
  return Status::OK();
}

}  // namespace kvtier
