// What the Store's unit tests share: a clock they set, keys and values made from numbers, and a
// small Store on that clock.

#ifndef KVTIER_ENGINE_STORE_TEST_UTIL_H_
#define KVTIER_ENGINE_STORE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/options.h"
#include "kvtier/store.h"

namespace kvtier::testing_util {

inline constexpr uint64_t kTestBlock = 64 * kKiB;

class ManualClockEnv final : public Env {
 public:
  uint64_t NowMicros() override { return now_us.load(); }
  std::atomic<uint64_t> now_us{1'000'000'000'000};
};

inline BlockKey Key(uint64_t v) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &v, sizeof(v));
  b[31] = 0xee;
  return BlockKey(b);
}

// A value whose bytes are a function of `seed`.
inline std::vector<std::byte> Value(uint64_t seed, size_t size = kTestBlock) {
  std::vector<std::byte> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = std::byte(static_cast<uint8_t>(seed * 131 + i * 7));
  return v;
}

// A Store of 64 KiB blocks on a clock the test sets.
class StoreTest : public ::testing::Test {
 protected:
  // A store of `blocks` blocks of 64 KiB, for the tenants given.
  void Open(uint64_t blocks, std::vector<TenantOptions> tenants = {TenantOptions{"default"}}) {
    Options o;
    o.memory.capacity_bytes = blocks * kTestBlock;
    o.max_block_bytes = kTestBlock;
    o.tenants = std::move(tenants);
    o.env = &env_;
    Result<std::unique_ptr<Store>> s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    tenant_ = *store_->FindTenant(o.tenants[0].name);
  }

  Status Put(uint64_t k, std::optional<uint64_t> parent = std::nullopt, TenantId t = {}) {
    PutOptions po;
    if (parent) po.parent = Key(*parent);
    return store_->Put(t == TenantId{} ? tenant_ : t, Key(k), Value(k), po);
  }

  bool Has(uint64_t k, TenantId t = {}) {
    std::vector<std::byte> out(kTestBlock);
    Result<size_t> n = store_->Read(t == TenantId{} ? tenant_ : t, Key(k), out);
    if (!n.ok()) return false;
    EXPECT_EQ(out, Value(k)) << "block " << k << " came back with wrong bytes";
    return true;
  }

  ManualClockEnv env_;
  std::unique_ptr<Store> store_;
  TenantId tenant_;
};

}  // namespace kvtier::testing_util

#endif  // KVTIER_ENGINE_STORE_TEST_UTIL_H_
