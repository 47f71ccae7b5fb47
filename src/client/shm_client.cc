// ShmClient (include/kvtier/shm_client.h): a blocking Unix-socket connection that speaks the
// native protocol's SHM_* requests, plus the arena mapping they refer to.

#include "kvtier/shm_client.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_set>
#include <utility>

#include "src/client/client_connection.h"
#include "src/common/copy.h"
#include "src/common/mutex.h"
#include "src/protocol/messages.h"
#include "src/protocol/shm_messages.h"
#include "src/protocol/wire.h"

namespace kvtier {
namespace shm_internal {

using protocol::FrameHeader;
using protocol::Opcode;

namespace {

std::string Errno() { return std::strerror(errno); }

// MADV_POPULATE_READ, which older C libraries do not name.
constexpr int kMadvPopulateRead = 22;

}  // namespace

// One connection and the arena mapping. Thread-safe: one request at a time under mu_.
class Connection {
 public:
  static Result<std::shared_ptr<Connection>> Open(const ShmClientOptions& options);
  ~Connection();

  // Sends one request and returns its reply body (whose leading status the caller decodes).
  Result<std::vector<std::byte>> Call(Opcode opcode, const std::string& body)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sends SHM_RELEASE or SHM_ABORT for `ids` without waiting for the reply (it is read later).
  void SendIds(Opcode opcode, std::span<const uint64_t> ids) ABSL_LOCKS_EXCLUDED(mu_);
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

