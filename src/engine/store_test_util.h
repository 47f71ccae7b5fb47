// What the Store's unit tests share: a clock they set, and keys and values made from numbers.

#ifndef KVTIER_ENGINE_STORE_TEST_UTIL_H_
#define KVTIER_ENGINE_STORE_TEST_UTIL_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/options.h"

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

}  // namespace kvtier::testing_util

#endif  // KVTIER_ENGINE_STORE_TEST_UTIL_H_
