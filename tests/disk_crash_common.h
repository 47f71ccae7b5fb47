// Shared by the crash harness's writer (kvtier_disk_crash_writer) and driver
// (kvtier_disk_crash_test): the tier's options and data services (compression on), and the
// bytes and session of every block, derived from its number so that the driver can verify any
// block it finds.

#ifndef KVTIER_TESTS_DISK_CRASH_COMMON_H_
#define KVTIER_TESTS_DISK_CRASH_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <memory>

#include "kvtier/block_key.h"
#include "src/services/block_codec.h"
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

// Compression without encryption (which would need a keystore shared by the two processes).
inline std::unique_ptr<BlockCodec> NewCodec() {
  TierDataOptions data;
  data.compress = true;
  data.encrypt = false;
  Result<std::unique_ptr<BlockCodec>> codec = BlockCodec::Create(data, nullptr);
  return codec.ok() ? std::move(codec).value() : nullptr;
}

// Blocks go in sessions of kSessionBlocks consecutive numbers.
inline constexpr uint64_t kSessionBlocks = 16;
inline SessionId SessionOf(uint64_t n) { return n / kSessionBlocks + 1; }
inline uint64_t FirstBlockOf(SessionId s) { return (s - 1) * kSessionBlocks; }

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

// Odd blocks are random bytes (compression does not pay: stored raw); even ones are bf16-like
// (random mantissas, exponents near 1.0: stored compressed).
inline std::vector<std::byte> ValueOf(uint64_t n) {
  std::vector<std::byte> v(SizeOf(n));
  uint64_t x = Mix(n + 1);
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 8 == 0) x = Mix(x + i);
    v[i] = std::byte(static_cast<uint8_t>(x >> (8 * (i % 8))));
    if (n % 2 == 0 && i % 2 == 1) v[i] = (v[i] & std::byte{0x83}) | std::byte{0x3c};
  }
  return v;
}

}  // namespace kvtier::crash

#endif  // KVTIER_TESTS_DISK_CRASH_COMMON_H_