 private:
  Connection(int fd, uint32_t spin_us) : fd_(fd), spin_(std::chrono::microseconds(spin_us)) {}
  Status Handshake(const ShmClientOptions& options) ABSL_LOCKS_EXCLUDED(mu_);
  Status WriteFrame(Opcode opcode, uint64_t id, const std::string& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads n bytes; when `fds` is set, also accepts the descriptors passed with them (any
  // other descriptor received is closed).
  Status ReadExact(std::byte* out, size_t n, std::vector<int>* fds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one reply frame.
  Status ReadFrame(FrameHeader* header, std::vector<std::byte>* body, std::vector<int>* fds)
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
};

namespace {

// Unread SendIds replies kept before SendIds drains them (so a client that only releases
// never lets the daemon's replies pile up until it stops reading our requests).
constexpr size_t kMaxUnreadReleases = 64;

}  // namespace

Result<std::shared_ptr<Connection>> Connection::Open(const ShmClientOptions& options) {
  std::string path = options.socket_path;
  if (path.starts_with("unix:")) path = path.substr(5);
  if (path.empty()) return Status::InvalidArgument("ShmClientOptions::socket_path is empty");
  Result<int> fd = client::ConnectUnix(path);
  if (!fd.ok()) return fd.status();
  std::shared_ptr<Connection> conn(new Connection(*fd, options.spin_us));
  KVTIER_RETURN_IF_ERROR(conn->Handshake(options));
  return conn;
}

Connection::~Connection() {
  if (base_ != nullptr) munmap(base_, attach_.arena_size);
  if (staging_ != nullptr) munmap(staging_, attach_.staging_size);
  close(fd_);  // The daemon ends every lease and allocation of the connection.
}

Status Connection::Handshake(const ShmClientOptions& options) {
  MutexLock lock(&mu_);
  protocol::HelloRequest hello;
  hello.features = protocol::kFeatureSharedMemory | protocol::kFeatureSessions;
  hello.tenant = options.tenant;
  hello.token = options.token;
  hello.client_name = options.client_name;
  std::string body;
  protocol::EncodeHello(hello, &body);
  uint64_t id = next_id_++;
  KVTIER_RETURN_IF_ERROR(WriteFrame(Opcode::kHello, id, body));
  Result<std::vector<std::byte>> reply = AwaitReply(id, nullptr);
  if (!reply.ok()) return reply.status();
  Result<protocol::HelloResponse> resp = protocol::DecodeHelloResponse(*reply);
  if (!resp.ok()) return resp.status();
  hello_ = *resp;
  if ((hello_.features & protocol::kFeatureSharedMemory) == 0) {
    return Status::FailedPrecondition(
        "kvtierd did not grant shared memory (offered on its Unix socket, with a G2 arena)");
  }

  id = next_id_++;
  KVTIER_RETURN_IF_ERROR(WriteFrame(Opcode::kShmAttach, id, ""));
  std::vector<int> fds;
  reply = AwaitReply(id, &fds);
  populate_ = options.populate;
  Status attached = Attach(reply, fds);
  for (int fd : fds) close(fd);  // The mappings keep the files.
  return attached;
}

Status Connection::Attach(const Result<std::vector<std::byte>>& reply,
                          const std::vector<int>& fds) {
  Result<protocol::ShmAttachReply> attach =
      reply.ok() ? protocol::DecodeShmAttachReply(*reply)
                 : Result<protocol::ShmAttachReply>(reply.status());
  if (!attach.ok()) return attach.status();
  if (fds.size() != 2) {
    return Status::Internal("kvtierd sent " + std::to_string(fds.size()) +
                            " descriptors with SHM_ATTACH, not its G2 region and a staging file");
  }
  attach_ = *attach;  // The sizes the destructor unmaps.
  populated_.reset(new std::atomic<uint64_t>[(attach->arena_size / kPopulateChunk + 64) / 64]());
  // The region is mapped read-only (its descriptor allows nothing else); the staging file is
  // this connection's own, for writing new blocks.
  struct Part {
    int fd;
    uint64_t size;
    int prot;
    std::byte** base;
    const char* what;
  };
  const Part parts[] = {{fds[0], attach->arena_size, PROT_READ, &base_, "G2 region"},
                        {fds[1], attach->staging_size, PROT_READ | PROT_WRITE, &staging_,
                         "staging file"}};
  for (const Part& part : parts) {
    struct stat st{};
    if (fstat(part.fd, &st) != 0 || part.size == 0 ||
        static_cast<uint64_t>(st.st_size) < part.size || part.size > uint64_t{SIZE_MAX}) {
      return Status::Internal(std::string("the ") + part.what + " descriptor kvtierd sent is smaller than the " +
                              std::to_string(part.size) + " bytes it announced");
    }
    // Never MAP_POPULATE: the files are sparse, and faulting in a hole takes memory.
    void* p = mmap(nullptr, part.size, part.prot, MAP_SHARED, part.fd, 0);
    if (p == MAP_FAILED) {
      return Status::ResourceExhausted(std::string("cannot map the ") + part.what + ": " + Errno());
    }
    madvise(p, part.size, MADV_HUGEPAGE);  // A hint; fine to be refused.
    *part.base = static_cast<std::byte*>(p);
  }
  return Status::OK();
}

void Connection::Populate(std::span<const std::byte> piece) {
  if (!populate_ || piece.empty()) return;
  // Once per chunk of the region: the daemon's blocks reuse their pages, which then stay
  // mapped here (a page whose memory the daemon gives back simply faults in again).
  const uint64_t first = static_cast<uint64_t>(piece.data() - base_) / kPopulateChunk;
  const uint64_t last = static_cast<uint64_t>(piece.data() + piece.size() - 1 - base_) /
                        kPopulateChunk;
  for (uint64_t c = first; c <= last; ++c) {
    const uint64_t bit = uint64_t{1} << (c % 64);
    if (populated_[c / 64].fetch_or(bit, std::memory_order_relaxed) & bit) continue;
    const uint64_t end = std::min<uint64_t>((c + 1) * kPopulateChunk, attach_.arena_size);
    // A hint (Linux 5.14+); the first read faults the pages in otherwise.
    madvise(base_ + c * kPopulateChunk, end - c * kPopulateChunk, kMadvPopulateRead);
  }
}

bool Connection::Broken() {
  MutexLock lock(&mu_);
  return !broken_.ok();
}

bool Connection::Lost() const {
  pollfd p{fd_, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

Status Connection::Fail(Status s) {
  if (broken_.ok()) broken_ = s;
  shutdown(fd_, SHUT_RDWR);
  return s;
}

Status Connection::WriteFrame(Opcode opcode, uint64_t id, const std::string& body) {
  if (!broken_.ok()) return broken_;
  FrameHeader h;
  h.opcode = static_cast<uint8_t>(opcode);
  h.request_id = id;
  h.body_length = static_cast<uint32_t>(body.size());
  std::byte head[protocol::kHeaderSize];
  protocol::EncodeHeader(h, head);
  iovec iov[2] = {{head, sizeof(head)}, {const_cast<char*>(body.data()), body.size()}};
  size_t next = 0;
  while (next < 2) {
    msghdr msg{};
    msg.msg_iov = iov + next;
    msg.msg_iovlen = 2 - next;
    ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail(Status::Unavailable("write to kvtierd failed: " + Errno()));
    }
    auto left = static_cast<size_t>(n);
    while (next < 2 && left >= iov[next].iov_len) left -= iov[next++].iov_len;
    if (left > 0) {
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
    }
  }
  return Status::OK();
}

Status Connection::ReadExact(std::byte* out, size_t n, std::vector<int>* fds) {
  while (n > 0) {
    if (read_begin_ < read_end_) {
      size_t take = std::min(n, read_end_ - read_begin_);
      std::memcpy(out, read_buf_ + read_begin_, take);
      read_begin_ += take;
      out += take;
      n -= take;
      continue;
    }
    // Small reads go through the buffer, so that one recvmsg usually brings a whole reply (or
    // several); a large one goes straight to its destination.
    const bool direct = n >= kReadBufferBytes;
    iovec iov = direct ? iovec{out, n} : iovec{read_buf_, kReadBufferBytes};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r = -1;
    if (direct) {
      r = recvmsg(fd_, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
    } else {
      // A reply from a daemon on this host comes within microseconds; waking a blocked thread
      // takes tens of them. Poll for spin_ first.
      const auto until = std::chrono::steady_clock::now() + spin_;
      do {
        r = recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      } while (r < 0 && errno == EAGAIN && std::chrono::steady_clock::now() < until);
      if (r < 0 && errno == EAGAIN) r = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    }
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return Fail(Status::Unavailable(r == 0 ? "kvtierd closed the connection"
                                             : "read from kvtierd failed: " + Errno()));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fds != nullptr && fds->size() < kMaxFds) {
          fds->push_back(passed);
        } else {
          close(passed);  // Only the SHM_ATTACH reply brings any: two.
        }
      }
    }
    if (direct) {
      out += r;
      n -= static_cast<size_t>(r);
    } else {
      read_begin_ = 0;
      read_end_ = static_cast<size_t>(r);
    }
  }
  return Status::OK();
}

Status Connection::ReadFrame(FrameHeader* header, std::vector<std::byte>* body,
                             std::vector<int>* fds) {
  std::byte head[protocol::kHeaderSize];
  KVTIER_RETURN_IF_ERROR(ReadExact(head, sizeof(head), fds));
  uint32_t limit = hello_.max_frame_bytes == 0 ? (1u << 20) : hello_.max_frame_bytes + (1u << 20);
  protocol::DecodedFrame f = protocol::DecodeFrame(std::span(head, sizeof(head)), limit);
  if (f.state == protocol::DecodedFrame::State::kError) return Fail(f.error);
  *header = f.header;
  if (!(header->flags & protocol::kFlagResponse)) {
    return Fail(Status::InvalidArgument("kvtierd sent a frame that is not a response"));
  }
  body->resize(header->body_length);
  KVTIER_RETURN_IF_ERROR(ReadExact(body->data(), body->size(), nullptr));
  if (header->opcode == static_cast<uint8_t>(Opcode::kError)) {
    Status s = protocol::DecodeResponseStatus(*body);
    return Fail(s.ok() ? Status::Internal("kvtierd sent an ERROR frame with status OK") : s);
  }
  return Status::OK();
}

Result<std::vector<std::byte>> Connection::AwaitReply(uint64_t id, std::vector<int>* fds) {
  for (;;) {
    FrameHeader h;
    std::vector<std::byte> body;
    KVTIER_RETURN_IF_ERROR(ReadFrame(&h, &body, fds));
    if (h.request_id == id) return body;
    if (unread_releases_.erase(h.request_id) == 0) {
      return Fail(Status::Internal("kvtierd replied to unknown request id " +
                                   std::to_string(h.request_id)));
    }
  }
}

Result<std::vector<std::byte>> Connection::Call(Opcode opcode, const std::string& body) {
  MutexLock lock(&mu_);
  if (body.size() > hello_.max_frame_bytes) {
    return Status::InvalidArgument("request of " + std::to_string(body.size()) +
                                   " bytes exceeds the daemon's max_frame_bytes");
  }
  uint64_t id = next_id_++;
  KVTIER_RETURN_IF_ERROR(WriteFrame(opcode, id, body));
  return AwaitReply(id, nullptr);
}

void Connection::SendIds(Opcode opcode, std::span<const uint64_t> leases) {
  MutexLock lock(&mu_);
  if (!broken_.ok()) return;  // The daemon dropped the connection's leases with it.
  const size_t max_batch = std::max<size_t>(hello_.max_batch, 1);
  for (size_t start = 0; start < leases.size(); start += max_batch) {
    if (unread_releases_.size() >= kMaxUnreadReleases) {
      // The oldest replies are the ones ahead in the stream; any request id will do to drain
      // them all, so wait for the last one sent.
      uint64_t last = *std::max_element(unread_releases_.begin(), unread_releases_.end());
      unread_releases_.erase(last);
      if (!AwaitReply(last, nullptr).ok()) return;
    }
    std::string body;
    protocol::EncodeShmIds(leases.subspan(start, std::min(max_batch, leases.size() - start)),
                           &body);
    uint64_t id = next_id_++;
    if (!WriteFrame(opcode, id, body).ok()) return;
    unread_releases_.insert(id);
  }
}

Status Connection::Flush() {
  MutexLock lock(&mu_);
  while (!unread_releases_.empty()) {
    uint64_t last = *std::max_element(unread_releases_.begin(), unread_releases_.end());
    unread_releases_.erase(last);
    Result<std::vector<std::byte>> reply = AwaitReply(last, nullptr);
    if (!reply.ok()) return reply.status();
  }
  return broken_;
}

}  // namespace shm_internal

// ---- ShmBlocks ----

ShmBlocks::ShmBlocks(ShmBlocks&& other) noexcept { *this = std::move(other); }

ShmBlocks& ShmBlocks::operator=(ShmBlocks&& other) noexcept {
  if (this != &other) {
    Release();
    conn_ = std::move(other.conn_);
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
  }
  return *this;
}

ShmBlocks::~ShmBlocks() { Release(); }

void ShmBlocks::Release() {
  std::vector<uint64_t> leases;
  for (Block& b : blocks_) {
    if (b.lease != 0) leases.push_back(std::exchange(b.lease, 0));
    b.pieces.clear();
  }
  if (!leases.empty() && conn_ != nullptr) conn_->SendIds(protocol::Opcode::kShmRelease, leases);
}

Result<size_t> ShmBlocks::CopyTo(size_t i, std::span<std::byte> out) const {
  const Block& b = blocks_[i];
  if (!b.status.ok()) return b.status;
  if (out.size() < b.size) {
    return Status::OutOfRange("buffer of " + std::to_string(out.size()) + " bytes for a block of " +
                              std::to_string(b.size));
  }
  size_t offset = 0;
  for (std::span<const std::byte> piece : b.pieces) {
    CopyBytes(out.data() + offset, piece.data(), piece.size());
    offset += piece.size();
  }
  // kvtierd closes the connection before a successor can reuse the lease's memory: a
  // connection still open after the copy means the copy read the block.
  if (b.lease != 0 && !Valid()) {
    return Status::Unavailable(
        "kvtierd closed the connection that held the lease (a restart or an upgrade): the "
        "copy may hold other bytes than the block's; read it again");
  }
  return b.size;
}

bool ShmBlocks::Valid() const { return conn_ == nullptr || !conn_->Lost(); }

// ---- ShmAllocation ----

ShmAllocation::ShmAllocation(ShmAllocation&& other) noexcept { *this = std::move(other); }

ShmAllocation& ShmAllocation::operator=(ShmAllocation&& other) noexcept {
  if (this != &other) {
    Abort();
    conn_ = std::move(other.conn_);
    id_ = std::exchange(other.id_, 0);
    size_ = std::exchange(other.size_, 0);
    pieces_ = std::move(other.pieces_);
    other.pieces_.clear();
  }
  return *this;
}

ShmAllocation::~ShmAllocation() { Abort(); }

void ShmAllocation::Abort() {
  if (id_ != 0 && conn_ != nullptr) {
    uint64_t id = std::exchange(id_, 0);
    conn_->SendIds(protocol::Opcode::kShmAbort, std::span(&id, 1));
  }
  id_ = 0;
  size_ = 0;
  pieces_.clear();
}

namespace {

// One batch's SHM_ALLOC, copies into the staging file and SHM_COMMIT on `conn`.
std::vector<Status> PutOn(const std::shared_ptr<shm_internal::Connection>& conn,
                          std::span<const BlockWrite> batch) {
  std::vector<Status> out(batch.size());
  std::vector<protocol::PutEntry> entries;
  entries.reserve(batch.size());
  for (const BlockWrite& w : batch) {
    entries.push_back({w.key, w.parent, w.value.size(), w.session, w.dtype});
  }
  std::string body;
  protocol::EncodePutDirectory(entries, &body);
  Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmAlloc, body);
  Result<std::vector<protocol::ShmAllocItem>> items =
      raw.ok() ? protocol::DecodeShmAllocReply(*raw)
               : Result<std::vector<protocol::ShmAllocItem>>(raw.status());
  if (items.ok() && items->size() != batch.size()) {
    items = Status::InvalidArgument("SHM_ALLOC reply has the wrong number of items");
  }
  if (!items.ok()) {
    std::fill(out.begin(), out.end(), items.status());
    return out;
  }
  std::vector<uint64_t> commit, abort;
  std::vector<size_t> commit_index;
  for (size_t i = 0; i < batch.size(); ++i) {
    const protocol::ShmAllocItem& item = (*items)[i];
    if (item.status.code() == StatusCode::kAlreadyExists) continue;  // Present: OK.
    if (!item.status.ok()) {
      out[i] = item.status;
      continue;
    }
    Status valid = protocol::CheckExtents(item.extents, batch[i].value.size(), conn->staging_size());
    if (!valid.ok()) {
      out[i] = Status::Internal("kvtierd sent a bad extent: " + std::string(valid.message()));
      abort.push_back(item.allocation);
      continue;
    }
    size_t offset = 0;
    for (const protocol::ShmExtent& e : item.extents) {
      std::memcpy(conn->staging() + e.offset, batch[i].value.data() + offset, e.length);
      offset += e.length;
    }
    commit.push_back(item.allocation);
    commit_index.push_back(i);
  }
  if (!abort.empty()) {
    body.clear();
    protocol::EncodeShmIds(abort, &body);
    // Best effort: the allocations end with the connection otherwise.
    Result<std::vector<std::byte>> ignored = conn->Call(protocol::Opcode::kShmAbort, body);
    (void)ignored;
  }
  if (commit.empty()) return out;
  body.clear();
  protocol::EncodeShmIds(commit, &body);
  raw = conn->Call(protocol::Opcode::kShmCommit, body);
  Result<std::vector<Status>> statuses =
      raw.ok() ? protocol::DecodeItemStatuses(*raw) : Result<std::vector<Status>>(raw.status());
  if (statuses.ok() && statuses->size() != commit.size()) {
    statuses = Status::InvalidArgument("SHM_COMMIT reply has the wrong number of items");
  }
  for (size_t k = 0; k < commit.size(); ++k) {
    out[commit_index[k]] = statuses.ok() ? (*statuses)[k] : statuses.status();
  }
  return out;
}

}  // namespace

// ---- ShmClient ----

struct ShmClient::State {
  std::string tenant;  // As kvtierd named it at the first connection.
  Mutex mu;
  std::shared_ptr<shm_internal::Connection> conn ABSL_GUARDED_BY(mu);

