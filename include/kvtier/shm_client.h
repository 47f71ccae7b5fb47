// ShmClient: the shared-memory fast path to a kvtierd on the same host (docs/protocol.md,
// "Shared-memory fast path"). It connects to the daemon's Unix socket, receives its tenant's
// G2 region (read-only) and a staging file of its own (read-write) and maps both, so that
// block bytes never travel through the socket:
//   - Get returns views straight into the mapping, under read leases: the daemon keeps those
//     bytes valid and unchanged (even if the block is deleted or evicted meanwhile) until the
//     leases are released. Read copies a block out and releases at once.
//   - Put reserves space in G2 and in the staging file, copies the value into the staging
//     file, then commits it (the daemon copies it into G2); Allocate and Commit are its two
//     halves, for writers that produce the bytes in place.
//   - StagingBuffer reserves a buffer of the staging file for the client to keep and write
//     blocks into (from a device copy, say); PutMany of values inside it is one request and
//     one copy, the daemon's into G2 (Mooncake Store's registered buffers do the same).
// Only request/reply metadata (keys, lease ids, offsets) goes through the socket.
//
// Every offset and length the daemon sends is checked against the mapping before it is used.
// When the client process dies, the daemon releases its leases and aborts its allocations:
// nothing leaks.
//
// Restarts and upgrades: when kvtierd closes the connection (a restart, a --take-over
// upgrade, a crash), the next call connects again (for up to retry_timeout_ms) and is sent
// again on the new connection: Get, Read, Put, PutMany, Allocate and Flush. What belonged to
// the old connection ends with it: its leases (the new kvtierd may reuse their memory), so a
// copy out of them (ShmBlocks::CopyTo, Read) fails with Unavailable instead of returning
// bytes that may be another block's, and ShmBlocks::Valid() says whether views read so far
// still held the block's bytes; and its allocations, whose Commit fails with Aborted.
//
// Isolation: the region holds this tenant's blocks and no other's, and cannot be written
// through; a committed block cannot change (docs/security.md).
//
// Thread safety: every ShmClient method may be called from any thread; requests on one client
// are serialised (one round trip at a time); use one client per thread for parallelism.
// ShmBlocks is not thread-safe itself. Lifetime: ShmBlocks keeps the mapping alive, so its
// views stay readable even after the ShmClient is destroyed (its leases then end with the
// connection).

#ifndef KVTIER_SHM_CLIENT_H_
#define KVTIER_SHM_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "kvtier/store.h"

namespace kvtier {

struct ShmClientOptions {
  // kvtierd's Unix socket: "unix:/path" or "/path".
  std::string socket_path;
  // The tenant to act for and its token; both empty: the daemon's anonymous tenant.
  std::string tenant;
  std::string token;
  // Shown in the daemon's logs.
  std::string client_name = "kvtier-shm";
  // Map the region's pages in one call (MADV_POPULATE_READ) the first time a lease reaches
  // each 2 MiB of it, so that reads do not pay a page fault per page.
  bool populate = true;
  // Before blocking for a reply, poll the socket for it this long (microseconds): a daemon on
  // the same host answers within microseconds, while waking a blocked thread takes tens of
  // them (a small GET's round trip: 46 us blocking, 12 us polling, in bench/shm_bench.sh).
  // Costs the waiting thread's CPU for up to that long per request; 0 turns polling off.
  uint32_t spin_us = 50;
  // How long a call waits for kvtierd to come back when its connection was closed (a restart
  // or an upgrade) before it fails with Unavailable; 0 = never reconnect.
  uint32_t retry_timeout_ms = 10000;
};

namespace shm_internal {
class Connection;
}

// The blocks of one ShmClient::Get, one entry per key, in order. Arena hits are views into the
// shared mapping under read leases; a block the daemon served from below G2 is held in memory
// this object owns. Move-only. The leases end when this object is destroyed or Release() is
// called: one SHM_RELEASE for all of them is sent at once, without waiting for its reply (read
// with the client's next request, or by ShmClient::Flush); after that its views must no longer
// be read.
class ShmBlocks {
 public:
  ShmBlocks() = default;
  ShmBlocks(ShmBlocks&&) noexcept;
  ShmBlocks& operator=(ShmBlocks&&) noexcept;
  ShmBlocks(const ShmBlocks&) = delete;
  ShmBlocks& operator=(const ShmBlocks&) = delete;
  ~ShmBlocks();

