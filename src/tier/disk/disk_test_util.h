// Helpers shared by the disk tier's unit tests: a settable clock, keys and values derived from
// a number, and a fixture that opens a DiskTier on an in-memory Env behind fault injection.

#ifndef KVTIER_TIER_DISK_DISK_TEST_UTIL_H_
#define KVTIER_TIER_DISK_DISK_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "src/env/fault_injection_env.h"
#include "src/env/mem_env.h"
#include "src/tier/disk/disk_tier.h"

namespace kvtier::disk_test {

class ManualClock final : public Env {
 public:
  uint64_t NowMicros() override { return now_us.load(); }
  std::atomic<uint64_t> now_us{1'700'000'000'000'000};
};

inline BlockKey Key(uint64_t v) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &v, sizeof(v));
  b[31] = 0xd3;
  return BlockKey(b);
}

inline std::vector<std::byte> Value(uint64_t seed, size_t size) {
  std::vector<std::byte> v(size);
  for (size_t i = 0; i < size; ++i) {
    v[i] = std::byte(static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8)));
  }
  return v;
}

class DiskTierTestBase : public ::testing::Test {
 protected:
  static constexpr size_t kBlock = 16 * 1024;

  DiskTierTestBase() : mem_(NewMemEnv(&clock_)), env_(mem_.get()) {
    options_.dir = "/disk";
    options_.segment_bytes = 256 * 1024;
    options_.capacity_bytes = 8 * options_.segment_bytes;
    options_.io_depth = 4;
    tenants_ = {DiskTenantConfig{"alpha"}, DiskTenantConfig{"beta"}};
  }

  Status Open() {
    tier_.reset();
    Result<std::unique_ptr<DiskTier>> t = DiskTier::Open(options_, tenants_, &env_);
    if (!t.ok()) return t.status();
    tier_ = std::move(t).value();
    return Status::OK();
  }
  // Closes the tier as kill -9 would: nothing it writes while closing reaches the files.
  void Crash() {
    env_.SetActive(false);
    tier_.reset();
    env_.SetActive(true);
  }
  // Power loss: kill -9, then everything not synced is gone.
  void PowerLoss() {
    env_.SetActive(false);
    tier_.reset();
    ASSERT_TRUE(env_.DropUnsyncedData().ok());
  }

  Status Put(uint64_t k, size_t size = kBlock, uint32_t tenant = 0) {
    std::vector<std::byte> v = Value(k, size);
    DiskTier::PutRequest req{Key(k), v};
    return tier_->PutMany(tenant, {&req, 1})[0];
  }
  // OK when the block reads back byte-exact; NotFound on a miss; DataLoss for wrong bytes.
  Status Check(uint64_t k, size_t size = kBlock, uint32_t tenant = 0) {
    std::vector<std::byte> out(size + 100);
    BlockKey key = Key(k);
    std::span<std::byte> span(out);
    Result<size_t> r = tier_->ReadMany(tenant, {&key, 1}, {&span, 1})[0];
    if (!r.ok()) return r.status();
    if (*r != size || std::memcmp(out.data(), Value(k, size).data(), size) != 0) {
      return Status::DataLoss("wrong bytes served for key " + std::to_string(k));
    }
    return Status::OK();
  }
  std::vector<std::string> SegmentFiles() {
    std::vector<std::string> segs;
    Result<std::vector<std::string>> names = mem_->ListDir(options_.dir);
    if (!names.ok()) return segs;
    for (const std::string& n : *names) {
      if (n.size() > 4 && n.substr(n.size() - 4) == ".seg") segs.push_back(options_.dir + "/" + n);
    }
    std::sort(segs.begin(), segs.end());
    return segs;
  }

  ManualClock clock_;
  std::unique_ptr<Env> mem_;
  FaultInjectionEnv env_;
  DiskTierOptions options_;
  std::vector<DiskTenantConfig> tenants_;
  std::unique_ptr<DiskTier> tier_;
};

}  // namespace kvtier::disk_test

#endif  // KVTIER_TIER_DISK_DISK_TEST_UTIL_H_