  // A new connection in place of `lost`, trying for up to retry_timeout_ms while kvtierd
  // cannot be reached; the current one when another thread replaced `lost` already.
  Result<std::shared_ptr<shm_internal::Connection>> Reconnect(
      const ShmClientOptions& options, const std::shared_ptr<shm_internal::Connection>& lost)
      ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    if (conn != lost) return conn;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options.retry_timeout_ms);
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
      Result<std::shared_ptr<shm_internal::Connection>> fresh =
          shm_internal::Connection::Open(options);
      if (fresh.ok()) {
        conn = *fresh;
        return conn;
      }
      // Only a kvtierd that is not (yet) there is worth waiting for.
      if (fresh.status().code() != StatusCode::kUnavailable ||
          std::chrono::steady_clock::now() + pause > deadline) {
        return fresh.status();
      }
      std::this_thread::sleep_for(pause);  // Backing off while kvtierd restarts.
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
  }
};

ShmClient::ShmClient(const ShmClientOptions& options,
                     std::shared_ptr<shm_internal::Connection> conn)
    : options_(options), state_(std::make_unique<State>()) {
  state_->tenant = conn->hello().tenant;
  MutexLock lock(&state_->mu);
  state_->conn = std::move(conn);
}

std::shared_ptr<shm_internal::Connection> ShmClient::Current() const {
  MutexLock lock(&state_->mu);
  return state_->conn;
}

