// G4 tier throughput driver for bench/g4_bench.sh: puts then gets `--blocks` blocks of
// `--block-mib` MiB through SharedFsTier (fs) or S3Tier (s3), in batches of `--batch`, and
// prints "put_MBps=<x> get_MBps=<y> put_cpu_s=<c> get_cpu_s=<d>" (MB = 10^6 bytes; c and d
// are this process's CPU seconds in each phase). The script runs the raw baselines (fio on the
// same directory, curl against the same S3 endpoint) and divides. `--put 0` only gets, the
// blocks an earlier run put.
//
//   kvtier_g4_bench fs --root DIR [--blocks 128] [--block-mib 2] [--batch 1] [--threads 1]
//                     [--drop-cache 0|1]
//   kvtier_g4_bench s3 --endpoint URL --bucket B [--blocks 128] [--batch 4] [--parallel 4]
//                     [--unsigned-payload 0|1]   (credentials: AWS_ACCESS_KEY_ID/...)
//   both: [--put 0|1]

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/common/malloc_tuning.h"
#include "src/tier/s3/s3_tier.h"
#include "src/tier/sharedfs/shared_fs_tier.h"

namespace {

struct Args {
  std::string mode, root, endpoint, bucket;
  size_t blocks = 128, block_mib = 2, batch = 1, threads = 1, parallel = 4;
  bool drop_cache = false;       // fs: evict the objects from the page cache before reading.
  bool unsigned_payload = false; // s3: UNSIGNED-PAYLOAD instead of hashing each body.
  bool check_before_put = false; // s3: HEAD before each PUT (S3TierOptions).
  bool put = true;               // false: only get, blocks an earlier run put.
};

kvtier::BlockKey KeyOf(size_t i) {
  std::array<uint8_t, kvtier::kBlockKeySize> b{};
  std::mt19937_64 rng(i * 7919 + 1);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return kvtier::BlockKey(b);
}

// Evicts every file under `dir` from the page cache (they are synced, so the pages are clean),
// as fio does before reading, so that reads come from the device.
void DropCache(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// CPU seconds (user + system) this process has used.
double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Run(kvtier::SharedTier* tier, const Args& a) {
  const size_t bytes = a.block_mib << 20;
  std::vector<std::vector<std::byte>> values(a.put ? a.batch : 0);
  std::mt19937 rng(42);
  for (auto& v : values) {
    v.resize(bytes);
    for (auto& b : v) b = static_cast<std::byte>(rng());
  }
  auto start = std::chrono::steady_clock::now();
  const double put_cpu0 = CpuSeconds();
  for (size_t i = 0; a.put && i < a.blocks; i += a.batch) {
    std::vector<kvtier::SharedPut> puts;
    for (size_t k = 0; k < a.batch && i + k < a.blocks; ++k) {
      kvtier::SharedPut p;
      p.key = KeyOf(i + k);
      p.value = values[k];
      puts.push_back(p);
    }
    for (const kvtier::Status& s : tier->PutMany("bench", puts)) {
      if (!s.ok()) {
        std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
        return 1;
      }
    }
  }
  const double put_s = Seconds(start);
  const double put_cpu_s = CpuSeconds() - put_cpu0;
  if (a.drop_cache) DropCache(a.root);
  // A long-running kvtierd reuses freed block buffers from its heap; this process is new, so
  // its heap is first grown to a batch of blocks (untimed), as the daemon's would have been.
  // Otherwise the first batch pays a page fault per 4 KiB that the daemon does not.
  {
    std::vector<std::vector<std::byte>> warm(a.batch);
    for (auto& w : warm) w.resize(bytes + 4096);
  }
  start = std::chrono::steady_clock::now();
  const double get_cpu0 = CpuSeconds();
  for (size_t i = 0; i < a.blocks; i += a.batch) {
    std::vector<kvtier::BlockKey> keys;
    for (size_t k = 0; k < a.batch && i + k < a.blocks; ++k) keys.push_back(KeyOf(i + k));
    for (const auto& r : tier->GetMany("bench", keys)) {
      if (!r.ok() || r->size() != bytes) {
        std::fprintf(stderr, "get: %s\n", r.status().ToString().c_str());
        return 1;
      }
    }
  }
  const double get_s = Seconds(start);
  const double get_cpu_s = CpuSeconds() - get_cpu0;
  const double total_mb = static_cast<double>(a.blocks * bytes) / 1e6;
  std::printf("put_MBps=%.1f get_MBps=%.1f put_cpu_s=%.3f get_cpu_s=%.3f\n",
              a.put ? total_mb / put_s : 0.0, total_mb / get_s, put_cpu_s, get_cpu_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::KeepLargeBuffersInHeap();  // As kvtierd, which runs the tiers, does.
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: kvtier_g4_bench fs|s3 [options] (see bench/g4_bench.cc)\n");
    return 2;
  }
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--root") a.root = v;
    else if (k == "--endpoint") a.endpoint = v;
    else if (k == "--bucket") a.bucket = v;
    else if (k == "--blocks") a.blocks = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--block-mib") a.block_mib = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--batch") a.batch = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--threads") a.threads = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--parallel") a.parallel = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--drop-cache") a.drop_cache = v == "1";
    else if (k == "--unsigned-payload") a.unsigned_payload = v == "1";
    else if (k == "--check-before-put") a.check_before_put = v == "1";
    else if (k == "--put") a.put = v == "1";
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.batch == 0 || a.blocks == 0 || a.block_mib == 0) return 2;
  if (a.mode == "fs") {
    kvtier::SharedFsTierOptions o;
    o.root = a.root;
    o.node_id = "bench";
    o.io_threads = a.threads;
    auto tier = kvtier::SharedFsTier::Open(o);
    if (!tier.ok()) {
      std::fprintf(stderr, "%s\n", tier.status().ToString().c_str());
      return 1;
    }
    return Run(tier->get(), a);
  }
  if (a.mode == "s3") {
    kvtier::S3TierOptions o;
    o.client.endpoint = a.endpoint;
    o.client.bucket = a.bucket;
    o.client.max_parallel = static_cast<uint32_t>(a.parallel);
    o.client.sign_payload = !a.unsigned_payload;
    o.check_before_put = a.check_before_put;
    o.node_id = "bench";
    auto tier = kvtier::S3Tier::Open(o);
    if (!tier.ok()) {
      std::fprintf(stderr, "%s\n", tier.status().ToString().c_str());
      return 1;
    }
    return Run(tier->get(), a);
  }
  std::fprintf(stderr, "mode must be fs or s3\n");
  return 2;
}
