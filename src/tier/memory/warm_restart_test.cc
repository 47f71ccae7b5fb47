// Warm restart of G2 (MemoryTierOptions::arena_file) as an embedded user sees it: a store
// closed and opened again serves every block with the same bytes, pins, sessions and chains;
// damaged bytes or a damaged index are never served; changed options drop only what no
// longer fits.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvtier/store.h"

namespace kvtier {
namespace {

constexpr uint64_t kBlock = 64 * kKiB;

BlockKey Key(uint64_t v) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &v, sizeof(v));
  b[31] = 0x77;
  return BlockKey(b);
}

std::vector<std::byte> Value(uint64_t seed, size_t size = kBlock) {
  std::vector<std::byte> v(size);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<std::byte>(x);
  }
  return v;
}

class WarmRestartTest : public ::testing::Test {
 protected:
  WarmRestartTest() {
    // tmpfs where there is one, as in production; any file system works for the test.
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    dir_ = base / ("kvtier_warm_restart_" + std::to_string(getpid()) + "_" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    options_.memory.capacity_bytes = 64 * kBlock;
    options_.memory.arena_file = (dir_ / "g2").string();
    options_.max_block_bytes = 4 * kBlock;
    options_.tenants = {TenantOptions{"default"}, TenantOptions{"acme"}};
  }
  ~WarmRestartTest() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Open() {
    store_.reset();
    Result<std::unique_ptr<Store>> s = Store::Open(options_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  TenantId Tenant(const char* name) { return *store_->FindTenant(name); }
  Status Put(const char* tenant, uint64_t k, size_t size = kBlock, PutOptions po = {}) {
    return store_->Put(Tenant(tenant), Key(k), Value(k, size), po);
  }
  // The block's bytes are exactly what was put; false when it is not served at all.
  bool Has(const char* tenant, uint64_t k, size_t size = kBlock) {
    std::vector<std::byte> out(4 * kBlock);
    Result<size_t> n = store_->Read(Tenant(tenant), Key(k), out);
    if (!n.ok()) return false;
    out.resize(*n);
    EXPECT_EQ(out, Value(k, size)) << "block " << k << " came back with other bytes";
    return true;
  }
  StoreStats Stats() { return store_->Stats(); }

  std::filesystem::path dir_;
  Options options_;
  std::unique_ptr<Store> store_;
};

TEST_F(WarmRestartTest, EveryBlockComesBackWithItsBytesPinsSessionsAndChains) {
  Open();
  for (uint64_t k = 0; k < 20; ++k) {
    PutOptions po;
    if (k > 0) po.parent = Key(k - 1);
    po.session = k < 10 ? 7 : 8;
    ASSERT_TRUE(Put("default", k, kBlock, po).ok());
  }
  for (uint64_t k = 100; k < 140; ++k) ASSERT_TRUE(Put("acme", k).ok());
  for (uint64_t k = 100; k < 140; k += 2) ASSERT_TRUE(store_->Delete(Tenant("acme"), Key(k)).ok());
  for (uint64_t k = 200; k < 205; ++k) ASSERT_TRUE(Put("acme", k, 3 * kBlock + 5).ok());
  ASSERT_TRUE(store_->Pin(Tenant("default"), Key(3)).ok());
  const uint64_t blocks = Stats().blocks;

  Open();
  EXPECT_EQ(Stats().memory_restored_blocks, blocks);
  EXPECT_EQ(Stats().memory_restore_dropped_blocks, 0u);
  for (uint64_t k = 0; k < 20; ++k) EXPECT_TRUE(Has("default", k)) << k;
  for (uint64_t k = 101; k < 140; k += 2) EXPECT_TRUE(Has("acme", k)) << k;
  for (uint64_t k = 200; k < 205; ++k) EXPECT_TRUE(Has("acme", k, 3 * kBlock + 5)) << k;
  EXPECT_FALSE(Has("acme", 100));
  EXPECT_FALSE(Has("default", 101)) << "a block crossed tenants";

  // Sessions came back: deleting session 7 removes blocks 0..9 and only them.
  Result<DeletionReport> deleted = store_->DeleteSession(Tenant("default"), 7, "test");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->memory_blocks, 10u);
  EXPECT_FALSE(Has("default", 3));
  EXPECT_TRUE(Has("default", 10));

  // The pin came back: a flood of new blocks evicts everything of session 8 but no pinned one.
  Open();
  ASSERT_TRUE(Put("default", 999).ok());
  ASSERT_TRUE(store_->Pin(Tenant("default"), Key(999)).ok());
  Open();
  for (uint64_t k = 1000; k < 1200; ++k) ASSERT_TRUE(Put("default", k).ok());
  EXPECT_TRUE(Has("default", 999));
  EXPECT_FALSE(Has("default", 10));
}

// A tenant's region spans the capacity, so a block is in several pieces only when its own
// tenant fills G2: free every other block of a full G2, then put larger ones into the holes.
TEST_F(WarmRestartTest, BlocksInSeveralPiecesComeBackWhole) {
  Open();
  for (uint64_t k = 0; k < 64; ++k) ASSERT_TRUE(Put("acme", k).ok());
  for (uint64_t k = 0; k < 64; k += 2) ASSERT_TRUE(store_->Delete(Tenant("acme"), Key(k)).ok());
  for (uint64_t k = 100; k < 105; ++k) ASSERT_TRUE(Put("acme", k, 3 * kBlock + 5).ok());
  ASSERT_GT(Stats().multi_extent_blocks, 0u);
  const uint64_t blocks = Stats().blocks;
  Open();
  EXPECT_EQ(Stats().memory_restored_blocks, blocks);
  EXPECT_GT(Stats().multi_extent_blocks, 0u);
  for (uint64_t k = 100; k < 105; ++k) EXPECT_TRUE(Has("acme", k, 3 * kBlock + 5)) << k;
  for (uint64_t k = 1; k < 64; k += 2) EXPECT_TRUE(Has("acme", k)) << k;
}

TEST_F(WarmRestartTest, AChainStillLosesItsTailFirstAfterARestart) {
  options_.memory.capacity_bytes = 16 * kBlock;
  Open();
  for (uint64_t k = 0; k < 8; ++k) {
    PutOptions po;
    if (k > 0) po.parent = Key(k - 1);
    ASSERT_TRUE(Put("default", k, kBlock, po).ok());
  }
  Open();
  // Twelve more blocks need twelve pages of the sixteen: the chain gives up its four
  // deepest blocks and keeps its head.
  for (uint64_t k = 100; k < 112; ++k) ASSERT_TRUE(Put("default", k).ok());
  for (uint64_t k = 0; k < 4; ++k) EXPECT_TRUE(Has("default", k)) << k;
  for (uint64_t k = 4; k < 8; ++k) EXPECT_FALSE(Has("default", k)) << k;
}

TEST_F(WarmRestartTest, DamagedBytesAreDroppedNeverServed) {
  Open();
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put("default", k).ok());
  store_.reset();
  // The first block went to the first page of the default tenant's region file (best fit,
  // lowest address): the region file that holds memory, as acme's holds none.
  std::string region;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    struct stat st{};
    const std::string name = entry.path().filename().string();
    if (name.size() == 3 + 16 && name.starts_with("g2.") && stat(entry.path().c_str(), &st) == 0 &&
        st.st_blocks > 0) {
      region = entry.path();
    }
  }
  ASSERT_FALSE(region.empty());
  const int fd = open(region.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(pread(fd, &c, 1, 1000), 1);
  c = static_cast<char>(c ^ 0x40);
  ASSERT_EQ(pwrite(fd, &c, 1, 1000), 1);
  close(fd);
  Open();
  EXPECT_EQ(Stats().memory_restored_blocks, 7u);
  EXPECT_EQ(Stats().memory_restore_dropped_blocks, 1u);
  EXPECT_FALSE(Has("default", 0));
  for (uint64_t k = 1; k < 8; ++k) EXPECT_TRUE(Has("default", k)) << k;
}

TEST_F(WarmRestartTest, ADamagedOrMissingIndexStartsEmpty) {
  const std::string index = options_.memory.arena_file + ".index";
  Open();
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put("default", k).ok());
  store_.reset();
  ASSERT_TRUE(std::filesystem::exists(index));
  {  // One byte of the index changed.
    std::fstream f(index, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(60);
    f.put('\x5a');
  }
  Open();
  EXPECT_EQ(Stats().memory_restored_blocks, 0u);
  for (uint64_t k = 0; k < 8; ++k) EXPECT_FALSE(Has("default", k)) << k;
  ASSERT_TRUE(Put("default", 50).ok());
  store_.reset();
  // A truncated index: cut into its trailer (the file starts with the index's length).
  uint64_t length = 0;
  std::ifstream(index, std::ios::binary).read(reinterpret_cast<char*>(&length), 8);
  std::filesystem::resize_file(index, 8 + length - 9);
  Open();
  EXPECT_EQ(Stats().memory_restored_blocks, 0u);
  EXPECT_FALSE(Has("default", 50));
}

TEST_F(WarmRestartTest, WhileAStoreRunsItsIndexIsGoneAndNoOtherStoreOpensTheArena) {
  Open();
  ASSERT_TRUE(Put("default", 1).ok());
  Open();
  // What this store changes from now on is described by no index until it closes: a crash
  // now leaves nothing the next open could pair with the newer bytes.
  EXPECT_FALSE(std::filesystem::exists(options_.memory.arena_file + ".index"));
  Result<std::unique_ptr<Store>> second = Store::Open(options_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status().ToString();
  EXPECT_TRUE(Has("default", 1));
}

TEST_F(WarmRestartTest, ChangedOptionsDropOnlyWhatNoLongerFits) {
  Open();
  for (uint64_t k = 0; k < 40; ++k) ASSERT_TRUE(Put("default", k).ok());
  for (uint64_t k = 100; k < 110; ++k) ASSERT_TRUE(Put("acme", k).ok());
  // A smaller arena: the blocks on pages past its end are dropped (40 + 10 pages were used
  // from the start, so 18 of them lie past 32 pages).
  options_.memory.capacity_bytes = 32 * kBlock;
  Open();
  EXPECT_EQ(Stats().memory_restored_blocks, 32u);
  EXPECT_EQ(Stats().memory_restore_dropped_blocks, 18u);
  for (uint64_t k = 0; k < 32; ++k) EXPECT_TRUE(Has("default", k)) << k;
  // A tenant gone from the configuration, and a budget lowered: its blocks go, and the
  // tenant over its new budget keeps its most recent blocks.
  options_.tenants = {TenantOptions{"default"}};
  options_.tenants[0].memory_budget_bytes = 8 * kBlock;
  Open();
  EXPECT_EQ(Stats().memory_restored_blocks, 8u);
  for (uint64_t k = 24; k < 32; ++k) EXPECT_TRUE(Has("default", k)) << k;
  // Another page size: nothing can be adopted; the store starts empty and works.
  options_.memory.page_bytes = 16 * kKiB;
  Open();
  EXPECT_EQ(Stats().memory_restored_blocks, 0u);
  EXPECT_FALSE(Has("default", 30));
  ASSERT_TRUE(Put("default", 1).ok());
  EXPECT_TRUE(Has("default", 1));
}

}  // namespace
}  // namespace kvtier