template <typename Call>
auto ShmClient::WithReconnect(const Call& call) -> decltype(call(Current())) {
  std::shared_ptr<shm_internal::Connection> conn = Current();
  auto result = call(conn);
  if (options_.retry_timeout_ms == 0 || !conn->Broken()) return result;
  Result<std::shared_ptr<shm_internal::Connection>> fresh = state_->Reconnect(options_, conn);
  if (!fresh.ok()) return result;
  return call(*fresh);
}

Result<std::unique_ptr<ShmClient>> ShmClient::Connect(const ShmClientOptions& options) {
  Result<std::shared_ptr<shm_internal::Connection>> conn =
      shm_internal::Connection::Open(options);
  if (!conn.ok()) return conn.status();
  return std::unique_ptr<ShmClient>(new ShmClient(options, std::move(conn).value()));
}

ShmClient::~ShmClient() = default;

uint64_t ShmClient::arena_size() const { return Current()->arena_size(); }
uint32_t ShmClient::max_leases() const { return Current()->attach().max_leases; }
uint32_t ShmClient::max_allocations() const { return Current()->attach().max_allocations; }
const std::string& ShmClient::tenant() const { return state_->tenant; }

Status ShmClient::Flush() {
  std::shared_ptr<shm_internal::Connection> conn = Current();
  Status s = conn->Flush();
  if (options_.retry_timeout_ms == 0 || !conn->Broken()) return s;
  // The kvtierd that had them dropped every lease and allocation with the connection.
  Result<std::shared_ptr<shm_internal::Connection>> fresh = state_->Reconnect(options_, conn);
  return fresh.ok() ? Status::OK() : fresh.status();
}

