// Helpers shared by the disk tier's unit tests: a settable clock, keys and values derived from
// a number, a fixture that opens a DiskTier on an in-memory Env behind fault injection, and
// the data services (a BlockCodec, with a KeyManager when encrypting) it can be given.

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
#include "src/services/block_codec.h"
#include "src/services/encryption/key_manager.h"
#include "src/services/encryption/master_key.h"
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

// bf16-like KV values: random signs and mantissas, exponents in a narrow band around 1.0, as
// trained models' K and V mostly are, so that the KV codec finds something to compress.
inline std::vector<std::byte> Bf16Value(uint64_t seed, size_t size) {
  std::vector<std::byte> v(size);
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i + 1 < size; i += 2) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = std::byte(static_cast<uint8_t>(x));                                  // Mantissa.
    v[i + 1] = std::byte(static_cast<uint8_t>(0x3c + (x >> 60) % 4) | ((x >> 40) & 0x80));
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

  // Gives the tier a BlockCodec from now on (the next Open). With `encrypt`, a KeyManager on
  // the in-memory Env holds the tenants' keys (outside the fault injection).
  void UseDataServices(bool compress, bool encrypt) {
    codec_.reset();
    if (encrypt && keys_ == nullptr) {
      ASSERT_TRUE(mem_->CreateDir("/keys").ok());
      Result<encryption::MasterKey> master = encryption::MasterKey::FromHex(
          "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
      ASSERT_TRUE(master.ok());
      Result<std::unique_ptr<encryption::KeyManager>> keys =
          encryption::KeyManager::Open(mem_.get(), "/keys", *master, {});
      ASSERT_TRUE(keys.ok()) << keys.status().ToString();
      keys_ = std::move(keys).value();
    }
    TierDataOptions data;
    data.compress = compress;
    data.encrypt = encrypt;
    Result<std::unique_ptr<BlockCodec>> codec = BlockCodec::Create(data, keys_.get());
    ASSERT_TRUE(codec.ok()) << codec.status().ToString();
    codec_ = std::move(codec).value();
  }

  Status Open() {
    tier_.reset();
    Result<std::unique_ptr<DiskTier>> t = DiskTier::Open(options_, tenants_, &env_, codec_.get());
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
  // Puts Bf16Value(k, size) as a bf16 block of `session`.
  Status PutBf16(uint64_t k, SessionId session = 0, size_t size = kBlock, uint32_t tenant = 0) {
    std::vector<std::byte> v = Bf16Value(k, size);
    DiskTier::PutRequest req{Key(k), v, session, 0, KvDtype::kBf16};
    return tier_->PutMany(tenant, {&req, 1})[0];
  }
  // Like Check, for a block put by PutBf16.
  Status CheckBf16(uint64_t k, size_t size = kBlock, uint32_t tenant = 0) {
    std::vector<std::byte> out(size + 100);
    BlockKey key = Key(k);
    std::span<std::byte> span(out);
    Result<size_t> r = tier_->ReadMany(tenant, {&key, 1}, {&span, 1})[0];
    if (!r.ok()) return r.status();
    if (*r != size || std::memcmp(out.data(), Bf16Value(k, size).data(), size) != 0) {
      return Status::DataLoss("wrong bytes served for key " + std::to_string(k));
    }
    return Status::OK();
  }
  std::vector<std::byte> ReadFile(const std::string& path) {
    Result<std::unique_ptr<File>> f = mem_->OpenFile(path, FileOptions{});
    EXPECT_TRUE(f.ok());
    if (!f.ok()) return {};
    std::vector<std::byte> bytes(*(*f)->Size());
    size_t got = 0;
    EXPECT_TRUE((*f)->Read(0, bytes, &got).ok());
    bytes.resize(got);
    return bytes;
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
  std::unique_ptr<encryption::KeyManager> keys_;
  std::unique_ptr<BlockCodec> codec_;
  std::unique_ptr<DiskTier> tier_;  // Declared last: closed before the codec and keys go.
};

}  // namespace kvtier::disk_test

#endif  // KVTIER_TIER_DISK_DISK_TEST_UTIL_H_
