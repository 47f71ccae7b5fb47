// Shared by the crash harness's writer (kvtier_disk_crash_writer) and driver
// (kvtier_disk_crash_test): the tier's options and the bytes of every block, derived from its
// number so that the driver can verify any block it finds.

#ifndef KVTIER_TESTS_DISK_CRASH_COMMON_H_
#define KVTIER_TESTS_DISK_CRASH_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "src/tier/disk/disk_tier.h"

namespace kvtier::crash {

inline DiskTierOptions TierOptions(const std::string& dir) {
  DiskTierOptions o;
  o.dir = dir;
  o.segment_bytes = 4 * kMiB;       // Small, so a run seals and starts many segments.
  o.capacity_bytes = 4 * kGiB;      // Large, so nothing acknowledged is evicted.
  o.durability = DiskTierOptions::Durability::kWritten;  // kill -9, not power loss.
  o.io_depth = 8;
  return o;
}

inline std::vector<DiskTenantConfig> Tenants() { return {DiskTenantConfig{"crash"}}; }

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

inline BlockKey KeyOf(uint64_t n) {
  std::array<uint8_t, kBlockKeySize> b{};
  for (int i = 0; i < 4; ++i) {
    const uint64_t w = Mix(n * 4 + static_cast<uint64_t>(i));
    std::memcpy(b.data() + 8 * i, &w, 8);
  }
  return BlockKey(b);
}

// 1 byte to 192 KiB, mostly not a multiple of the page size.
inline size_t SizeOf(uint64_t n) { return 1 + Mix(n ^ 0x5bd1e995) % (192 * 1024); }

inline std::vector<std::byte> ValueOf(uint64_t n) {
  std::vector<std::byte> v(SizeOf(n));
  uint64_t x = Mix(n + 1);
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 8 == 0) x = Mix(x + i);
    v[i] = std::byte(static_cast<uint8_t>(x >> (8 * (i % 8))));
  }
  return v;
}

}  // namespace kvtier::crash

#endif  // KVTIER_TESTS_DISK_CRASH_COMMON_H_