Result<ShmAllocation> ShmClient::Allocate(const BlockKey& key, size_t size,
                                          const PutOptions& options) {
  return WithReconnect([&](const std::shared_ptr<shm_internal::Connection>& conn)
                           -> Result<ShmAllocation> {
    protocol::PutEntry entry{key, options.parent, size, options.session, options.dtype};
    std::string body;
    protocol::EncodePutDirectory(std::span(&entry, 1), &body);
    Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmAlloc, body);
    if (!raw.ok()) return raw.status();
    Result<std::vector<protocol::ShmAllocItem>> items = protocol::DecodeShmAllocReply(*raw);
    if (!items.ok()) return items.status();
    if (items->size() != 1) {
      return Status::Internal("SHM_ALLOC reply has the wrong number of items");
    }
    const protocol::ShmAllocItem& item = (*items)[0];
    if (!item.status.ok()) return item.status;
    ShmAllocation a;
    a.conn_ = conn;
    a.id_ = item.allocation;  // Aborted by `a` on any error below.
    Status valid = protocol::CheckExtents(item.extents, size, conn->staging_size());
    if (!valid.ok()) {
      return Status::Internal("kvtierd sent a bad extent: " + std::string(valid.message()));
    }
    a.size_ = size;
    for (const protocol::ShmExtent& e : item.extents) {
      a.pieces_.emplace_back(conn->staging() + e.offset, e.length);
    }
    return a;
  });
}

