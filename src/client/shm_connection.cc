// shm_internal::Connection (src/client/shm_connection.h).

#include "src/client/shm_connection.h"

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
#include <unordered_set>
#include <utility>

#include "src/client/client_connection.h"
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

void Connection::AddReserved(uint64_t offset, uint64_t size) {
  MutexLock lock(&reserved_mu_);
  reserved_[offset] = size;
}

void Connection::RemoveReserved(uint64_t offset) {
  MutexLock lock(&reserved_mu_);
  reserved_.erase(offset);
}

std::optional<uint64_t> Connection::ReservedOffset(std::span<const std::byte> bytes) const {
  const auto p = reinterpret_cast<uintptr_t>(bytes.data());
  const auto base = reinterpret_cast<uintptr_t>(staging_);
  if (staging_ == nullptr || p < base || p - base >= attach_.staging_size) return std::nullopt;
  const uint64_t offset = p - base;
  MutexLock lock(&reserved_mu_);
  auto it = reserved_.upper_bound(offset);
  if (it == reserved_.begin()) return std::nullopt;
  --it;
  if (offset - it->first >= it->second || bytes.size() > it->second - (offset - it->first)) {
    return std::nullopt;
  }
  return offset;
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

}  // namespace kvtier
