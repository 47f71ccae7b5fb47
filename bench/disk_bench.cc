// kvtier_disk_bench: the DiskTier's side of bench/disk_bench.sh.
//
//   kvtier_disk_bench throughput DIR BLOCK_BYTES TOTAL_BYTES DEPTH
//     Writes TOTAL_BYTES in blocks of BLOCK_BYTES (PutMany, batches of 4 x DEPTH blocks, DEPTH
//     I/Os in flight), then reads them all back (ReadMany, same batching), checking every byte
//     of the first and last block. Prints "write_MBps X" and "read_MBps Y" (MB = 10^6 bytes).
//   kvtier_disk_bench recovery DIR BLOCKS VALUE_BYTES
//     Puts BLOCKS blocks of VALUE_BYTES, closes the tier, times the reopen ("recovery_s");
//     then a child process puts 64 MiB more and dies without closing the tier (no footer on
//     its last segment, which recovery must scan), and the reopen is timed again
//     ("recovery_after_kill_s"). Also prints "index_bytes_per_block".
//
// DIR is emptied first and left in place.

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "src/tier/disk/disk_tier.h"

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

BlockKey KeyOf(uint64_t n) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &n, sizeof(n));
  b[8] = 0xbe;
  return BlockKey(b);
}

uint64_t AlignUp4k(uint64_t n) { return (n + 4095) / 4096 * 4096; }

void Fill(std::vector<std::byte>& v, uint64_t n) {
  for (size_t i = 0; i < v.size(); i += 8) {
    const uint64_t w = (n + 1) * 0x9e3779b97f4a7c15ULL ^ i;
    std::memcpy(v.data() + i, &w, std::min<size_t>(8, v.size() - i));
  }
}

Result<std::unique_ptr<DiskTier>> OpenTier(const std::string& dir, uint64_t capacity,
                                           uint32_t depth) {
  DiskTierOptions o;
  o.dir = dir;
  o.capacity_bytes = capacity;
  o.segment_bytes = 256 * kMiB;
  o.io_depth = depth;
  return DiskTier::Open(o, {DiskTenantConfig{"bench"}}, nullptr);
}

int Throughput(const std::string& dir, uint64_t block, uint64_t total, uint32_t depth) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const uint64_t blocks = total / block;
  Result<std::unique_ptr<DiskTier>> tier = OpenTier(dir, total * 2 + kGiB, depth);
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  const size_t batch = 4 * depth;
  std::vector<std::vector<std::byte>> values(batch, std::vector<std::byte>(block));
  for (size_t i = 0; i < batch; ++i) Fill(values[i], i);
  auto start = Clock::now();
  for (uint64_t n = 0; n < blocks; n += batch) {
    std::vector<DiskTier::PutRequest> reqs;
    for (uint64_t k = n; k < std::min(blocks, n + batch); ++k) {
      reqs.push_back({KeyOf(k), values[k % batch]});
    }
    for (const Status& s : (*tier)->PutMany(0, reqs)) {
      if (!s.ok()) {
        std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
        return 1;
      }
    }
  }
  const double write_s = Seconds(start);
  std::vector<std::vector<std::byte>> outs(batch, std::vector<std::byte>(block));
  start = Clock::now();
  for (uint64_t n = 0; n < blocks; n += batch) {
    std::vector<BlockKey> keys;
    std::vector<std::span<std::byte>> spans;
    for (uint64_t k = n; k < std::min(blocks, n + batch); ++k) {
      keys.push_back(KeyOf(k));
      spans.emplace_back(outs[k - n]);
    }
    std::vector<Result<size_t>> got = (*tier)->ReadMany(0, keys, spans);
    for (size_t i = 0; i < got.size(); ++i) {
      if (!got[i].ok() || *got[i] != block) {
        std::fprintf(stderr, "read %zu: %s\n", i, got[i].status().ToString().c_str());
        return 1;
      }
    }
    if (n == 0 || n + batch >= blocks) {
      if (std::memcmp(outs[0].data(), values[n % batch].data(), block) != 0) {
        std::fprintf(stderr, "wrong bytes read back\n");
        return 1;
      }
    }
  }
  const double read_s = Seconds(start);
  const DiskTierStats s = (*tier)->Stats();
  std::printf("io_uring %d\n", s.io_uring ? 1 : 0);
  std::printf("write_MBps %.1f\n", static_cast<double>(blocks * block) / write_s / 1e6);
  std::printf("read_MBps %.1f\n", static_cast<double>(blocks * block) / read_s / 1e6);
  return 0;
}

