// ShmSession: what one connection of the shared-memory fast path holds in the store — its read
// leases (id -> BlockHandle) and its uncommitted allocations (id -> BlockAllocation) — and the
// translation of their arena spans into offsets a client can use.
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
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/store.h"
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
  };

  // REQUIRES: arena.base != nullptr (the store has a payload arena).
  ShmSession(Store* store, const SharedArena& arena, const Limits& limits);
  ~ShmSession();
  ShmSession(const ShmSession&) = delete;
  ShmSession& operator=(const ShmSession&) = delete;

  const Limits& limits() const { return limits_; }
  size_t lease_count() const { return leases_.size(); }
  size_t allocation_count() const { return allocations_.size(); }

  // Converts spans to offsets in the arena. False when any span is not inside it (a block
  // served from below G2 lives in a heap buffer of its handle).
  bool ToExtents(std::span<const std::span<const std::byte>> spans,
                 std::vector<protocol::ShmExtent>* extents) const;

  // Keeps `handle` (a lease on an arena block) until Release. Returns its id and fills
  // `extents`. ResourceExhausted when max_leases are held; FailedPrecondition when the block
  // is not in the arena. On error the handle is dropped (the store's lease ends).
  Result<uint64_t> AddLease(BlockHandle handle, std::vector<protocol::ShmExtent>* extents);
  // Ends a lease. NotFound for an id this session does not hold.
  Status Release(uint64_t lease);

  // Reserves arena space for `entry` (Store::Allocate) and keeps it, with its put options,
  // until Commit or Abort. Returns its id and fills `extents`. ResourceExhausted when
  // max_allocations are held; the store's errors otherwise (AlreadyExists: the key is present).
  Result<uint64_t> Allocate(TenantId tenant, const protocol::PutEntry& entry,
                            std::vector<protocol::ShmExtent>* extents);
  // Publishes an allocation (Store::Commit) and forgets it, whatever the outcome.
  // NotFound for an id this session does not hold.
  Status Commit(uint64_t allocation);
  // Gives an allocation's space back. NotFound for an id this session does not hold.
  Status Abort(uint64_t allocation);

 private:
  struct PendingPut {
    BlockAllocation allocation;
    PutOptions options;
  };

  Store* const store_;
  const SharedArena arena_;
  const Limits limits_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, BlockHandle> leases_;
  std::unordered_map<uint64_t, PendingPut> allocations_;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_SHM_SESSION_H_
