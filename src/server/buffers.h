// Per-connection byte buffers of kvtierd: what has been read and not yet handled, and what is
// waiting to be written. Not thread-safe: a connection belongs to one event-loop thread.

#ifndef KVTIER_SERVER_BUFFERS_H_
#define KVTIER_SERVER_BUFFERS_H_

#include <array>
#include <cstddef>
#include <deque>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "kvtier/store.h"

struct iovec;

namespace kvtier::server {

class TlsSession;

// Bytes read from a socket and not yet consumed. Grows to hold one whole request (the handler
// says how big through Reserve), so a large put is received straight into the buffer it is
// stored from, without being copied between buffers on the way.
class InputBuffer {
 public:
  // Capacity kept between requests; a buffer grown past it for a large request is released
  // once that request is consumed, so idle connections hold little memory.
  static constexpr size_t kRetainedCapacity = 4 << 20;

  std::span<std::byte> data() { return {buf_.get() + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  // Makes room for at least `n` more bytes after the data.
  void Reserve(size_t n);
  // Where the next read goes; `writable_size()` bytes fit.
  std::byte* write_ptr() { return buf_.get() + end_; }
  size_t writable_size() const { return capacity_ - end_; }
  void Commit(size_t n) { end_ += n; }
  void Consume(size_t n);

 private:
  std::unique_ptr<std::byte[]> buf_;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

// Replies waiting to be written: owned bytes and leased block extents, sent with scatter/gather
// I/O (sendmsg with an iovec array) so that block bytes go from the arena to the socket without
// being copied. A lease is released as soon as its bytes are written.
class OutputQueue {
 public:
  void Append(std::string_view bytes);
  // Queues the bytes of `handle` (which stays leased until they are written).
  void AppendLease(BlockHandle handle);
  // Queues `length` bytes of `handle` from `offset` on. REQUIRES: within the handle's bytes.
  void AppendLease(BlockHandle handle, size_t offset, size_t length);
  // Queues `bytes` with descriptors `fds` (at most kMaxPassedFds) attached to their first byte
  // (SCM_RIGHTS): the peer receives its own descriptors for the same files with them. Unix
  // sockets only (WriteTo(int)); the fds stay owned by the caller and must stay open until the
  // bytes are written.
  static constexpr size_t kMaxPassedFds = 2;
  void AppendWithFds(std::string_view bytes, std::initializer_list<int> fds);
  size_t pending_bytes() const { return pending_; }
  bool empty() const { return pending_ == 0; }
  // Writes as much as the socket takes now. Returns the bytes written (0 when it would block);
  // Unavailable when the peer is gone.
  Result<size_t> WriteTo(int fd, size_t max_bytes = SIZE_MAX);
  // The same through a TLS session: small pieces are gathered into records of up to 16 KiB
  // (one copy, which TLS makes anyway when it encrypts); large ones are written in place.
  Result<size_t> WriteTo(TlsSession* tls);
  // Drops everything queued (releasing leases).
  void Clear();

 private:
  // Fills iov with the unsent bytes, in order; returns how many entries it used.
  size_t Gather(iovec* iov, size_t max_iov) const;
  // Marks `written` bytes sent, releasing pieces (and leases) that are done.
  void Advance(size_t written);

  struct Piece {
    std::string bytes;
    BlockHandle lease;
    bool is_lease = false;
    size_t start = 0;  // A lease's bytes start this far into its block.
    // Sent as SCM_RIGHTS with the piece's first byte.
    std::array<int, kMaxPassedFds> pass_fds{};
    size_t pass_count = 0;
    size_t size = 0;
    size_t sent = 0;
  };
  std::deque<Piece> pieces_;
  size_t pending_ = 0;
  std::string tls_record_;  // Gathered small pieces for WriteTo(TlsSession*).
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_BUFFERS_H_