Status ShmClient::Commit(ShmAllocation allocation) {
  const std::shared_ptr<shm_internal::Connection> conn = allocation.conn_;
  const Status not_ours = Status::InvalidArgument("not a pending allocation of this client");
  if (!allocation.valid() || conn == nullptr) return not_ours;
  const Status lost = Status::Aborted(
      "kvtierd closed the connection that made the allocation (a restart or an upgrade): "
      "allocate again");
  if (conn != Current()) return conn->Lost() ? lost : not_ours;
  const uint64_t id = std::exchange(allocation.id_, 0);
  allocation.pieces_.clear();
  std::string body;
  protocol::EncodeShmIds(std::span(&id, 1), &body);
  Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmCommit, body);
  if (!raw.ok()) return conn->Broken() ? lost : raw.status();
  Result<std::vector<Status>> statuses = protocol::DecodeItemStatuses(*raw);
  if (!statuses.ok()) return statuses.status();
  if (statuses->size() != 1) {
    return Status::Internal("SHM_COMMIT reply has the wrong number of items");
  }
  return (*statuses)[0];
}

Result<ShmBlocks> ShmClient::Get(std::span<const BlockKey> keys) {
  return WithReconnect([&](const std::shared_ptr<shm_internal::Connection>& conn)
                           -> Result<ShmBlocks> {
    std::string body;
    protocol::EncodeKeyList(keys, &body);
    Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmGet, body);
    if (!raw.ok()) return raw.status();
    Result<protocol::ShmGetReply> reply = protocol::DecodeShmGetReply(*raw);
    ShmBlocks out;
    out.conn_ = conn;
    if (reply.ok() && reply->items.size() != keys.size()) {
      reply = Status::InvalidArgument("SHM_GET reply has " + std::to_string(reply->items.size()) +
                                      " items for " + std::to_string(keys.size()) + " keys");
    }
    if (!reply.ok()) return reply.status();
    out.blocks_.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const protocol::ShmGetItem& item = reply->items[i];
      ShmBlocks::Block& b = out.blocks_[i];
      b.status = item.status;
      if (!item.status.ok()) continue;
      b.size = item.size;
      if (item.is_inline()) {
        b.owned.assign(reply->inline_values[i].begin(), reply->inline_values[i].end());
        b.pieces.emplace_back(b.owned.data(), b.owned.size());
        continue;
      }
      b.lease = item.lease;  // Released whatever happens next.
      Status valid = protocol::CheckExtents(item.extents, item.size, conn->arena_size());
      if (!valid.ok()) {
        b.status = Status::Internal("kvtierd sent a bad extent: " + std::string(valid.message()));
        continue;
      }
      for (const protocol::ShmExtent& e : item.extents) {
        b.pieces.emplace_back(conn->base() + e.offset, e.length);
        conn->Populate(b.pieces.back());
      }
    }
    return out;
  });
}

