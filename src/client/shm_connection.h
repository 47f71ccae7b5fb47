// shm_internal::Connection: ShmClient's blocking Unix-socket connection to kvtierd, which
// speaks the native protocol's SHM_* requests, and the mappings of the tenant's G2 region and
// the connection's staging file that they refer to (include/kvtier/shm_client.h).

#ifndef KVTIER_CLIENT_SHM_CONNECTION_H_
#define KVTIER_CLIENT_SHM_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "kvtier/shm_client.h"
#include "kvtier/status.h"
#include "src/common/mutex.h"
#include "src/protocol/messages.h"
#include "src/protocol/shm_messages.h"
#include "src/protocol/wire.h"

namespace kvtier::shm_internal {

// One connection and the arena mapping. Thread-safe: one request at a time under mu_.
class Connection {
 public:
  static Result<std::shared_ptr<Connection>> Open(const ShmClientOptions& options);
  ~Connection();

  // Sends one request and returns its reply body (whose leading status the caller decodes).
  Result<std::vector<std::byte>> Call(protocol::Opcode opcode, const std::string& body)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sends SHM_RELEASE or SHM_ABORT for `ids` without waiting for the reply (it is read later).
  void SendIds(protocol::Opcode opcode, std::span<const uint64_t> ids) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the replies of every SendIds so far.
  Status Flush() ABSL_LOCKS_EXCLUDED(mu_);
  // The connection failed here (a call saw it closed, or broke it off).
  bool Broken() ABSL_LOCKS_EXCLUDED(mu_);
  // kvtierd closed the connection (or it failed here): its leases and allocations are gone.
  // Never blocks; may be called while another thread uses the connection.
  bool Lost() const;

  // The tenant's G2 region (read-only) and the connection's staging file (read-write).
  const std::byte* base() const { return base_; }
  uint64_t arena_size() const { return attach_.arena_size; }
  std::byte* staging() const { return staging_; }
  // Maps the pages of a leased piece in one call (ShmClientOptions::populate).
  void Populate(std::span<const std::byte> piece);
  uint64_t staging_size() const { return attach_.staging_size; }
  const protocol::ShmAttachReply& attach() const { return attach_; }
  const protocol::HelloResponse& hello() const { return hello_; }

  // The buffers reserved in the staging file (SHM_RESERVE), by offset. Any thread.
  void AddReserved(uint64_t offset, uint64_t size) ABSL_LOCKS_EXCLUDED(reserved_mu_);
  void RemoveReserved(uint64_t offset) ABSL_LOCKS_EXCLUDED(reserved_mu_);
  // Where `bytes` start in the staging file, when they lie inside one reserved buffer.
  std::optional<uint64_t> ReservedOffset(std::span<const std::byte> bytes) const
      ABSL_LOCKS_EXCLUDED(reserved_mu_);

 private:
  Connection(int fd, uint32_t spin_us) : fd_(fd), spin_(std::chrono::microseconds(spin_us)) {}
  Status Handshake(const ShmClientOptions& options) ABSL_LOCKS_EXCLUDED(mu_);
  Status WriteFrame(protocol::Opcode opcode, uint64_t id, const std::string& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads n bytes; when `fds` is set, also accepts the descriptors passed with them (any
  // other descriptor received is closed).
  Status ReadExact(std::byte* out, size_t n, std::vector<int>* fds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one reply frame.
  Status ReadFrame(protocol::FrameHeader* header, std::vector<std::byte>* body, std::vector<int>* fds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads replies until the one for `id`; release replies met on the way are consumed.
  Result<std::vector<std::byte>> AwaitReply(uint64_t id, std::vector<int>* fds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Fail(Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks the SHM_ATTACH reply and maps the two files whose descriptors came with it.
  Status Attach(const Result<std::vector<std::byte>>& reply, const std::vector<int>& fds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kMaxFds = 2;

  const int fd_;
  const std::chrono::microseconds spin_;  // ShmClientOptions::spin_us.
  std::byte* base_ = nullptr;
  std::byte* staging_ = nullptr;
  bool populate_ = false;
  static constexpr uint64_t kPopulateChunk = 2 << 20;
  // A bit per chunk of the region: mapped already (Populate).
  std::unique_ptr<std::atomic<uint64_t>[]> populated_;
  protocol::HelloResponse hello_;
  protocol::ShmAttachReply attach_;
  Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Ids of SendIds requests whose replies are still to be read.
  std::unordered_set<uint64_t> unread_releases_ ABSL_GUARDED_BY(mu_);
  Status broken_ ABSL_GUARDED_BY(mu_);  // Not OK once the connection failed.
  // Bytes received and not yet consumed: read_buf_[read_begin_, read_end_).
  static constexpr size_t kReadBufferBytes = 64 << 10;
  std::byte read_buf_[kReadBufferBytes] ABSL_GUARDED_BY(mu_);
  size_t read_begin_ ABSL_GUARDED_BY(mu_) = 0;
  size_t read_end_ ABSL_GUARDED_BY(mu_) = 0;
  mutable Mutex reserved_mu_;  // Not mu_, which a request holds for its round trip.
  std::map<uint64_t, uint64_t> reserved_ ABSL_GUARDED_BY(reserved_mu_);  // Offset -> size.
};

}  // namespace kvtier::shm_internal

#endif  // KVTIER_CLIENT_SHM_CONNECTION_H_
