// Test helpers for the shared file system tier: a scratch directory that plays the shared
// file system, and an Env whose clock the test sets.

#ifndef KVTIER_SRC_TIER_SHAREDFS_SHARED_FS_TEST_UTIL_H_
#define KVTIER_SRC_TIER_SHAREDFS_SHARED_FS_TEST_UTIL_H_

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/block_key.h"
#include "src/tier/shared/shared_tier.h"

namespace kvtier::testing_g4 {

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier-g4-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Time is whatever the test says; files and logs go to the real Env.
class FakeClockEnv : public Env {
 public:
  explicit FakeClockEnv(uint64_t start_us) : now_us_(start_us) {}
  uint64_t NowMicros() override { return now_us_.load(); }
  void Advance(uint64_t us) { now_us_ += us; }
  void Log(std::string_view) override {}

 private:
  std::atomic<uint64_t> now_us_;
};

inline BlockKey TestKey(uint32_t seed) {
  std::array<uint8_t, kBlockKeySize> bytes{};
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return BlockKey(bytes);
}

// Sets of keys, compared as sorted vectors: `keys` sorted, and the keys of `seeds` sorted.
inline std::vector<BlockKey> SortedKeys(std::vector<BlockKey> keys) {
  std::sort(keys.begin(), keys.end());
  return keys;
}
inline std::vector<BlockKey> TestKeys(std::initializer_list<uint32_t> seeds) {
  std::vector<BlockKey> keys;
  for (uint32_t seed : seeds) keys.push_back(TestKey(seed));
  return SortedKeys(std::move(keys));
}

inline std::vector<std::byte> TestValue(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

inline SharedPut MakePut(const BlockKey& key, std::span<const std::byte> value,
                         SessionId session = 0, uint64_t created_us = 0,
                         std::optional<KvDtype> dtype = std::nullopt) {
  SharedPut put;
  put.key = key;
  put.value = value;
  put.session = session;
  put.created_us = created_us;
  put.dtype = dtype;
  return put;
}

// Regular files under `dir`, recursively.
inline size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) ++n;
  }
  return n;
}

}  // namespace kvtier::testing_g4

#endif  // KVTIER_SRC_TIER_SHAREDFS_SHARED_FS_TEST_UTIL_H_