int Recovery(const std::string& dir, uint64_t blocks, uint64_t value_bytes) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const uint64_t capacity = blocks * (value_bytes + 8 * kKiB) + 2 * kGiB;
  {
    Result<std::unique_ptr<DiskTier>> tier = OpenTier(dir, capacity, 16);
    if (!tier.ok()) {
      std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
      return 1;
    }
    std::vector<std::byte> value(value_bytes);
    auto start = Clock::now();
    const uint64_t batch = 256;
    for (uint64_t n = 0; n < blocks; n += batch) {
      std::vector<DiskTier::PutRequest> reqs;
      for (uint64_t k = n; k < std::min(blocks, n + batch); ++k) reqs.push_back({KeyOf(k), value});
      for (const Status& s : (*tier)->PutMany(0, reqs)) {
        if (!s.ok()) {
          std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
          return 1;
        }
      }
    }
    std::printf("fill_s %.2f\n", Seconds(start));
  }
  auto start = Clock::now();
  Result<std::unique_ptr<DiskTier>> tier = OpenTier(dir, capacity, 16);
  const double open_s = Seconds(start);
  if (!tier.ok()) {
    std::fprintf(stderr, "reopen: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  const DiskTierStats s = (*tier)->Stats();
  if (s.recovered_blocks != blocks) {
    std::fprintf(stderr, "recovered %llu of %llu blocks\n",
                 static_cast<unsigned long long>(s.recovered_blocks),
                 static_cast<unsigned long long>(blocks));
    return 1;
  }
  std::printf("recovered_blocks %llu\n", static_cast<unsigned long long>(s.recovered_blocks));
  std::printf("recovery_s %.3f\n", open_s);
  std::printf("index_bytes_per_block %.1f\n",
              static_cast<double>(s.index_memory_bytes) / static_cast<double>(s.blocks));
  tier->reset();

  const uint64_t extra = 64 * kMiB / AlignUp4k(value_bytes + 256);
  pid_t pid = ::fork();
  if (pid == 0) {
    Result<std::unique_ptr<DiskTier>> child = OpenTier(dir, capacity, 16);
    if (!child.ok()) std::_Exit(1);
    std::vector<std::byte> value(value_bytes);
    for (uint64_t k = blocks; k < blocks + extra; ++k) {
      DiskTier::PutRequest req{KeyOf(k), value};
      if (!(*child)->PutMany(0, {&req, 1})[0].ok()) std::_Exit(1);
    }
    std::_Exit(0);  // Dies like kill -9: no destructor, no footer.
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "child writer failed\n");
    return 1;
  }
  start = Clock::now();
  tier = OpenTier(dir, capacity, 16);
  const double crash_open_s = Seconds(start);
  if (!tier.ok() || (*tier)->Stats().recovered_blocks != blocks + extra) {
    std::fprintf(stderr, "reopen after kill lost blocks\n");
    return 1;
  }
  std::printf("recovery_after_kill_s %.3f\n", crash_open_s);
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "throughput" && argc == 6) {
    return kvtier::Throughput(argv[2], std::strtoull(argv[3], nullptr, 10),
                              std::strtoull(argv[4], nullptr, 10),
                              static_cast<uint32_t>(std::strtoul(argv[5], nullptr, 10)));
  }
  if (mode == "recovery" && argc == 5) {
    return kvtier::Recovery(argv[2], std::strtoull(argv[3], nullptr, 10),
                            std::strtoull(argv[4], nullptr, 10));
  }
  std::fprintf(stderr,
               "usage: %s throughput DIR BLOCK_BYTES TOTAL_BYTES DEPTH\n"
               "       %s recovery DIR BLOCKS VALUE_BYTES\n",
               argv[0], argv[0]);
  return 1;
}
