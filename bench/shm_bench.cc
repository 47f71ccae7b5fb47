// kvtier_shm_bench: the shared-memory fast path (ShmClient) against single-core memcpy, in one
// run, one thread. Used by bench/shm_bench.sh, which starts kvtierd.
//
//   memcpy     copies each value of a working set as large as the GET phase's into one buffer
//   SHM PUT    ShmClient::Put of distinct keys (SHM_ALLOC, copy into the mapping, SHM_COMMIT)
//   SHM GET    ShmClient::Read: SHM_GET, copy the block out of the mapping into one buffer,
//              release (sent in front of the next request). Only a copied-out GET counts.
//   SHM GET x16  ShmClient::Get of 16 blocks, each copied out, then released: a batch, as an
//              engine loads a prefix (one round trip for 16 copies)
//   SHM LEASE  ShmClient::Get and release without touching the bytes (the protocol's cost)
//   SHM COPY   copying out of blocks leased beforehand, no requests (the mapping's memory cost)
//
// memcpy and the read phases alternate --repeats times; a ratio to memcpy is taken within a
// repeat and the median over the repeats printed, after one CSV line per phase of the last
// repeat (op,value_bytes,ops,seconds,gib_per_s,p50_ms,p99_ms).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvtier/shm_client.h"
#include "src/common/median.h"

namespace {

using Clock = std::chrono::steady_clock;
using kvtier::Median;

kvtier::BlockKey KeyOf(uint32_t i) {
  std::array<uint8_t, kvtier::kBlockKeySize> b{};
  std::memcpy(b.data(), &i, 4);
  b[31] = 0x5B;
  return kvtier::BlockKey(b);
}

struct Phase {
  const char* name;
  std::vector<double> latencies_ms;
  double seconds = 0;
  uint64_t failures = 0;
  double gib_per_s = 0;
};

template <typename Op>
Phase Run(const char* name, uint32_t ops, size_t value_bytes, Op op) {
  Phase p{name, {}, 0, 0, 0};
  p.latencies_ms.reserve(ops);
  Clock::time_point start = Clock::now();
  for (uint32_t i = 0; i < ops; ++i) {
    Clock::time_point s = Clock::now();
    if (!op(i)) ++p.failures;
    p.latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
  }
  p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(p.latencies_ms.begin(), p.latencies_ms.end());
  p.gib_per_s =
      static_cast<double>(ops) * static_cast<double>(value_bytes) / (1u << 30) / p.seconds;
  return p;
}

void Print(const Phase& p, size_t value_bytes) {
  size_t n = p.latencies_ms.size();
  std::printf("%s,%zu,%zu,%.3f,%.3f,%.3f,%.3f\n", p.name, value_bytes, n, p.seconds, p.gib_per_s,
              p.latencies_ms[n / 2], p.latencies_ms[std::min(n - 1, n * 99 / 100)]);
  if (p.failures > 0) {
    std::fprintf(stderr, "%s: %llu failures\n", p.name,
                 static_cast<unsigned long long>(p.failures));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Shared-memory GET/PUT against single-core memcpy", "kvtier_shm_bench");
  std::string socket_path;
  uint32_t ops = 200;
  uint32_t rounds = 15;  // About 0.4 s a read phase at 2 MiB (bench/shm_bench.sh says why).
  uint32_t repeats = 7;
  size_t value_bytes = 2 << 20;
  std::string small_pages;
  app.add_option("--socket", socket_path, "kvtierd's Unix socket")->required();
  app.add_option("--ops", ops, "Distinct blocks (the working set is ops x value bytes)");
  app.add_option("--rounds", rounds, "GET passes over the working set");
  app.add_option("--repeats", repeats, "Times the read phases and memcpy alternate")
      ->check(CLI::PositiveNumber);
  app.add_option("--value-bytes", value_bytes, "Bytes per value");
  app.add_option("--g2-small-pages", small_pages,
                 "Why kvtierd's G2 is on 4 KiB pages (its start-up log), for a missed target");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  kvtier::ShmClientOptions o;
  o.socket_path = socket_path;
  kvtier::Result<std::unique_ptr<kvtier::ShmClient>> c = kvtier::ShmClient::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "connect: %s\n", c.status().ToString().c_str());
    return 1;
  }
  kvtier::ShmClient& shm = **c;

