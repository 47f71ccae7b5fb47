// Several threads hammering one Store: every byte read must be the byte written for that key,
// and the store's accounting must balance afterwards. Run under TSan in CI.

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/store.h"

namespace kvtier {
namespace {

constexpr size_t kBlock = 64 * kKiB;

BlockKey Key(uint64_t v) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &v, sizeof(v));
  return BlockKey(b);
}

// The content of block k is a function of k, so any reader can check it.
void Fill(uint64_t k, std::vector<std::byte>* v) {
  for (size_t i = 0; i < v->size(); i += 8) {
    uint64_t word = k * 0x9e3779b97f4a7c15ULL + i;
    std::memcpy(v->data() + i, &word, 8);
  }
}

// What ManyThreadsNeverSeeWrongBytes's pinning threads may meet, in one thread: a pinned
// block deleted and put again is a new, unpinned block.
TEST(StoreConcurrencyTest, AnUnpinAfterADeleteAndAPutAgainFindsNoPin) {
  Options o;
  o.memory.capacity_bytes = 8 * kBlock;
  o.max_block_bytes = kBlock;
  o.tenants = {TenantOptions{"a"}};
  std::unique_ptr<Store> store = std::move(Store::Open(o)).value();
  const TenantId a = *store->FindTenant("a");
  std::vector<std::byte> value(kBlock);
  Fill(1, &value);
  ASSERT_TRUE(store->Put(a, Key(1), value).ok());
  ASSERT_TRUE(store->Pin(a, Key(1)).ok());
  ASSERT_TRUE(store->Delete(a, Key(1)).ok());
  EXPECT_EQ(store->Unpin(a, Key(1)).code(), StatusCode::kNotFound);
  ASSERT_TRUE(store->Put(a, Key(1), value).ok());
  EXPECT_EQ(store->Unpin(a, Key(1)).code(), StatusCode::kFailedPrecondition);
}

TEST(StoreConcurrencyTest, ManyThreadsNeverSeeWrongBytes) {
  Options o;
  o.memory.capacity_bytes = 64 * kBlock;  // Far fewer than the keys: constant eviction.
  o.max_block_bytes = kBlock;
  o.tenants = {TenantOptions{"a", 40 * kBlock}, TenantOptions{"b"}};
  std::unique_ptr<Store> store = std::move(Store::Open(o)).value();
  const TenantId tenants[] = {*store->FindTenant("a"), *store->FindTenant("b")};

  constexpr int kThreads = 6;
  constexpr int kOps = 3000;
  constexpr uint64_t kKeys = 200;
  std::atomic<uint64_t> wrong{0}, reads{0};
  std::mutex first_mu;
  std::string first;  // What the first wrong result was, for the failure message.
  auto bad = [&](const std::string& what) {
    if (wrong++ == 0) {
      std::lock_guard<std::mutex> l(first_mu);
      first = what;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<std::byte> value(kBlock), out(kBlock), expect(kBlock);
      for (int i = 0; i < kOps; ++i) {
        TenantId tenant = tenants[rng() % 2];
        uint64_t k = rng() % kKeys;
        switch (rng() % 6) {
          case 0:
          case 1: {
            Fill(k, &value);
            PutOptions po;
            if (k % 4 != 0) po.parent = Key(k - 1);
            Status s = store->Put(tenant, Key(k), value, po);
            if (!s.ok() && s.code() != StatusCode::kResourceExhausted) bad("Put: " + s.ToString());
            break;
          }
          case 2: {
            Result<size_t> n = store->Read(tenant, Key(k), out);
            if (n.ok()) {
              Fill(k, &expect);
              reads++;
              if (*n != kBlock || out != expect) bad("Read: other bytes");
            }
            break;
          }
          case 3: {
            Result<BlockHandle> h = store->Get(tenant, Key(k));
            if (h.ok()) {
              h->CopyTo(out);
              Fill(k, &expect);
              reads++;
              if (out != expect) bad("Get: other bytes");
            }
            break;
          }
          case 4: {
            std::vector<BlockKey> keys = {Key(k & ~3ull), Key((k & ~3ull) + 1),
                                          Key((k & ~3ull) + 2)};
            Result<PrefixMatch> m = store->LookupPrefix(tenant, keys);
            if (!m.ok()) bad("LookupPrefix: " + m.status().ToString());
            break;
          }
          case 5: {
            if (rng() % 2) {
              (void)store->Delete(tenant, Key(k));
            } else if (store->Pin(tenant, Key(k)).ok()) {
              // A delete by another thread may remove the pinned block in between (deletes
              // remove pinned blocks): NotFound, or FailedPrecondition when a third put it
              // back meanwhile, unpinned (AnUnpinAfterADeleteAndAPutAgainFindsNoPin).
              // Anything else, a lost pin above all, is wrong.
              Status u = store->Unpin(tenant, Key(k));
              if (!u.ok() && u.code() != StatusCode::kNotFound &&
                  u.code() != StatusCode::kFailedPrecondition) {
                bad("Unpin: " + u.ToString());
              }
            }
            break;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0u) << "the first: " << first;
  EXPECT_GT(reads.load(), 0u);

  StoreStats s = store->Stats();
  EXPECT_LE(s.memory_used_bytes, s.memory_capacity_bytes);
  uint64_t tenant_bytes = 0, tenant_blocks = 0;
  for (const TenantStats& t : s.tenants) {
    tenant_bytes += t.bytes;
    tenant_blocks += t.blocks;
  }
  // No leases are left, so every used byte belongs to a resident block.
  EXPECT_EQ(tenant_bytes, s.memory_used_bytes);
  EXPECT_EQ(tenant_blocks, s.blocks);
  EXPECT_LE(s.tenants[0].bytes, 40 * kBlock);
}

}  // namespace
}  // namespace kvtier