Result<size_t> ShmClient::Read(const BlockKey& key, std::span<std::byte> out) {
  return ReadMany(std::span(&key, 1), std::span(&out, 1))[0];
}

std::vector<Result<size_t>> ShmClient::ReadMany(std::span<const BlockKey> keys,
                                                std::span<const std::span<std::byte>> outs) {
  std::vector<Result<size_t>> got(keys.size(), Status::InvalidArgument("no buffer for the key"));
  const std::shared_ptr<shm_internal::Connection> conn = Current();  // One lock for both limits.
  const size_t step = std::max<uint32_t>(
      1, std::min(conn->attach().max_leases, std::max<uint32_t>(conn->hello().max_batch, 1)));
  for (size_t begin = 0; begin < keys.size() && begin < outs.size(); begin += step) {
    const size_t n = std::min({step, keys.size() - begin, outs.size() - begin});
    // Twice when kvtierd closed the connection holding the leases meanwhile: the client
    // reconnects for the second (or fails, with retry_timeout_ms = 0).
    for (int attempt = 0; attempt < 2; ++attempt) {
      Result<ShmBlocks> blocks = Get(keys.subspan(begin, n));
      for (size_t j = 0; j < n; ++j) {
        got[begin + j] = blocks.ok() ? blocks->CopyTo(j, outs[begin + j])
                                     : Result<size_t>(blocks.status());
      }  // The leases end when `blocks` goes.
      if (!blocks.ok() || blocks->Valid()) break;
    }
  }
  return got;
}

Status ShmClient::Put(const BlockKey& key, std::span<const std::byte> value,
                      const PutOptions& options) {
  BlockWrite w{key, value, options.parent, options.session, options.dtype};
  return PutMany(std::span(&w, 1))[0];
}

std::vector<Status> ShmClient::PutMany(std::span<const BlockWrite> writes) {
  std::vector<Status> out(writes.size());
  const std::shared_ptr<shm_internal::Connection> first = Current();
  const size_t chunk = std::max<size_t>(
      1, std::min<size_t>(first->hello().max_batch, first->attach().max_allocations));
  for (size_t start = 0; start < writes.size(); start += chunk) {
    std::span<const BlockWrite> batch =
        writes.subspan(start, std::min(chunk, writes.size() - start));
    std::vector<Status> done = WithReconnect(
        [&](const std::shared_ptr<shm_internal::Connection>& conn) { return PutOn(conn, batch); });
    std::move(done.begin(), done.end(), out.begin() + static_cast<ptrdiff_t>(start));
  }
  return out;
}

}  // namespace kvtier
