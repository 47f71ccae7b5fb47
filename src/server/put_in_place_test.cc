#include "src/server/put_in_place.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace kvtier::server {
namespace {

constexpr size_t kBlock = 64 << 10;

BlockKey Key(uint8_t n) {
  std::array<uint8_t, kBlockKeySize> b{};
  b[0] = n;
  b[31] = 0x1B;
  return BlockKey(b);
}

std::vector<std::byte> Value(uint8_t seed, size_t size = kBlock) {
  std::vector<std::byte> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>(seed * 31 + i * 7);
  return v;
}

protocol::PutEntry Entry(const BlockKey& key, size_t size,
                         std::optional<BlockKey> parent = std::nullopt, SessionId session = 0,
                         std::optional<KvDtype> dtype = std::nullopt) {
  protocol::PutEntry e;
  e.key = key;
  e.parent = parent;
  e.size = size;
  e.session = session;
  e.dtype = dtype;
  return e;
}

class InPlacePutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Options o;
    o.memory.capacity_bytes = 16 * kBlock;
    o.max_block_bytes = 4 * kBlock;
    o.tenants = {TenantOptions{"default"}};
    Result<std::unique_ptr<Store>> s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    tenant_ = *store_->FindTenant("default");
  }

  // Feeds `values` (the payload after the directory, entry after entry) as the event loop does,
  // in reads of at most `step` bytes, counting the bytes the put asked to drop.
  void Feed(InPlacePut* put, const std::vector<std::vector<std::byte>>& values, size_t step,
            size_t* dropped = nullptr) {
    std::vector<std::byte> payload;
    for (const auto& v : values) payload.insert(payload.end(), v.begin(), v.end());
    size_t at = 0;
    while (!put->done()) {
      std::span<std::byte> target = put->Target();
      ASSERT_FALSE(target.empty());
      ASSERT_LE(target.size(), payload.size() - at);
      for (size_t filled = 0; filled < target.size();) {
        const size_t n = std::min(step, target.size() - filled);
        if (target.data() != nullptr) {
          std::memcpy(target.data() + filled, payload.data() + at, n);
        } else if (dropped != nullptr) {
          *dropped += n;
        }
        filled += n;
        at += n;
      }
      put->Filled();
    }
    EXPECT_EQ(at, payload.size());
  }

  std::vector<std::byte> Read(const BlockKey& key) {
    Result<BlockHandle> h = store_->Get(tenant_, key);
    if (!h.ok()) return {};
    std::vector<std::byte> out(h->size());
    h->CopyTo(out);
    return out;
  }

  std::unique_ptr<Store> store_;
  TenantId tenant_;
};

TEST_F(InPlacePutTest, StoresEachEntryWithItsBytesAndOptions) {
  std::vector<protocol::PutEntry> entries = {
      Entry(Key(1), kBlock, std::nullopt, 5),
      Entry(Key(2), 3 * kBlock + 17, Key(1), 5, KvDtype::kBf16),
  };
  std::vector<std::vector<std::byte>> values = {Value(1), Value(2, 3 * kBlock + 17)};
  InPlacePut put(store_.get(), tenant_, entries);
  Feed(&put, values, 10000);
  ASSERT_EQ(put.statuses().size(), 2u);
  for (const Status& s : put.statuses()) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Read(Key(1)), values[0]);
  EXPECT_EQ(Read(Key(2)), values[1]);
  // The session came with the blocks: deleting it removes both.
  Result<DeletionReport> gone = store_->DeleteSession(tenant_, 5, "test");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->memory_blocks, 2u);
}

TEST_F(InPlacePutTest, ABatchLargerThanG2IsStoredAsPutManyStoresIt) {
  std::vector<protocol::PutEntry> entries;
  std::vector<std::vector<std::byte>> values;
  for (uint8_t k = 0; k < 40; ++k) {
    entries.push_back(Entry(Key(k), kBlock));
    values.push_back(Value(k));
  }
  InPlacePut put(store_.get(), tenant_, entries);
  Feed(&put, values, kBlock);
  for (const Status& s : put.statuses()) EXPECT_TRUE(s.ok()) << s.ToString();
  // The earliest were evicted to make room for the latest, which are all there.
  for (uint8_t k = 30; k < 40; ++k) EXPECT_EQ(Read(Key(k)), values[k]) << int{k};
  EXPECT_TRUE(Read(Key(0)).empty());
}

TEST_F(InPlacePutTest, AResidentKeyKeepsItsBytesAndARefusedEntryReportsWhy) {
  ASSERT_TRUE(store_->Put(tenant_, Key(1), Value(1)).ok());
  // Everything else pinned: no room can be made for a new block.
  for (uint8_t k = 2; k < 17; ++k) {
    ASSERT_TRUE(store_->Put(tenant_, Key(k), Value(k)).ok());
    ASSERT_TRUE(store_->Pin(tenant_, Key(k)).ok());
  }
  ASSERT_TRUE(store_->Pin(tenant_, Key(1)).ok());
  std::vector<protocol::PutEntry> entries = {Entry(Key(1), kBlock), Entry(Key(50), kBlock)};
  InPlacePut put(store_.get(), tenant_, entries);
  size_t dropped = 0;
  Feed(&put, {Value(99), Value(50)}, 4096, &dropped);
  EXPECT_EQ(dropped, 2 * kBlock);
  EXPECT_TRUE(put.statuses()[0].ok()) << put.statuses()[0].ToString();
  EXPECT_EQ(put.statuses()[1].code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Read(Key(1)), Value(1));
  EXPECT_TRUE(Read(Key(50)).empty());
}

TEST_F(InPlacePutTest, APutCutShortGivesItsSpaceBackAndShowsNothing) {
  const uint64_t used = store_->Stats().memory_used_bytes;
  {
    std::vector<protocol::PutEntry> entries = {Entry(Key(1), kBlock), Entry(Key(2), 2 * kBlock)};
    InPlacePut put(store_.get(), tenant_, entries);
    std::span<std::byte> first = put.Target();
    std::vector<std::byte> v = Value(1);
    std::memcpy(first.data(), v.data(), first.size());
    put.Filled();
    (void)put.Target();  // The second entry's space is taken; its bytes never come.
    EXPECT_GT(store_->Stats().memory_used_bytes, used + kBlock);
  }
  EXPECT_EQ(Read(Key(1)), Value(1));  // Published when its last byte came.
  EXPECT_TRUE(Read(Key(2)).empty());
  EXPECT_EQ(store_->Stats().memory_used_bytes, used + kBlock);
}

}  // namespace
}  // namespace kvtier::server
