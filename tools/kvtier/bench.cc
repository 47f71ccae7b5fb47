// kvtier bench: the G2 path against the physical limit, measured side by side in one run.
//
// memcpy, Store::Put and Store::Read all move 2 MiB blocks from a source region larger than
// the caches to a destination larger than the caches, on one core, so the ratios compare like
// with like. Also: hashing and prefix lookup of a 128K-token prompt, and the index memory per
// resident block, in a G2 with room and in a full one (evicting: the policy's state included).

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/store.h"
#include "src/common/median.h"
#include "tools/kvtier/commands.h"

namespace kvtier::cli {
namespace {

struct BenchOptions {
  uint64_t block_mib = 2;
  uint64_t region_mib = 512;  // Source and destination regions, each.
  int trials = 5;
  uint64_t index_blocks = 1'000'000;
};

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// An anonymous mapping filled with non-zero bytes so every page is really backed.
std::byte* MapRegion(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memset(p, 0x5a, bytes);
  return static_cast<std::byte*>(p);
}

BlockKey KeyFor(uint64_t a, uint64_t b) {
  std::array<uint8_t, kBlockKeySize> bytes{};
  std::memcpy(bytes.data(), &a, sizeof(a));
  std::memcpy(bytes.data() + 8, &b, sizeof(b));
  return BlockKey(bytes);
}

int Fail(const Status& s, const char* what) {
  std::fprintf(stderr, "kvtier bench: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

// Returns the exit code.
int RunBandwidth(const BenchOptions& o) {
  const uint64_t block = o.block_mib * kMiB;
  const uint64_t region = o.region_mib * kMiB;
  const uint64_t blocks = region / block;
  std::byte* src = MapRegion(region);
  std::byte* dst = MapRegion(region);
  if (src == nullptr || dst == nullptr) {
    std::fprintf(stderr, "kvtier bench: cannot map %llu MiB regions\n",
                 static_cast<unsigned long long>(o.region_mib));
    return 1;
  }
  // Puts run against a full store, so each one pays for an eviction as in service. Gets read
  // from a second store that holds all the blocks they ask for.
  Options options;
  options.memory.capacity_bytes = region;
  options.memory.prefault = true;
  Result<std::unique_ptr<Store>> put_store = Store::Open(options);
  if (!put_store.ok()) return Fail(put_store.status(), "open");
  options.memory.capacity_bytes = region + block;
  Result<std::unique_ptr<Store>> get_store = Store::Open(options);
  if (!get_store.ok()) return Fail(get_store.status(), "open");
  const TenantId tenant = *(*put_store)->FindTenant("default");

  uint64_t next_key = 0;
  auto put_region = [&](Store& store) -> Status {
    for (uint64_t i = 0; i < blocks; ++i) {
      KVTIER_RETURN_IF_ERROR(store.Put(tenant, KeyFor(0, next_key++), {src + i * block, block}));
    }
    return Status::OK();
  };
  if (Status s = put_region(**put_store); !s.ok()) return Fail(s, "warm-up put");
  const uint64_t first_resident = next_key;
  if (Status s = put_region(**get_store); !s.ok()) return Fail(s, "put");

  std::vector<double> memcpy_bw, put_bw, get_bw;
  const double gb = double(blocks * block) / 1e9;
  for (int t = 0; t < o.trials; ++t) {
    auto start = Clock::now();
    for (uint64_t i = 0; i < blocks; ++i) std::memcpy(dst + i * block, src + i * block, block);
    memcpy_bw.push_back(gb / Seconds(start));

    start = Clock::now();
    if (Status s = put_region(**put_store); !s.ok()) return Fail(s, "put");
    put_bw.push_back(gb / Seconds(start));

    start = Clock::now();
    for (uint64_t i = 0; i < blocks; ++i) {
      Result<size_t> n =
          (*get_store)->Read(tenant, KeyFor(0, first_resident + i), {dst + i * block, block});
      if (!n.ok()) return Fail(n.status(), "read");
    }
    get_bw.push_back(gb / Seconds(start));
  }
  const double m = Median(memcpy_bw), p = Median(put_bw), g = Median(get_bw);
  std::printf("G2 bandwidth, %llu MiB blocks, one core, median of %d trials of %.2f GB:\n",
              static_cast<unsigned long long>(o.block_mib), o.trials, gb);
  std::printf("  memcpy              %7.2f GB/s\n", m);
  std::printf("  store put           %7.2f GB/s   %.2fx memcpy (target >= 0.70)\n", p, p / m);
  std::printf("  store get (copy)    %7.2f GB/s   %.2fx memcpy (target >= 0.80)\n", g, g / m);
  munmap(src, region);
  munmap(dst, region);
  return 0;
}

int RunPrefix(const BenchOptions& o) {
  constexpr uint32_t kTokensPerBlock = 256;
  constexpr size_t kTokens = 128 * 1024;
  Namespace ns;
  ns.tenant = "default";
  ns.model = "bench-model";
  ns.layout = {.num_layers = 32, .num_kv_heads = 8, .head_dim = 128,
               .dtype = KvDtype::kBf16, .tokens_per_block = kTokensPerBlock};
  std::mt19937 rng(42);
  std::vector<uint32_t> tokens(kTokens);
  for (uint32_t& t : tokens) t = rng() % 128000;

  Options options;
  options.memory.capacity_bytes = 64 * kMiB;
  options.max_block_bytes = 64 * kKiB;
  Result<std::unique_ptr<Store>> store = Store::Open(options);
  if (!store.ok()) return Fail(store.status(), "open");
  TenantId tenant = *(*store)->FindTenant("default");
  Result<std::vector<BlockKey>> keys = ComputeBlockKeys(ns, tokens);
  if (!keys.ok()) return Fail(keys.status(), "keys");
  std::vector<std::byte> value(64 * kKiB, std::byte{1});
  for (size_t i = 0; i < keys->size(); ++i) {
    PutOptions po;
    if (i > 0) po.parent = (*keys)[i - 1];
    if (Status s = (*store)->Put(tenant, (*keys)[i], value, po); !s.ok()) return Fail(s, "put");
  }

  std::vector<double> hash_ms, lookup_ms, total_ms;
  for (int t = 0; t < 21 * o.trials; ++t) {
    auto start = Clock::now();
    Result<std::vector<BlockKey>> k = ComputeBlockKeys(ns, tokens);
    double h = Seconds(start) * 1e3;
    auto mid = Clock::now();
    Result<PrefixMatch> match = (*store)->LookupPrefix(tenant, *k);
    double l = Seconds(mid) * 1e3;
    if (!match.ok() || match->num_blocks != keys->size()) {
      std::fprintf(stderr, "kvtier bench: prefix lookup found %zu of %zu blocks\n",
                   match.ok() ? match->num_blocks : 0, keys->size());
      return 1;
    }
    hash_ms.push_back(h);
    lookup_ms.push_back(l);
    total_ms.push_back(h + l);
  }
  std::printf("Prefix lookup of a 128K-token prompt (512 blocks of 256 tokens), one core, median:\n");
  std::printf("  hash (SHA-256 chain)   %.3f ms\n", Median(hash_ms));
  std::printf("  lookup                 %.3f ms\n", Median(lookup_ms));
  std::printf("  hash + lookup          %.3f ms (target < 2 ms)\n", Median(total_ms));
  return 0;
}

// Index memory per resident block after mixed-size churn, on a payload-free store: its
// metadata is exactly that of a real one, without needing terabytes of DRAM.
uint64_t HeapBytes() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// Values for a payload-free store, which never reads them: only their sizes matter. The
// bytes are address space without memory (PROT_NONE), unmapped when this goes.
class FakeValues {
 public:
  static constexpr uint64_t kBytes = 8 * kMiB;
  FakeValues()
      : base_(mmap(nullptr, kBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                   0)) {}
  ~FakeValues() {
    if (ok()) munmap(base_, kBytes);
  }
  FakeValues(const FakeValues&) = delete;
  FakeValues& operator=(const FakeValues&) = delete;
  bool ok() const { return base_ != MAP_FAILED; }
  // REQUIRES: ok(), n <= kBytes.
  std::span<const std::byte> Of(uint64_t n) const {
    return {static_cast<const std::byte*>(base_), n};
  }

 private:
  void* base_;
};

int RunIndexOverhead(const BenchOptions& o) {
  const uint64_t heap_before = HeapBytes();
  Options options;
  options.payload_free = true;
  options.memory.capacity_bytes = 4 * 1024 * kGiB;
  Result<std::unique_ptr<Store>> store = Store::Open(options);
  if (!store.ok()) return Fail(store.status(), "open");
  TenantId tenant = *(*store)->FindTenant("default");
  static const uint64_t kSizes[] = {64 * kKiB, 160 * kKiB, 2 * kMiB, 5 * kMiB + 12345};
  std::mt19937_64 rng(7);
  FakeValues fake;
  if (!fake.ok()) return 1;
  const uint64_t total = o.index_blocks + o.index_blocks / 4;
  for (uint64_t i = 0; i < total; ++i) {
    std::span<const std::byte> value = fake.Of(kSizes[rng() % 4]);
    PutOptions po;
    if (i % 8 != 0) po.parent = KeyFor(1, i - 1);
    if (Status s = (*store)->Put(tenant, KeyFor(1, i), value, po); !s.ok()) return Fail(s, "put");
  }
  // Delete a fifth at random, leaving holes of every size in the allocator's free map.
  uint64_t deleted = 0;
  for (uint64_t i = 0; i < total && deleted < total - o.index_blocks; ++i) {
    if (rng() % 5 == 0 && (*store)->Delete(tenant, KeyFor(1, i)).ok()) ++deleted;
  }
  StoreStats stats = (*store)->Stats();
  const double heap_per_block = double(HeapBytes() - heap_before) / double(stats.blocks);
  std::printf("Index memory, %llu resident blocks of mixed sizes after churn (20%% deleted):\n",
              static_cast<unsigned long long>(stats.blocks));
  std::printf("  process heap growth    %.1f bytes/block (target <= 128)\n", heap_per_block);
  std::printf("  store's own accounting %.1f bytes/block; %llu blocks in more than one piece\n",
              double(stats.index_bytes) / double(stats.blocks),
              static_cast<unsigned long long>(stats.multi_extent_blocks));
  return 0;
}

// The same on a full G2: chains of 8 blocks put past its capacity, every third chain read
// back, so that eviction runs and the policy's per-tenant state (ghosts of evicted keys, the
// return model, the LRU check) is at its steady-state size.
int RunFullIndexOverhead(const BenchOptions& o) {
  const uint64_t heap_before = HeapBytes();
  constexpr uint64_t kBlock = 2 * kMiB;
  Options options;
  options.payload_free = true;
  options.memory.capacity_bytes = o.index_blocks * kBlock;
  Result<std::unique_ptr<Store>> store = Store::Open(options);
  if (!store.ok()) return Fail(store.status(), "open");
  TenantId tenant = *(*store)->FindTenant("default");
  FakeValues fake;
  if (!fake.ok()) return 1;
  const std::span<const std::byte> value = fake.Of(kBlock);
  std::mt19937_64 rng(11);
  constexpr uint64_t kChain = 8;
  const uint64_t chains = 6 * o.index_blocks / kChain;
  std::vector<BlockKey> chain(kChain);
  for (uint64_t c = 0; c < chains; ++c) {
    for (uint64_t i = 0; i < kChain; ++i) {
      chain[i] = KeyFor(2, c * kChain + i);
      PutOptions po;
      if (i > 0) po.parent = chain[i - 1];
      if (Status s = (*store)->Put(tenant, chain[i], value, po); !s.ok()) return Fail(s, "put");
    }
    if (c % 3 == 0) {
      const uint64_t back = c - std::min<uint64_t>(c, rng() % (o.index_blocks / kChain));
      for (uint64_t i = 0; i < kChain; ++i) chain[i] = KeyFor(2, back * kChain + i);
      if (Result<PrefixMatch> m = (*store)->LookupPrefix(tenant, chain); !m.ok()) {
        return Fail(m.status(), "lookup");
      }
    }
  }
  StoreStats stats = (*store)->Stats();
  const double heap_per_block = double(HeapBytes() - heap_before) / double(stats.blocks);
  std::printf("Index memory, a full G2 of %llu blocks after %llu puts (evicting; ghosts, return "
              "model and LRU check included):\n",
              static_cast<unsigned long long>(stats.blocks),
              static_cast<unsigned long long>(chains * kChain));
  std::printf("  process heap growth    %.1f bytes/block\n", heap_per_block);
  std::printf("  store's own accounting %.1f bytes/block\n",
              double(stats.index_bytes) / double(stats.blocks));
  return 0;
}

}  // namespace

void AddBenchCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure the G2 path against memcpy, prefix hashing and lookup, index memory.");
  cmd->add_option("--block-mib", opts->block_mib, "Block size in MiB")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--region-mib", opts->region_mib, "Bytes moved per trial, in MiB")
      ->capture_default_str()->check(CLI::Range(64, 65536));
  cmd->add_option("--trials", opts->trials, "Trials per measurement (median reported)")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--index-blocks", opts->index_blocks, "Resident blocks for the index figure")
      ->capture_default_str()->check(CLI::Range(1000, 100'000'000));
  cmd->callback([opts, exit_code] {
    int rc = RunBandwidth(*opts);
    if (rc == 0) rc = RunPrefix(*opts);
    if (rc == 0) rc = RunIndexOverhead(*opts);
    if (rc == 0) rc = RunFullIndexOverhead(*opts);
    *exit_code = rc;
  });
}

}  // namespace kvtier::cli