  size_t size() const { return blocks_.size(); }
  // The i-th key's outcome: OK, NotFound for a miss, or another error.
  const Status& status(size_t i) const { return blocks_[i].status; }
  // The i-th block's size in bytes. REQUIRES: status(i).ok().
  size_t block_size(size_t i) const { return blocks_[i].size; }
  // The i-th block's bytes as one or more pieces in order (usually one).
  // REQUIRES: status(i).ok(). Valid until Release() or destruction.
  const std::vector<std::span<const std::byte>>& pieces(size_t i) const {
    return blocks_[i].pieces;
  }
  // Copies the i-th block into `out` and returns its size. OutOfRange (nothing copied) when
  // `out` is too small; the block's status when it is not OK; Unavailable when kvtierd
  // closed the connection holding the lease before the copy was done (what `out` got may not
  // be the block's bytes).
  Result<size_t> CopyTo(size_t i, std::span<std::byte> out) const;
  // Whether the leases still hold: true means every view read before this call showed the
  // blocks' own bytes. False once kvtierd closed the connection that holds them (a restart
  // or an upgrade), which frees their memory for reuse: read the blocks again.
  bool Valid() const;
  // Ends every lease now. The views become invalid.
  void Release();

 private:
  friend class ShmClient;
  struct Block {
    Status status;
    uint64_t lease = 0;  // 0: not leased (a miss, an error, or an inline block).
    size_t size = 0;
    std::vector<std::span<const std::byte>> pieces;
    std::vector<std::byte> owned;  // An inline block's bytes.
  };
  std::shared_ptr<shm_internal::Connection> conn_;
  std::vector<Block> blocks_;
};

// Space for one block in the shared arena, reserved by ShmClient::Allocate, to be filled in
// place (e.g. straight from a device copy) and published by ShmClient::Commit. No reader sees
// it before the commit. Destroying it, or Abort(), gives the space back (an SHM_ABORT is sent
// without waiting; its reply is read with the client's next request or Flush). Move-only; not
// thread-safe itself.
class ShmAllocation {
 public:
  ShmAllocation() = default;
  ShmAllocation(ShmAllocation&&) noexcept;
  ShmAllocation& operator=(ShmAllocation&&) noexcept;
  ShmAllocation(const ShmAllocation&) = delete;
  ShmAllocation& operator=(const ShmAllocation&) = delete;
  ~ShmAllocation();

  bool valid() const { return id_ != 0; }
  size_t size() const { return size_; }
  // Where to write the block's bytes, in order; their sizes add up to size(). Valid until
  // Commit or Abort.
  const std::vector<std::span<std::byte>>& pieces() const { return pieces_; }
  void Abort();

 private:
  friend class ShmClient;
  std::shared_ptr<shm_internal::Connection> conn_;
  uint64_t id_ = 0;
  size_t size_ = 0;
  std::vector<std::span<std::byte>> pieces_;
};

// A buffer of this client's staging file, reserved by ShmClient::StagingBuffer: memory the
// client keeps and writes blocks into. ShmClient::PutMany of values that lie inside it sends
// their offsets, not their bytes, and kvtierd copies them straight into G2: no copy by the
// client. A block is what the buffer held when kvtierd copied it, during PutMany; the buffer
// may be written again as soon as PutMany returns. Destroying it, or Release(), gives the room
// back (an SHM_RELEASE is sent without waiting); its memory must not be used after that.
// Move-only; not thread-safe itself.
class ShmBuffer {
 public:
  ShmBuffer() = default;
  ShmBuffer(ShmBuffer&&) noexcept;
  ShmBuffer& operator=(ShmBuffer&&) noexcept;
  ShmBuffer(const ShmBuffer&) = delete;
  ShmBuffer& operator=(const ShmBuffer&) = delete;
  ~ShmBuffer();

  std::span<std::byte> data() const { return data_; }
  // False once kvtierd closed the connection that reserved it (a restart or an upgrade): the
  // memory stays mapped, and PutMany copies values in it as it copies any other memory.
  bool Valid() const;
  void Release();

