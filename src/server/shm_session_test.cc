#include "src/server/shm_session.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "kvtier/store.h"

namespace kvtier::server {
namespace {

using protocol::ShmExtent;

constexpr size_t kBlock = 64 << 10;

BlockKey Key(uint8_t n) {
  std::array<uint8_t, kBlockKeySize> b{};
  b[0] = n;
  b[31] = 0x5E;
  return BlockKey(b);
}

std::vector<std::byte> Value(uint8_t seed, size_t size = kBlock) {
  std::vector<std::byte> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>(seed + i * 7);
  return v;
}

class ShmSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Options o;
    o.memory.capacity_bytes = 16 * kBlock;
    o.max_block_bytes = kBlock;
    o.tenants = {TenantOptions{"default"}};
    Result<std::unique_ptr<Store>> s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    tenant_ = *store_->FindTenant("default");
    arena_ = *store_->shared_arena(tenant_);
  }

  // The bytes extents name, read through the arena.
  std::vector<std::byte> Bytes(const std::vector<ShmExtent>& extents) const {
    std::vector<std::byte> out;
    for (const ShmExtent& e : extents) {
      out.insert(out.end(), arena_.base + e.offset, arena_.base + e.offset + e.length);
    }
    return out;
  }

  uint64_t Used() const { return store_->Stats().memory_used_bytes; }

  std::unique_ptr<ShmSession> NewSession(const ShmSession::Limits& limits) {
    Result<std::unique_ptr<ShmSession>> s =
        ShmSession::Create(store_.get(), tenant_, arena_, 4096, limits);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // The session's staging file, mapped as a client maps it.
  static std::byte* MapStaging(const ShmSession& session) {
    void* p = mmap(nullptr, session.staging_size(), PROT_READ | PROT_WRITE, MAP_SHARED,
                   session.staging_fd(), 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<std::byte*>(p);
  }

  BlockHandle GetHandle(const BlockKey& key) {
    Result<BlockHandle> h = store_->Get(tenant_, key);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? std::move(h).value() : BlockHandle();
  }

  std::unique_ptr<Store> store_;
  TenantId tenant_;
  SharedArena arena_;
};

TEST_F(ShmSessionTest, LeaseKeepsBytesAfterDeleteUntilReleased) {
  ASSERT_TRUE(store_->Put(tenant_, Key(1), Value(1)).ok());
  std::unique_ptr<ShmSession> session = NewSession({});
  Result<BlockHandle> h = store_->Get(tenant_, Key(1));
  ASSERT_TRUE(h.ok());
  std::vector<ShmExtent> extents;
  Result<uint64_t> lease = session->AddLease(std::move(h).value(), &extents);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(protocol::CheckExtents(extents, kBlock, arena_.size).ok());
  ASSERT_TRUE(store_->Delete(tenant_, Key(1)).ok());
  // Fill the arena with other blocks: the leased space must not be reused.
  for (uint8_t k = 10; k < 40; ++k) (void)store_->Put(tenant_, Key(k), Value(k));
  EXPECT_EQ(Bytes(extents), Value(1));
  EXPECT_EQ(session->lease_count(), 1u);
  EXPECT_TRUE(session->Release(*lease).ok());
  EXPECT_EQ(session->Release(*lease).code(), StatusCode::kNotFound);
  EXPECT_EQ(session->Release(12345).code(), StatusCode::kNotFound);
}

TEST_F(ShmSessionTest, LeaseLimitIsAClearError) {
  ASSERT_TRUE(store_->Put(tenant_, Key(1), Value(1)).ok());
  std::unique_ptr<ShmSession> session = NewSession({.max_leases = 3, .max_allocations = 1});
  std::vector<ShmExtent> extents;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(session->AddLease(GetHandle(Key(1)), &extents).ok());
  }
  Result<uint64_t> over = session->AddLease(GetHandle(Key(1)), &extents);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("max_leases"), std::string_view::npos);
}

