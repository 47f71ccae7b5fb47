// Behaviour of the embedded Store as a user sees it: bad input, prefix lookup, eviction
// order, pins, tenant isolation, TTL and read leases.

#include "kvtier/store.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kvtier/env.h"
#include "src/common/arena.h"
#include "src/engine/store_test_util.h"

namespace kvtier {
namespace {

using testing_util::Key;
using testing_util::Value;
constexpr uint64_t kBlock = testing_util::kTestBlock;

using StoreTest = testing_util::StoreTest;

TEST_F(StoreTest, PutThenGetReturnsTheBytes) {
  Open(8);
  ASSERT_TRUE(Put(1).ok());
  EXPECT_TRUE(Has(1));
  Result<BlockHandle> h = store_->Get(tenant_, Key(1));
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->extents().size(), 1u);
  EXPECT_EQ(h->size(), kBlock);
  EXPECT_EQ(0, std::memcmp(h->extents()[0].data(), Value(1).data(), kBlock));
  EXPECT_EQ(store_->Get(tenant_, Key(2)).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, RePutOfAPresentKeyKeepsTheFirstCopy) {
  Open(8);
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(store_->Put(tenant_, Key(1), Value(99)).ok());
  EXPECT_TRUE(Has(1));
  EXPECT_EQ(store_->StatsForTenant(tenant_)->duplicate_puts, 1u);
}

TEST_F(StoreTest, BadInputGetsClearErrors) {
  Open(8);
  std::vector<std::byte> empty, huge(kBlock + 1);
  EXPECT_EQ(store_->Put(tenant_, Key(1), empty).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Put(tenant_, Key(1), huge).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Put(TenantId{7}, Key(1), Value(1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->FindTenant("nobody").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(Put(1).ok());
  std::vector<std::byte> small(kBlock - 1);
  EXPECT_EQ(store_->Read(tenant_, Key(1), small).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(store_->Unpin(tenant_, Key(1)).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->Pin(tenant_, Key(1)).ok());
  ASSERT_TRUE(store_->Unpin(tenant_, Key(1)).ok());
  EXPECT_EQ(store_->Unpin(tenant_, Key(1)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Delete(tenant_, Key(2)).code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, OpenRejectsInconsistentOptions) {
  Options o;
  o.memory.capacity_bytes = 1 * kMiB;
  o.max_block_bytes = 2 * kMiB;
  EXPECT_EQ(Store::Open(o).status().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.memory.page_bytes = 3000;
  EXPECT_EQ(Store::Open(o).status().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.tenants = {TenantOptions{"a"}, TenantOptions{"a"}};
  EXPECT_EQ(Store::Open(o).status().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.tenants.clear();
  EXPECT_EQ(Store::Open(o).status().code(), StatusCode::kInvalidArgument);
}

// A G2 larger than the machine would be found out by the OOM killer after puts were
// acknowledged; it is refused at open, with the reason. A payload-free store (the replay's)
// holds no bytes and simulates any size.
TEST_F(StoreTest, AG2LargerThanTheMachinesMemoryIsRefusedAtOpen) {
  std::string source;
  const uint64_t machine = UsableMemoryBytes(&source);
  Options o;
  o.memory.capacity_bytes = (machine / kGiB + 1) * kGiB;
  Result<std::unique_ptr<Store>> s = Store::Open(o);
  ASSERT_EQ(s.status().code(), StatusCode::kResourceExhausted) << s.status().ToString();
  EXPECT_NE(s.status().message().find("more than this process can have"), std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find(source), std::string::npos) << s.status().ToString();
  o.payload_free = true;
  o.memory.capacity_bytes = uint64_t{1} << 50;  // 1 PiB.
  o.memory.page_bytes = 2 * kMiB;
  EXPECT_TRUE(Store::Open(o).ok());
}

TEST_F(StoreTest, BlockOverTheTenantBudgetIsRejected) {
  Open(8, {TenantOptions{"small", 32 * kKiB}});
  EXPECT_EQ(Put(1).code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, PrefixLookupStopsAtFirstMiss) {
  Open(8);
  for (uint64_t k : {0, 1, 3}) ASSERT_TRUE(Put(k).ok());
  std::vector<BlockKey> keys = {Key(0), Key(1), Key(2), Key(3)};
  Result<PrefixMatch> m = store_->LookupPrefix(tenant_, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->num_blocks, 2u);
  EXPECT_EQ(m->tiers, std::vector<TierLevel>(2, TierLevel::kG2));
  EXPECT_EQ(store_->LookupPrefix(tenant_, std::vector<BlockKey>{Key(2), Key(0)})->num_blocks, 0u);
  EXPECT_EQ(store_->LookupPrefix(tenant_, std::vector<BlockKey>{})->num_blocks, 0u);
}

TEST_F(StoreTest, PrefixLookupFromTokensIgnoresThePartialBlock) {
  Open(8);
  Namespace ns;
  ns.tenant = "default";
  ns.model = "m";
  ns.layout = {.num_layers = 1, .num_kv_heads = 1, .head_dim = 8, .dtype = KvDtype::kFp16,
               .tokens_per_block = 16};
  std::vector<uint32_t> tokens(16 * 3 + 5);
  std::iota(tokens.begin(), tokens.end(), 1);
  std::vector<BlockKey> keys = *ComputeBlockKeys(ns, tokens);
  ASSERT_EQ(keys.size(), 3u);
  for (size_t i = 0; i < 2; ++i) ASSERT_TRUE(store_->Put(tenant_, keys[i], Value(i)).ok());
  EXPECT_EQ(store_->LookupPrefix(ns, tokens)->num_blocks, 2u);
  // The same prompt one token longer still matches; a prompt diverging inside block 0 does not.
  tokens.push_back(9);
  EXPECT_EQ(store_->LookupPrefix(ns, tokens)->num_blocks, 2u);
  tokens[3] = 0;
  EXPECT_EQ(store_->LookupPrefix(ns, tokens)->num_blocks, 0u);
  ns.tenant = "unknown";
  EXPECT_EQ(store_->LookupPrefix(ns, tokens).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, CapacityIsNeverExceeded) {
  Open(8);
  for (uint64_t k = 0; k < 100; ++k) {
    ASSERT_TRUE(Put(k).ok());
    StoreStats s = store_->Stats();
    ASSERT_LE(s.memory_used_bytes, s.memory_capacity_bytes);
    ASSERT_LE(s.blocks, 8u);
  }
  EXPECT_EQ(store_->StatsForTenant(tenant_)->evictions, 92u);
}

TEST_F(StoreTest, OnceScansHaveCostTheHotSetLaterScansDoNot) {
  Open(20);
  // A hot working set of ten blocks, read twice between scans of 100 blocks never read
  // again. G2 eviction starts as LRU, so the first scans push the hot set out; each hot block
  // that comes back is remembered as reused and grows the reused queue's share, until the
  // scans churn only probation and the whole hot set survives them.
  auto hot_survivors = [&] {
    int n = 0;
    for (uint64_t k = 0; k < 10; ++k) n += Has(k) ? 1 : 0;
    return n;
  };
  uint64_t next = 1000;
  int survivors = 0;
  int round = 0;
  for (; round < 30 && survivors < 10; ++round) {
    for (uint64_t k = 0; k < 10; ++k) {
      if (!Has(k)) {
        ASSERT_TRUE(Put(k).ok());
      }
    }
    for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(Has(k));
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(Put(next++).ok());
    survivors = hot_survivors();
  }
  EXPECT_EQ(survivors, 10) << "after " << round << " rounds";
  // And it keeps surviving.
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(Put(next++).ok());
  EXPECT_EQ(hot_survivors(), 10);
}

TEST_F(StoreTest, ChainTailsAreEvictedBeforeHeads) {
  Open(10);
  // A 6-block chain put head first, as an engine stores a prompt.
  for (uint64_t k = 0; k < 6; ++k) {
    ASSERT_TRUE(Put(k, k == 0 ? std::nullopt : std::optional<uint64_t>(k - 1)).ok());
  }
  // Four unrelated blocks fill the store; three more force three evictions.
  for (uint64_t k = 100; k < 107; ++k) ASSERT_TRUE(Put(k).ok());
  std::vector<BlockKey> chain;
  for (uint64_t k = 0; k < 6; ++k) chain.push_back(Key(k));
  // The three evicted from the chain are its last three: the head and its prefix survive.
  EXPECT_EQ(store_->LookupPrefix(tenant_, chain)->num_blocks, 3u);
  EXPECT_FALSE(Has(3));
  EXPECT_FALSE(Has(5));
}

// Conversations as engines send them: a request matches its prefix, then puts its new blocks
// chained after it; the next turn comes back after `gap_s` seconds and extends it.
TEST_F(StoreTest, WithoutPinsOrLeasesAPutAlwaysFindsRoom) {
  // Many prompts sharing heads, re-read at random: main fills with chain heads whose tails sit
  // on probation. Eviction must still find a victim every time.
  Open(32);
  std::mt19937_64 rng(11);
  uint64_t next = 1000;
  for (int prompt = 0; prompt < 600; ++prompt) {
    const uint64_t shared = rng() % 4;  // One of four system prompts heads the chain.
    if (store_->LookupPrefix(tenant_, std::vector<BlockKey>{Key(shared)})->num_blocks == 0) {
      ASSERT_TRUE(Put(shared).ok());
    }
    uint64_t parent = shared;
    const int length = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < length; ++i, ++next) {
      Status s = Put(next, parent);
      ASSERT_TRUE(s.ok()) << "prompt " << prompt << ": " << s.ToString();
      parent = next;
    }
    if (rng() % 2) {
      // Re-read an earlier prompt's prefix.
      std::vector<BlockKey> keys = {Key(shared), Key(next - length)};
      (void)store_->LookupPrefix(tenant_, keys);
    }
  }
  EXPECT_LE(store_->Stats().blocks, 32u);
}

TEST_F(StoreTest, APutNeverEvictsTheParentItExtends) {
  Open(19);
  std::vector<BlockKey> chain;
  for (uint64_t k = 0; k < 18; ++k) {
    ASSERT_TRUE(Put(k, k == 0 ? std::nullopt : std::optional<uint64_t>(k - 1)).ok());
    chain.push_back(Key(k));
  }
  ASSERT_EQ(store_->LookupPrefix(tenant_, chain)->num_blocks, 18u);  // All read once.
  ASSERT_TRUE(Put(100).ok());  // Full; block 17, the chain's tail, is the least recent leaf.
  // The engine extends the chain: the room comes from block 100, not from the parent 17,
  // whose loss would leave block 18 unreachable.
  Status s = Put(18, 17);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(Has(100));
  chain.push_back(Key(18));
  EXPECT_EQ(store_->LookupPrefix(tenant_, chain)->num_blocks, 19u);
}

TEST_F(StoreTest, ReusedChainHeadsDoNotHideTheTail) {
  Open(8);
  std::vector<BlockKey> chain;
  for (uint64_t k = 0; k < 7; ++k) {
    ASSERT_TRUE(Put(k, k == 0 ? std::nullopt : std::optional<uint64_t>(k - 1)).ok());
    chain.push_back(Key(k));
  }
  ASSERT_EQ(store_->LookupPrefix(tenant_, chain)->num_blocks, 7u);
  ASSERT_TRUE(Put(100).ok());     // Full.
  ASSERT_TRUE(Put(7, 6).ok());    // Evicts 100: 6, the least recent, is the parent of 7.
  ASSERT_TRUE(Has(7));
  // Full again, and every block but 7 is the parent of a resident block: 7 goes.
  Status s = Put(101);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(Has(7)) << "the chain's tail goes first";
  EXPECT_EQ(store_->LookupPrefix(tenant_, chain)->num_blocks, 7u);
}

TEST_F(StoreTest, PinnedBlocksAreNeverEvicted) {
  Open(4);
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(store_->Pin(tenant_, Key(1)).ok());
  ASSERT_TRUE(store_->Pin(tenant_, Key(1)).ok());  // Pins nest.
  for (uint64_t k = 10; k < 50; ++k) ASSERT_TRUE(Put(k).ok());
  EXPECT_TRUE(Has(1));
  ASSERT_TRUE(store_->Unpin(tenant_, Key(1)).ok());
  for (uint64_t k = 50; k < 90; ++k) ASSERT_TRUE(Put(k).ok());
  EXPECT_TRUE(Has(1)) << "still pinned once";
  ASSERT_TRUE(store_->Unpin(tenant_, Key(1)).ok());
  // Unpinned, it competes again: blocks that are re-read fill the main queue and push it out.
  for (uint64_t k = 90; k < 200; ++k) {
    ASSERT_TRUE(Put(k).ok());
    ASSERT_TRUE(Has(k));
  }
  EXPECT_FALSE(Has(1));
}

TEST_F(StoreTest, FullOfPinnedBlocksRejectsPutsWithoutLosingAny) {
  Open(3);
  for (uint64_t k = 0; k < 3; ++k) {
    ASSERT_TRUE(Put(k).ok());
    ASSERT_TRUE(store_->Pin(tenant_, Key(k)).ok());
  }
  EXPECT_EQ(Put(9).code(), StatusCode::kResourceExhausted);
  for (uint64_t k = 0; k < 3; ++k) EXPECT_TRUE(Has(k));
  EXPECT_EQ(store_->StatsForTenant(tenant_)->rejected_puts, 1u);
}

TEST_F(StoreTest, TenantsNeverSeeEachOthersBlocks) {
  Open(16, {TenantOptions{"a"}, TenantOptions{"b"}});
  TenantId a = *store_->FindTenant("a"), b = *store_->FindTenant("b");
  // The same (opaque) key in both tenants is two different blocks.
  ASSERT_TRUE(Put(1, std::nullopt, a).ok());
  EXPECT_FALSE(Has(1, b));
  EXPECT_EQ(store_->LookupPrefix(b, std::vector<BlockKey>{Key(1)})->num_blocks, 0u);
  EXPECT_EQ(store_->Delete(b, Key(1)).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Pin(b, Key(1)).code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Put(b, Key(1), Value(1)).ok());
  ASSERT_TRUE(store_->Delete(a, Key(1)).ok());
  EXPECT_TRUE(Has(1, b));
  EXPECT_FALSE(Has(1, a));
}

TEST_F(StoreTest, TenantOverBudgetEvictsOnlyItsOwnBlocks) {
  Open(16, {TenantOptions{"a", 4 * kBlock}, TenantOptions{"b", 8 * kBlock}});
  TenantId a = *store_->FindTenant("a"), b = *store_->FindTenant("b");
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put(100 + k, std::nullopt, b).ok());
  for (uint64_t k = 0; k < 50; ++k) ASSERT_TRUE(Put(k, std::nullopt, a).ok());
  for (uint64_t k = 0; k < 8; ++k) EXPECT_TRUE(Has(100 + k, b)) << "b lost block " << k;
  EXPECT_EQ(store_->StatsForTenant(a)->blocks, 4u);
  EXPECT_EQ(store_->StatsForTenant(a)->bytes, 4 * kBlock);
  EXPECT_EQ(store_->StatsForTenant(b)->evictions, 0u);
}

TEST_F(StoreTest, FullArenaEvictsFromTheTenantFurthestOverItsShare) {
  // Budgets overcommit the arena (8 + 8 > 8): under pressure the tenant holding the larger
  // share of its budget gives up blocks.
  Open(8, {TenantOptions{"a", 8 * kBlock}, TenantOptions{"b", 8 * kBlock}});
  TenantId a = *store_->FindTenant("a"), b = *store_->FindTenant("b");
  for (uint64_t k = 0; k < 6; ++k) ASSERT_TRUE(Put(k, std::nullopt, a).ok());
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(Put(100 + k, std::nullopt, b).ok());
  EXPECT_EQ(store_->StatsForTenant(a)->blocks, 4u);
  EXPECT_EQ(store_->StatsForTenant(b)->blocks, 4u);
  EXPECT_EQ(store_->StatsForTenant(b)->evictions, 0u);
}

TEST_F(StoreTest, BlocksExpireAfterTheirTtlSinceLastAccess) {
  Open(8, {TenantOptions{.name = "default", .ttl_seconds = 60}});
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(2).ok());
  ASSERT_TRUE(Put(3).ok());
  ASSERT_TRUE(store_->Pin(tenant_, Key(3)).ok());
  env_.now_us += 50'000'000;
  EXPECT_TRUE(Has(1));  // Reading refreshes block 1's TTL.
  env_.now_us += 20'000'000;
  EXPECT_TRUE(Has(1));
  EXPECT_FALSE(Has(2)) << "70 s since last access";
  EXPECT_TRUE(Has(3)) << "pinned blocks do not expire";
  env_.now_us += 61'000'000;
  EXPECT_EQ(store_->PurgeExpired(), 1u);
  EXPECT_FALSE(Has(1));
  TenantStats s = *store_->StatsForTenant(tenant_);
  EXPECT_EQ(s.expirations, 2u);
  EXPECT_EQ(s.blocks, 1u);
}

TEST_F(StoreTest, LeasedBytesStayValidAfterDeleteAndTheirSpaceIsNotReused) {
  Open(2);
  ASSERT_TRUE(Put(1).ok());
  Result<BlockHandle> h = store_->Get(tenant_, Key(1));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(store_->Delete(tenant_, Key(1)).ok());
  EXPECT_FALSE(Has(1));
  // The store is full of the leased block and one more: a third put finds nothing evictable
  // except block 2.
  ASSERT_TRUE(Put(2).ok());
  ASSERT_TRUE(Put(3).ok());
  std::vector<std::byte> copy(kBlock);
  h->CopyTo(copy);
  EXPECT_EQ(copy, Value(1));
  EXPECT_EQ(store_->Stats().memory_used_bytes, 2 * kBlock);
  h->Release();
  EXPECT_EQ(store_->Stats().memory_used_bytes, kBlock);
  ASSERT_TRUE(Put(4).ok());
  EXPECT_TRUE(Has(3));
  EXPECT_TRUE(Has(4));
}

TEST_F(StoreTest, BatchFormsReportPerItem) {
  Open(8);
  std::vector<std::byte> v0 = Value(0), v1 = Value(1), empty;
  std::vector<BlockWrite> writes = {{Key(0), v0, std::nullopt},
                                    {Key(1), v1, Key(0)},
                                    {Key(2), empty, Key(1)}};
  std::vector<Status> put = store_->PutMany(tenant_, writes);
  ASSERT_EQ(put.size(), 3u);
  EXPECT_TRUE(put[0].ok() && put[1].ok());
  EXPECT_EQ(put[2].code(), StatusCode::kInvalidArgument);
  std::vector<BlockKey> keys = {Key(0), Key(1), Key(2)};
  std::vector<Result<BlockHandle>> got = store_->GetMany(tenant_, keys);
  EXPECT_TRUE(got[0].ok() && got[1].ok());
  EXPECT_EQ(got[2].status().code(), StatusCode::kNotFound);
  got.clear();
  std::vector<std::byte> b0(kBlock), b1(kBlock), b2(kBlock);
  std::vector<std::span<std::byte>> outs = {b0, b1, b2};
  std::vector<Result<size_t>> read = store_->ReadMany(tenant_, keys, outs);
  EXPECT_TRUE(read[0].ok() && read[1].ok() && !read[2].ok());
  EXPECT_EQ(b1, v1);
  std::vector<std::span<const BlockKey>> prompts = {keys, std::span(keys).first(1)};
  std::vector<Result<PrefixMatch>> m = store_->LookupPrefixMany(tenant_, prompts);
  EXPECT_EQ(m[0]->num_blocks, 2u);
  EXPECT_EQ(m[1]->num_blocks, 1u);
  std::vector<Status> pins = store_->PinMany(tenant_, keys);
  EXPECT_TRUE(pins[0].ok() && pins[1].ok() && !pins[2].ok());
  std::vector<Status> unpins = store_->UnpinMany(tenant_, keys);
  EXPECT_TRUE(unpins[0].ok() && unpins[1].ok() && !unpins[2].ok());
  std::vector<Status> dels = store_->DeleteMany(tenant_, keys);
  EXPECT_TRUE(dels[0].ok() && dels[1].ok());
  EXPECT_EQ(dels[2].code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats().blocks, 0u);
}

TEST_F(StoreTest, FragmentedArenaStoresALargeBlockInPieces) {
  Options o;
  o.memory.capacity_bytes = 8 * kBlock;
  o.max_block_bytes = 4 * kBlock;
  o.env = &env_;
  store_ = std::move(Store::Open(o)).value();
  tenant_ = *store_->FindTenant("default");
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put(k).ok());
  for (uint64_t k = 0; k < 8; k += 2) ASSERT_TRUE(store_->Delete(tenant_, Key(k)).ok());
  // Four free 64 KiB holes, none adjacent: a 256 KiB block still fits, in four pieces.
  std::vector<std::byte> big = Value(77, 4 * kBlock);
  ASSERT_TRUE(store_->Put(tenant_, Key(77), big).ok());
  Result<BlockHandle> h = store_->Get(tenant_, Key(77));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->extents().size(), 4u);
  std::vector<std::byte> out(4 * kBlock);
  ASSERT_TRUE(store_->Read(tenant_, Key(77), out).ok());
  EXPECT_EQ(out, big);
  for (uint64_t k = 1; k < 8; k += 2) EXPECT_TRUE(Has(k));
}

TEST_F(StoreTest, PayloadFreeStoreRunsPoliciesWithoutBytes) {
  Options o;
  o.payload_free = true;
  o.memory.capacity_bytes = 1024 * kGiB;  // Far beyond this machine's memory.
  o.max_block_bytes = 1 * kGiB;
  o.env = &env_;
  store_ = std::move(Store::Open(o)).value();
  tenant_ = *store_->FindTenant("default");
  // Address space only: a payload-free store never touches the bytes.
  void* fake = mmap(nullptr, kGiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(fake, MAP_FAILED);
  std::span<const std::byte> value(static_cast<const std::byte*>(fake), kGiB);
  for (uint64_t k = 0; k < 1100; ++k) ASSERT_TRUE(store_->Put(tenant_, Key(k), value).ok());
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.blocks, 1024u);
  EXPECT_EQ(s.tenants[0].evictions, 76u);
  Result<BlockHandle> h = store_->Get(tenant_, Key(1099));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->size(), 1 * kGiB);
  EXPECT_TRUE(h->extents().empty());
  munmap(fake, kGiB);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

TEST_F(StoreTest, AllocationIsFilledInPlaceAndInvisibleUntilCommitted) {
  Open(4);
  std::optional<SharedArena> arena = store_->shared_arena(tenant_);
  ASSERT_TRUE(arena.has_value());
  EXPECT_GE(arena->fd, 0);
  EXPECT_EQ(arena->size, 4 * kBlock);
  Result<BlockAllocation> a = store_->Allocate(tenant_, Key(1), kBlock - 100);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::vector<std::byte> value = Value(1, kBlock - 100);
  size_t at = 0;
  for (std::span<std::byte> piece : a->extents()) {
    ASSERT_GE(piece.data(), arena->base);
    ASSERT_LE(piece.data() + piece.size(), arena->base + arena->size);
    std::memcpy(piece.data(), value.data() + at, piece.size());
    at += piece.size();
  }
  ASSERT_EQ(at, value.size());
  EXPECT_FALSE(Has(1));
  ASSERT_TRUE(store_->Commit(std::move(*a)).ok());
  std::vector<std::byte> out(kBlock);
  Result<size_t> n = store_->Read(tenant_, Key(1), out);
  ASSERT_TRUE(n.ok());
  out.resize(*n);
  EXPECT_EQ(out, value);
  EXPECT_EQ(store_->Allocate(tenant_, Key(1), kBlock).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->Commit(BlockAllocation()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Allocate(tenant_, Key(2), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Allocate(tenant_, Key(2), kBlock + 1).status().code(),
            StatusCode::kInvalidArgument);
}

// Each tenant's blocks live in a file of its own, which is what a same-host client of that
// tenant maps; the capacity is still shared exactly, and an evicted block's memory goes back.
TEST_F(StoreTest, TenantsHaveRegionsOfTheirOwnAndShareTheCapacityExactly) {
  Open(4, {TenantOptions{"a"}, TenantOptions{"b"}});
  const TenantId a = *store_->FindTenant("a");
  const TenantId b = *store_->FindTenant("b");
  const SharedArena ra = *store_->shared_arena(a);
  const SharedArena rb = *store_->shared_arena(b);
  EXPECT_NE(ra.base, rb.base);
  auto backed = [](const SharedArena& r) {
    struct stat st{};
    EXPECT_EQ(fstat(r.fd, &st), 0);
    return uint64_t(st.st_blocks) * 512;
  };
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(Put(k, std::nullopt, a).ok());
  EXPECT_EQ(backed(ra), 4 * kBlock);
  EXPECT_EQ(backed(rb), 0u);
  // A put of b into a full G2 evicts a block of a, whose memory goes to b.
  ASSERT_TRUE(Put(10, std::nullopt, b).ok());
  EXPECT_EQ(store_->Stats().memory_used_bytes, 4 * kBlock);
  EXPECT_EQ(backed(ra), 3 * kBlock) << "an evicted block kept its memory";
  EXPECT_EQ(backed(rb), kBlock);
  // A deleted block's pages keep their memory for a's next blocks, until another tenant needs
  // it: b takes the whole capacity, as in one shared arena, and memory never exceeds it.
  for (uint64_t k = 0; k < 4; ++k) (void)store_->Delete(a, Key(k));
  EXPECT_EQ(backed(ra), 3 * kBlock);
  for (uint64_t k = 11; k < 14; ++k) {
    ASSERT_TRUE(Put(k, std::nullopt, b).ok());
    EXPECT_LE(backed(ra) + backed(rb), 4 * kBlock);
  }
  EXPECT_EQ(store_->StatsForTenant(b)->bytes, 4 * kBlock);
  EXPECT_EQ(backed(rb), 4 * kBlock);
  EXPECT_EQ(backed(ra), 0u);
  // A block's bytes lie in its own tenant's region only.
  Result<BlockHandle> h = store_->Get(b, Key(10));
  ASSERT_TRUE(h.ok());
  for (std::span<const std::byte> piece : h->extents()) {
    EXPECT_GE(piece.data(), rb.base);
    EXPECT_LE(piece.data() + piece.size(), rb.base + rb.size);
  }
  // The descriptor handed to clients is read-only.
  EXPECT_EQ(mmap(nullptr, rb.size, PROT_READ | PROT_WRITE, MAP_SHARED, rb.fd, 0), MAP_FAILED);
  EXPECT_EQ(ftruncate(rb.fd, 0), -1);
}

TEST_F(StoreTest, AbandonedAllocationsGiveTheirSpaceBack) {
  Open(4);
  const uint64_t used_before = store_->Stats().memory_used_bytes;
  {
    std::vector<BlockAllocation> held;
    for (uint64_t k = 0; k < 4; ++k) {
      Result<BlockAllocation> a = store_->Allocate(tenant_, Key(k), kBlock);
      ASSERT_TRUE(a.ok());
      held.push_back(std::move(*a));
    }
    EXPECT_EQ(store_->Stats().memory_used_bytes, 4 * kBlock);
    // Every page is reserved and nothing is evictable: a put must fail, not wait.
    EXPECT_EQ(Put(9).code(), StatusCode::kResourceExhausted);
  }
  EXPECT_EQ(store_->Stats().memory_used_bytes, used_before);
  for (uint64_t k = 0; k < 4; ++k) ASSERT_TRUE(Put(k).ok());
  for (uint64_t k = 0; k < 4; ++k) EXPECT_TRUE(Has(k));
}

TEST_F(StoreTest, PayloadFreeStoreHasNoArenaToShare) {
  Options o;
  o.payload_free = true;
  Result<std::unique_ptr<Store>> s = Store::Open(o);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE((*s)->shared_arena(*(*s)->FindTenant("default")).has_value());
  EXPECT_EQ((*s)->Allocate(*(*s)->FindTenant("default"), Key(1), 100).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvtier
