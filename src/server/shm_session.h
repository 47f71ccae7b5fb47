// ShmSession: what one connection of the shared-memory fast path holds in the store — its read
// leases (id -> BlockHandle), its uncommitted allocations (id -> BlockAllocation) and the
// buffers it reserved in its staging file — and the translation of their spans into offsets a
// client can use.
//
// Isolation: the client maps its tenant's G2 region read-only (Store::shared_arena), so it
// sees its own tenant's blocks and nothing else, and can change none of them. It writes new
// blocks into a staging file of its own connection instead; a commit copies the bytes from
// there into the block's G2 space. So a committed block cannot change: the only writable
// mapping of it is this process's.
//
// Nothing leaks when a client dies: the session belongs to its connection's handler, and
// destroying it (the connection closed, for whatever reason: a clean close, a crash, kill -9)
// releases every lease and aborts every allocation still held.
//
// Ids are chosen here, never reused within a connection, and meaningful only on it: an id
// the client did not get from this session is NotFound, nothing else.
//
// Not thread-safe: a connection's handler runs on one event-loop thread. The Store must
// outlive the session.

#ifndef KVTIER_SERVER_SHM_SESSION_H_
#define KVTIER_SERVER_SHM_SESSION_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/common/arena.h"
#include "src/common/extent_allocator.h"
#include "src/protocol/shm_messages.h"

namespace kvtier::server {

class ShmSession {
 public:
  struct Limits {
    // Most read leases held at once. Each pins a block (it cannot be evicted or reused while
    // leased), so this bounds how much of G2 one client can hold hostage through leases.
    uint32_t max_leases = 4096;
    // Most allocations reserved and not yet committed or aborted at once.
    uint32_t max_allocations = 1024;
    // Size of the staging file, which bounds the bytes of uncommitted allocations. Sparse:
    // it holds memory for at most what the allocations have needed at once. Raised to the
    // largest block.
    uint64_t staging_bytes = uint64_t{1} << 30;
    // Most buffers reserved in the staging file at once.
    uint32_t max_reservations = 256;
  };

  // A session for `tenant`, whose G2 region `arena` is. `page_bytes` is the staging file's
  // allocation unit. REQUIRES: arena.base != nullptr (the store has a payload arena).
  static Result<std::unique_ptr<ShmSession>> Create(Store* store, TenantId tenant,
                                                    const SharedArena& arena, uint32_t page_bytes,
                                                    const Limits& limits);
  ~ShmSession();
  ShmSession(const ShmSession&) = delete;
  ShmSession& operator=(const ShmSession&) = delete;

  const Limits& limits() const { return limits_; }
  TenantId tenant() const { return tenant_; }
  const SharedArena& arena() const { return arena_; }
  // The staging file's read-write descriptor (owned by the session) and size.
  int staging_fd() const { return staging_->fd(0); }
  uint64_t staging_size() const { return staging_->region_bytes(); }
  size_t lease_count() const { return leases_.size(); }
  size_t allocation_count() const { return allocations_.size(); }
  size_t reservation_count() const { return reservations_.size(); }

  // Converts spans to offsets in the arena. False when any span is not inside it (a block
  // served from below G2 lives in a heap buffer of its handle).
  bool ToExtents(std::span<const std::span<const std::byte>> spans,
                 std::vector<protocol::ShmExtent>* extents) const;

  // Keeps `handle` (a lease on an arena block) until Release. Returns its id and fills
  // `extents`. ResourceExhausted when max_leases are held; FailedPrecondition when the block
  // is not in the arena. On error the handle is dropped (the store's lease ends).
  Result<uint64_t> AddLease(BlockHandle handle, std::vector<protocol::ShmExtent>* extents);
  // Ends a lease or a reservation. NotFound for an id this session does not hold.
  Status Release(uint64_t id);

  // Reserves G2 space for `entry` (Store::Allocate) and staging space of the same size, and
  // keeps both, with the put options, until Commit or Abort. Returns its id and fills
  // `extents` (in the staging file). ResourceExhausted when max_allocations are held or the
  // staging file is full; the store's errors otherwise (AlreadyExists: the key is present).
  Result<uint64_t> Allocate(const protocol::PutEntry& entry,
                            std::vector<protocol::ShmExtent>* extents);
  // Copies the staged bytes into the allocation, publishes it (Store::Commit) and forgets it,
  // whatever the outcome.
  // NotFound for an id this session does not hold.
  Status Commit(uint64_t allocation);
  // Gives an allocation's space back. NotFound for an id this session does not hold.
  Status Abort(uint64_t allocation);

  // Reserves `bytes` of the staging file, in one run of pages, for the client to manage until
  // Release: the buffers it writes blocks into before an SHM_PUT. InvalidArgument for 0 bytes;
  // ResourceExhausted past max_reservations or when no free run of the staging file is that
  // large.
  Result<protocol::ShmReservation> Reserve(uint64_t bytes);
  // Stores each item's `entry.size` bytes at `offset` in the staging file (Store::PutMany: one
  // copy into G2), one status per item, in order. An item whose bytes are not inside one
  // reserved buffer is InvalidArgument and stores nothing; the others are stored as PUT_MANY
  // stores them (OK when the key is present).
  std::vector<Status> Put(std::span<const protocol::ShmPutItem> items);

 private:
  struct PendingPut {
    BlockAllocation allocation;
    PutOptions options;
    std::vector<Extent> staged;  // Pages of the staging file.
  };

  ShmSession(Store* store, TenantId tenant, const SharedArena& arena, uint32_t page_bytes,
             const Limits& limits, std::unique_ptr<Arena> staging);
  void Unstage(const std::vector<Extent>& staged);
  // Whether bytes [offset, offset + size) of the staging file lie inside one reserved buffer.
  bool InReservation(uint64_t offset, uint64_t size) const;

  Store* const store_;
  const TenantId tenant_;
  const SharedArena arena_;
  const uint32_t page_bytes_;
  const Limits limits_;
  const std::unique_ptr<Arena> staging_;
  ExtentAllocator staging_pages_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, BlockHandle> leases_;
  std::unordered_map<uint64_t, PendingPut> allocations_;
  struct Reserved {
    uint64_t id;
    Extent pages;
  };
  // Reserved buffers by their first byte in the staging file.
  std::map<uint64_t, Reserved> reservations_;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_SHM_SESSION_H_