  // The memcpy baseline reads a working set as large as the GET phase's, into one buffer.
  std::vector<std::byte> source(static_cast<size_t>(ops) * value_bytes);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 131 + 7);
  std::vector<std::byte> out(value_bytes);
  std::memset(out.data(), 0, out.size());
  const uint32_t get_ops = ops * rounds;
  auto copy = [&](uint32_t i) {
    const size_t at = static_cast<size_t>(i % ops) * value_bytes;
    std::memcpy(out.data(), source.data() + at, value_bytes);
    return out[0] == source[at];
  };

  // G2 as a running daemon has it: every page already holds memory (in use before, by blocks
  // that the measured puts evict), so the puts measure the data path, not the kernel's first
  // allocation and zeroing of each page.
  for (uint32_t i = 0; i < 2 * ops; ++i) {
    std::span<const std::byte> v(source.data() + static_cast<size_t>(i % ops) * value_bytes,
                                 value_bytes);
    if (!shm.Put(KeyOf(ops + i), v).ok()) {
      std::fprintf(stderr, "warm-up put failed\n");
      return 1;
    }
  }
  Phase put = Run("SHM_PUT", ops, value_bytes, [&](uint32_t i) {
    std::span<const std::byte> v(source.data() + static_cast<size_t>(i) * value_bytes, value_bytes);
    return shm.Put(KeyOf(i), v).ok();
  });
  // And a client that has read its blocks before: their pages are mapped in this process (the
  // first read of each 2 MiB of the region maps it, MADV_POPULATE_READ).
  for (uint32_t i = 0; i < ops; ++i) (void)shm.Read(KeyOf(i), out);
  constexpr uint32_t kBatch = 16;
  std::vector<kvtier::BlockKey> batch_keys(kBatch);
  const uint32_t batches = std::max<uint32_t>(1, ops / kBatch);
  std::vector<kvtier::BlockKey> all;
  for (uint32_t i = 0; i < ops; ++i) all.push_back(KeyOf(i));
  // The read phases and memcpy alternate, `repeats` times: each ratio is taken within one
  // repeat, and the median of the repeats is reported (a shared machine's noise moves whole
  // stretches of a run).
  std::vector<double> get_ratios, batch_ratios, copy_ratios, get_copy_ratios, bounds;
  std::vector<Phase> last;
  uint64_t failures = put.failures;
  for (uint32_t r = 0; r < repeats; ++r) {
    Phase base = Run("memcpy", get_ops, value_bytes, copy);
    Phase get = Run("SHM_GET", get_ops, value_bytes, [&](uint32_t i) {
      kvtier::Result<size_t> n = shm.Read(KeyOf(i % ops), out);
      return n.ok() && *n == value_bytes;
    });
    Phase get_batch = Run("SHM_GET_x16", get_ops / kBatch, value_bytes * kBatch, [&](uint32_t i) {
      for (uint32_t j = 0; j < kBatch; ++j) batch_keys[j] = KeyOf((i % batches) * kBatch + j);
      kvtier::Result<kvtier::ShmBlocks> b = shm.Get(batch_keys);
      bool ok = b.ok();
      for (uint32_t j = 0; ok && j < kBatch; ++j) {
        kvtier::Result<size_t> n = b->CopyTo(j, out);
        ok = n.ok() && *n == value_bytes;
      }
      return ok;
    });
    Phase lease = Run("SHM_LEASE", get_ops, value_bytes, [&](uint32_t i) {
      kvtier::BlockKey k = KeyOf(i % ops);
      kvtier::Result<kvtier::ShmBlocks> b = shm.Get(std::span(&k, 1));
      return b.ok() && b->status(0).ok() && b->block_size(0) == value_bytes;
    });
    // The copy alone: every block leased once, then copied out of the mapping without
    // requests (what the mapping's memory costs, apart from the protocol).
    kvtier::Result<kvtier::ShmBlocks> leased = shm.Get(all);
    Phase copy_only = Run("SHM_COPY_ONLY", get_ops, value_bytes, [&](uint32_t i) {
      return leased.ok() && leased->CopyTo(i % ops, out).ok();
    });
    if (leased.ok()) leased->Release();
    failures += get.failures + get_batch.failures + lease.failures + copy_only.failures;
    get_ratios.push_back(get.gib_per_s / base.gib_per_s);
    batch_ratios.push_back(get_batch.gib_per_s / base.gib_per_s);
    copy_ratios.push_back(copy_only.gib_per_s / base.gib_per_s);
    get_copy_ratios.push_back(get.gib_per_s / copy_only.gib_per_s);
    // A block per call waits one round trip before its copy: at most copy / (copy + trip).
    const double copy_ms = Median(copy_only.latencies_ms), trip_ms = Median(lease.latencies_ms);
    bounds.push_back(copy_ms / (copy_ms + trip_ms));
    last = {base, put, get, get_batch, lease, copy_only};
  }

  std::printf("op,value_bytes,ops,seconds,gib_per_s,p50_ms,p99_ms (the last of %u repeats)\n",
              repeats);
  for (const Phase& p : last) Print(p, &p == &last[3] ? value_bytes * kBatch : value_bytes);
  const double get_ratio = Median(get_ratios), batch_ratio = Median(batch_ratios);
  std::printf("\nmedians of %u repeats:\n", repeats);
  std::printf("SHM GET (copied out) / memcpy: %.2fx\n", get_ratio);
  std::printf("SHM GET x16 (copied out) / memcpy: %.2fx\n", batch_ratio);
  std::printf("SHM PUT (copied in)  / memcpy: %.2fx\n", put.gib_per_s / last[0].gib_per_s);
  // bench/all.sh collects this line (bench/target.sh).
  std::printf("TARGET C++ SHM GET copied out / memcpy: %.3fx (>= 0.9x) %s", get_ratio,
              get_ratio >= 0.9 ? "met" : "NOT MET");
  if (get_ratio < 0.9) {
    // On a VM the rate of the same copy depends on which memory backs the buffer (equal heap
    // buffers of one process copied out at 14.5 to 21.3 GiB/s here, each at its own rate run
    // after run): against the copy out of the same G2 pages, a GET is the protocol's cost.
    std::printf(": the copy out of G2's mapping alone runs at %.2fx of memcpy, and a block per "
                "call waits a round trip before its copy (at most %.2fx of the copy here; "
                "measured %.2fx); 16 blocks per call %.2fx",
                Median(copy_ratios), Median(bounds), Median(get_copy_ratios), batch_ratio);
    if (!small_pages.empty()) {
      std::printf("; G2 is on 4 KiB pages here (%s), and a copy out of huge pages is faster "
                  "(docs/operations.md, \"Huge pages\")",
                  small_pages.c_str());
    }
  }
  std::printf("\n");
  return failures == 0 ? 0 : 1;
}