 private:
  friend class ShmClient;
  std::shared_ptr<shm_internal::Connection> conn_;
  uint64_t id_ = 0;
  std::span<std::byte> data_;
};

class ShmClient {
 public:
  // Connects, says HELLO asking for SHARED_MEMORY, attaches and maps the tenant's region.
  // Unavailable when the daemon cannot be reached; Unauthenticated for a wrong tenant or
  // token; FailedPrecondition when the daemon does not grant shared memory (not a Unix socket,
  // or a store without a payload arena).
  static Result<std::unique_ptr<ShmClient>> Connect(const ShmClientOptions& options);

  ~ShmClient();
  ShmClient(const ShmClient&) = delete;
  ShmClient& operator=(const ShmClient&) = delete;

  // Size of the mapped G2 region, and limits the daemon set for this connection.
  uint64_t arena_size() const;
  uint32_t max_leases() const;
  uint32_t max_allocations() const;
  // Size of the connection's staging file: the room for StagingBuffers and for the
  // allocations of Put and Allocate not yet committed.
  uint64_t staging_size() const;
  // The tenant the connection acts for.
  const std::string& tenant() const;

  // Leases the blocks of `keys` (at most the daemon's max_batch) and returns views of them.
  // The outer Result is an error when the request as a whole failed (connection lost,
  // malformed reply); per-key errors are in ShmBlocks::status (ResourceExhausted past
  // max_leases held).
  Result<ShmBlocks> Get(std::span<const BlockKey> keys);
  // Copies one block into `out`, releasing its lease at once; returns the block size.
  // NotFound for a miss; OutOfRange (nothing copied) when `out` is too small.
  Result<size_t> Read(const BlockKey& key, std::span<std::byte> out);
  // Read of each key into its buffer (`outs` has one per key), with one SHM_GET per up to
  // max_leases (and max_batch) keys; one result per key, in order. A batch whose leases
  // kvtierd dropped while it was copied (a restart or an upgrade) is read once more.
  std::vector<Result<size_t>> ReadMany(std::span<const BlockKey> keys,
                                       std::span<const std::span<std::byte>> outs);

  // Stores a block: reserves arena space, copies `value` into the mapping, commits. OK
  // without storing when the key is already present (blocks are immutable).
  Status Put(const BlockKey& key, std::span<const std::byte> value,
             const PutOptions& options = {});
  // One status per write, in order: one SHM_ALLOC and one SHM_COMMIT for the whole batch
  // (split at max_batch and max_allocations). A batch whose values all lie inside
  // StagingBuffers of the current connection is one SHM_PUT instead, without the copy.
  std::vector<Status> PutMany(std::span<const BlockWrite> writes);

  // Reserves a buffer of `bytes` in the staging file (staging_size(), shared with the
  // allocations of Put and Allocate). InvalidArgument for 0 bytes; ResourceExhausted when the
  // staging file has no free run that large, or past 256 buffers.
  Result<ShmBuffer> StagingBuffer(size_t bytes);

  // The two halves of Put, for writers that produce the bytes in place: reserves `size`
  // bytes for `key`. AlreadyExists when the key is present (nothing to write);
  // ResourceExhausted past max_allocations pending, or when nothing evictable makes room.
  Result<ShmAllocation> Allocate(const BlockKey& key, size_t size,
                                 const PutOptions& options = {});
  // Publishes a filled allocation (OK as well when a concurrent put of the key won).
  // InvalidArgument for an allocation that is not pending on this client.
  Status Commit(ShmAllocation allocation);

  // Waits until the daemon has applied every release and abort sent so far.
  Status Flush();

 private:
  ShmClient(const ShmClientOptions& options, std::shared_ptr<shm_internal::Connection> conn);
  std::shared_ptr<shm_internal::Connection> Current() const;
  // Runs `call` on the current connection and, when that connection was lost meanwhile, once
  // more on a new one.
  template <typename Call>
  auto WithReconnect(const Call& call) -> decltype(call(Current()));

  const ShmClientOptions options_;
  struct State;
  std::unique_ptr<State> state_;  // The connection, replaced by a reconnect.
};

}  // namespace kvtier

#endif  // KVTIER_SHM_CLIENT_H_