TEST_F(ShmSessionTest, AllocateFillCommitPublishes) {
  std::unique_ptr<ShmSession> session = NewSession({});
  protocol::PutEntry entry{Key(2), std::nullopt, kBlock, 7, KvDtype::kBf16};
  std::vector<ShmExtent> extents;
  Result<uint64_t> id = session->Allocate(entry, &extents);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE(protocol::CheckExtents(extents, kBlock, arena_.size).ok());
  ASSERT_TRUE(protocol::CheckExtents(extents, kBlock, session->staging_size()).ok());
  std::byte* staging = MapStaging(*session);
  std::vector<std::byte> v = Value(2);
  size_t off = 0;
  for (const ShmExtent& e : extents) {
    std::memcpy(staging + e.offset, v.data() + off, e.length);
    off += e.length;
  }
  EXPECT_EQ(store_->Get(tenant_, Key(2)).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(session->Commit(*id).ok());
  EXPECT_EQ(session->Commit(*id).code(), StatusCode::kNotFound);
  // The client writing on into its staging pages changes nothing: the block was copied.
  std::memset(staging + extents[0].offset, 0x5a, extents[0].length);
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(store_->Read(tenant_, Key(2), out).ok());
  EXPECT_EQ(out, v);
  // Nor can it write where the block lies: its descriptor of the region is read-only.
  EXPECT_EQ(mmap(nullptr, arena_.size, PROT_READ | PROT_WRITE, MAP_SHARED, arena_.fd, 0),
            MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  munmap(staging, session->staging_size());
  // The key is present now: nothing to write.
  EXPECT_EQ(session->Allocate(entry, &extents).status().code(),
            StatusCode::kAlreadyExists);
}

// A staging buffer is one run of the staging file: enough pages free in pieces are not enough.
TEST_F(ShmSessionTest, StagingBuffersAreOneRunAndAreReleasedLikeLeases) {
  ShmSession::Limits limits;
  limits.staging_bytes = 8 * 4096;
  limits.max_reservations = 3;
  std::unique_ptr<ShmSession> session = NewSession(limits);
  Result<protocol::ShmReservation> a = session->Reserve(3 * 4096);
  Result<protocol::ShmReservation> b = session->Reserve(2 * 4096);
  Result<protocol::ShmReservation> c = session->Reserve(3 * 4096);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(session->Reserve(1).status().code(), StatusCode::kResourceExhausted);  // The limit.
  ASSERT_TRUE(session->Release(a->id).ok());
  ASSERT_TRUE(session->Release(c->id).ok());
  // Six pages free, in two runs of three: four in one run are not there.
  EXPECT_EQ(session->Reserve(4 * 4096).status().code(), StatusCode::kResourceExhausted);
  Result<protocol::ShmReservation> d = session->Reserve(3 * 4096 - 10);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(session->reservation_count(), 2u);

  // A put from the buffer is one copy into G2; the buffer stays the client's.
  std::byte* staging = MapStaging(*session);
  std::vector<std::byte> v = Value(9, 3 * 4096 - 10);
  std::memcpy(staging + d->offset, v.data(), v.size());
  std::vector<protocol::ShmPutItem> items = {
      {{Key(9), std::nullopt, v.size(), 0, std::nullopt}, d->offset},
      {{Key(10), std::nullopt, 4096, 0, std::nullopt}, b->offset + 4096 + 1}};  // Runs past b.
  std::vector<Status> put = session->Put(items);
  ASSERT_EQ(put.size(), 2u);
  EXPECT_TRUE(put[0].ok()) << put[0].ToString();
  EXPECT_EQ(put[1].code(), StatusCode::kInvalidArgument);
  std::memset(staging + d->offset, 0, v.size());
  std::vector<std::byte> out(v.size());
  ASSERT_TRUE(store_->Read(tenant_, Key(9), out).ok());
  EXPECT_EQ(out, v);
  EXPECT_EQ(store_->Get(tenant_, Key(10)).status().code(), StatusCode::kNotFound);
  munmap(staging, session->staging_size());
  EXPECT_EQ(session->Commit(d->id).code(), StatusCode::kNotFound);  // Not an allocation.
  EXPECT_TRUE(session->Release(d->id).ok());
  EXPECT_EQ(session->Release(d->id).code(), StatusCode::kNotFound);
}

TEST_F(ShmSessionTest, AbortAndUnknownIds) {
  std::unique_ptr<ShmSession> session = NewSession({.max_leases = 4, .max_allocations = 1});
  const uint64_t before = Used();
  std::vector<ShmExtent> extents;
  Result<uint64_t> id = session->Allocate({Key(3), std::nullopt, kBlock, 0, {}}, &extents);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(session->Allocate({Key(4), std::nullopt, kBlock, 0, {}}, &extents)
                .status()
                .code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(session->Commit(*id + 1000).code(), StatusCode::kNotFound);
  EXPECT_EQ(session->Abort(*id + 1000).code(), StatusCode::kNotFound);
  EXPECT_TRUE(session->Abort(*id).ok());
  EXPECT_EQ(session->Commit(*id).code(), StatusCode::kNotFound);
  EXPECT_EQ(Used(), before);
  EXPECT_EQ(store_->Get(tenant_, Key(3)).status().code(), StatusCode::kNotFound);
}

TEST_F(ShmSessionTest, DestroyingTheSessionLeaksNothing) {
  const uint64_t before = Used();
  ASSERT_TRUE(store_->Put(tenant_, Key(1), Value(1)).ok());
  {
    std::unique_ptr<ShmSession> session = NewSession({});
    std::vector<ShmExtent> extents;
    ASSERT_TRUE(session->AddLease(GetHandle(Key(1)), &extents).ok());
    ASSERT_TRUE(store_->Delete(tenant_, Key(1)).ok());
    for (uint8_t k = 20; k < 24; ++k) {
      ASSERT_TRUE(session->Allocate({Key(k), std::nullopt, kBlock, 0, {}}, &extents).ok());
    }
    EXPECT_GT(Used(), before);
  }
  EXPECT_EQ(Used(), before);
  // The whole arena is free again: every block fits.
  for (uint8_t k = 30; k < 46; ++k) EXPECT_TRUE(store_->Put(tenant_, Key(k), Value(k)).ok());
}

TEST_F(ShmSessionTest, SpansOutsideTheArenaAreNotExtents) {
  std::unique_ptr<ShmSession> session = NewSession({});
  std::vector<std::byte> heap(100);
  std::vector<std::span<const std::byte>> spans = {std::span<const std::byte>(heap)};
  std::vector<ShmExtent> extents;
  EXPECT_FALSE(session->ToExtents(spans, &extents));
  spans = {std::span<const std::byte>(arena_.base + arena_.size - 10, 20)};
  EXPECT_FALSE(session->ToExtents(spans, &extents));
  spans = {std::span<const std::byte>(arena_.base + 4096, 10)};
  ASSERT_TRUE(session->ToExtents(spans, &extents));
  EXPECT_EQ(extents, (std::vector<ShmExtent>{{4096, 10}}));
  // A handle that owns its bytes (served from below G2) is not leased through the arena.
  EXPECT_EQ(session->AddLease(BlockHandle(std::vector<std::byte>(10)), &extents).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvtier::server
