#include "src/client/client_connection.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "src/protocol/messages.h"

namespace kvtier::client {
namespace {

using protocol::FrameHeader;
using protocol::Opcode;

std::string Errno() { return std::strerror(errno); }

Result<int> ConnectTcp(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("endpoint '" + address + "' is not host:port");
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return Status::Unavailable("cannot resolve " + address + ": " + gai_strerror(rc));
  std::string error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      freeaddrinfo(res);
      return fd;
    }
    error = Errno();
    close(fd);
  }
  freeaddrinfo(res);
  return Status::Unavailable("cannot connect to " + address + ": " + error);
}

struct Endpoint {
  std::string unix_path;  // Set for a Unix socket.
  std::string address;    // host:port for TCP.
  bool tls = false;       // "tls://".
};

Endpoint ParseEndpoint(const std::string& endpoint) {
  if (endpoint.starts_with("unix:")) return {endpoint.substr(5), "", false};
  if (endpoint.starts_with("/")) return {endpoint, "", false};
  if (endpoint.starts_with("tcp://")) return {"", endpoint.substr(6), false};
  if (endpoint.starts_with("tls://")) return {"", endpoint.substr(6), true};
  return {"", endpoint, false};
}

std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// SO_RCVTIMEO and SO_SNDTIMEO: a blocked recv or send returns EAGAIN after `ms`.
void SetSocketTimeouts(int fd, uint32_t ms) {
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

Result<int> ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("unix socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable("socket: " + Errno());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status s = Status::Unavailable("cannot connect to unix:" + path + ": " + Errno());
    close(fd);
    return s;
  }
  return fd;
}

Result<std::unique_ptr<ClientConnection>> ClientConnection::Open(const ClientOptions& options) {
  Endpoint ep = ParseEndpoint(options.endpoint);
  Result<int> fd = ep.unix_path.empty() ? ConnectTcp(ep.address) : ConnectUnix(ep.unix_path);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<ClientConnection> conn(new ClientConnection(*fd, options.io_timeout_ms));
  if (ep.unix_path.empty() && (ep.tls || options.tls.enabled)) {
    Result<std::unique_ptr<TlsStream>> tls = TlsStream::Connect(*fd, options.tls, HostOf(ep.address));
    if (!tls.ok()) return tls.status();
    conn->tls_ = std::move(tls).value();
    if (options.io_timeout_ms > 0) {
      conn->tls_->SetStallCheck(static_cast<int>(options.io_timeout_ms),
                                [c = conn.get()] { return c->Stalled(); },
                                [c = conn.get()] { c->Progress(); });
    }
  } else if (options.io_timeout_ms > 0) {
    SetSocketTimeouts(*fd, options.io_timeout_ms);
  }
  conn->Progress();
  conn->in_hello_.store(true);
  KVTIER_RETURN_IF_ERROR(conn->Hello(options));
  conn->in_hello_.store(false);
  conn->reader_ = std::thread([c = conn.get()] { c->ReaderLoop(); });
  return conn;
}

ClientConnection::~ClientConnection() {
  shutdown(fd_, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  FailAll(Status::Unavailable("client closed"));
  close(fd_);
}

Status ClientConnection::Hello(const ClientOptions& options) {
  protocol::HelloRequest hello;
  hello.features = protocol::kServerFeatures;
  hello.tenant = options.tenant;
  hello.token = options.token;
  hello.client_name = options.client_name;
  std::string body;
  protocol::EncodeHello(hello, &body);
  FrameHeader h;
  h.opcode = static_cast<uint8_t>(Opcode::kHello);
  h.request_id = next_id_++;
  h.body_length = static_cast<uint32_t>(body.size());
  std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(body.data()), body.size());
  KVTIER_RETURN_IF_ERROR(WriteFrame(h, std::span(&piece, 1)));
  FrameHeader rh;
  Reply reply;
  KVTIER_RETURN_IF_ERROR(ReadFrame(&rh, &reply));
  Result<protocol::HelloResponse> resp = protocol::DecodeHelloResponse(reply.bytes());
  if (!resp.ok()) return resp.status();
  info_.server = resp->server;
  info_.tenant = resp->tenant;
  info_.features = resp->features;
  info_.max_frame_bytes = resp->max_frame_bytes;
  info_.max_block_bytes = resp->max_block_bytes;
  info_.max_batch = resp->max_batch;
  return Status::OK();
}

Status ClientConnection::WriteFrame(const FrameHeader& header,
                                    std::span<const std::span<const std::byte>> pieces) {
  std::byte head[protocol::kHeaderSize];
  protocol::EncodeHeader(header, head);
  std::vector<iovec> iov;
  iov.reserve(pieces.size() + 1);
  iov.push_back({head, sizeof(head)});
  for (std::span<const std::byte> p : pieces) {
    if (!p.empty()) iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
  }
  MutexLock lock(&write_mu_);
  struct Writing {
    std::atomic<int>* n;
    explicit Writing(std::atomic<int>* c) : n(c) { ++*n; }
    ~Writing() { --*n; }
  } writing(&writing_);
  if (tls_ != nullptr) return tls_->WriteAll(iov);
  size_t next = 0;
  while (next < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + next;
    msg.msg_iovlen = std::min<size_t>(iov.size() - next, IOV_MAX);
    ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      // SO_SNDTIMEO expired: kvtierd took no byte for io_timeout_ms.
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return Status::Unavailable(NoProgressMessage(static_cast<int>(io_timeout_ms_)));
      }
      return Status::Unavailable("write to kvtierd failed: " + Errno());
    }
    Progress();
    auto left = static_cast<size_t>(n);
    while (left > 0 && left >= iov[next].iov_len) left -= iov[next++].iov_len;
    if (left > 0) {
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
    }
  }
  return Status::OK();
}

Status ClientConnection::ReadHeader(FrameHeader* header) {
  std::byte head[protocol::kHeaderSize];
  KVTIER_RETURN_IF_ERROR(ReadExact(head, sizeof(head)));
  // Replies may be as large as the largest request plus a directory.
  uint32_t limit = info_.max_frame_bytes == 0 ? (1u << 20) : info_.max_frame_bytes + (1u << 20);
  protocol::DecodedFrame f = protocol::DecodeFrame(std::span(head, sizeof(head)), limit);
  if (f.state == protocol::DecodedFrame::State::kError) return f.error;
  *header = f.header;
  if (!(header->flags & protocol::kFlagResponse)) {
    return Status::InvalidArgument("kvtierd sent a frame that is not a response");
  }
  return Status::OK();
}

Status ClientConnection::ReadBody(const FrameHeader& header, Reply* reply) {
  reply->size = header.body_length;
  reply->body = std::make_unique_for_overwrite<std::byte[]>(reply->size);
  KVTIER_RETURN_IF_ERROR(ReadExact(reply->body.get(), reply->size));
  if (header.opcode == static_cast<uint8_t>(Opcode::kError)) {
    Status s = protocol::DecodeResponseStatus(reply->bytes());
    return s.ok() ? Status::Internal("kvtierd sent an ERROR frame with status OK") : s;
  }
  return Status::OK();
}

Status ClientConnection::ReadFrame(FrameHeader* header, Reply* reply) {
  KVTIER_RETURN_IF_ERROR(ReadHeader(header));
  return ReadBody(*header, reply);
}

void ClientConnection::Progress() { last_progress_ns_.store(NowNs(), std::memory_order_relaxed); }

bool ClientConnection::Stalled() {
  if (io_timeout_ms_ == 0) return false;
  if (writing_.load() > 0 && !in_hello_.load()) return false;
  const int64_t idle_ns = NowNs() - last_progress_ns_.load(std::memory_order_relaxed);
  if (idle_ns < int64_t{io_timeout_ms_} * 1'000'000) return false;
  MutexLock lock(&mu_);
  return in_hello_.load() || in_body_.load() || !pending_.empty();
}

Status ClientConnection::ReadExact(std::byte* out, size_t n) {
  if (tls_ != nullptr) return tls_->ReadExact(out, n);
  while (n > 0) {
    ssize_t r = recv(fd_, out, n, MSG_WAITALL);
    if (r > 0) {
      Progress();
      out += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    // SO_RCVTIMEO expired: an idle connection waits on, a request that gets no reply does not.
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!Stalled()) continue;
      return Status::Unavailable(NoProgressMessage(static_cast<int>(io_timeout_ms_)));
    }
    return Status::Unavailable(r == 0 ? "kvtierd closed the connection"
                                      : "read from kvtierd failed: " + Errno());
  }
  return Status::OK();
}

void ClientConnection::Send(Opcode opcode, std::span<const std::span<const std::byte>> pieces,
                            ReplyHandler on_reply, BodySink sink) {
  FrameHeader h;
  h.opcode = static_cast<uint8_t>(opcode);
  h.request_id = next_id_++;
  uint64_t body = 0;
  for (std::span<const std::byte> p : pieces) body += p.size();
  if (body > info_.max_frame_bytes) {
    on_reply({Status::InvalidArgument("request of " + std::to_string(body) +
                                      " bytes exceeds the server's max_frame_bytes " +
                                      std::to_string(info_.max_frame_bytes)), nullptr, 0});
    return;
  }
  h.body_length = static_cast<uint32_t>(body);
  Status failure;
  {
    MutexLock lock(&mu_);
    failure = failure_;
    if (failure.ok()) pending_.emplace(h.request_id, Pending{std::move(on_reply), std::move(sink)});
  }
  if (!failure.ok()) {
    on_reply({failure, nullptr, 0});
    return;
  }
  Status written = WriteFrame(h, pieces);
  if (!written.ok()) {
    // Unblock the reader too; it fails every pending request, this one included.
    broken_.store(true);
    shutdown(fd_, SHUT_RDWR);
  }
}

void ClientConnection::ReaderLoop() {
  const BodyRead read = [this](std::byte* out, size_t n) { return ReadExact(out, n); };
  for (;;) {
    FrameHeader h;
    Status s = ReadHeader(&h);
    if (s.ok() && h.opcode == static_cast<uint8_t>(Opcode::kError)) {
      Reply error;
      s = ReadBody(h, &error);  // The server's reason; it closes the connection after it.
    }
    if (!s.ok()) {
      FailAll(s);
      return;
    }
    Pending pending;
    {
      MutexLock lock(&mu_);
      auto it = pending_.find(h.request_id);
      if (it != pending_.end()) {
        pending = std::move(it->second);
        pending_.erase(it);
      }
    }
    if (!pending.on_reply) {
      FailAll(Status::Internal("kvtierd replied to unknown request id " + std::to_string(h.request_id)));
      return;
    }
    Reply reply;
    in_body_.store(true);  // Its request has left pending_, and still waits for these bytes.
    s = pending.sink ? pending.sink(h.body_length, read) : ReadBody(h, &reply);
    in_body_.store(false);
    if (!s.ok()) {
      // A read failed: the connection is gone, this request with it.
      pending.on_reply({s, nullptr, 0});
      FailAll(s);
      return;
    }
    pending.on_reply(std::move(reply));
  }
}

void ClientConnection::FailAll(const Status& status) {
  broken_.store(true);
  std::unordered_map<uint64_t, Pending> pending;
  {
    MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = status;
    pending.swap(pending_);
  }
  for (auto& [id, p] : pending) p.on_reply({status, nullptr, 0});
  // Unblock a reader that may still be waiting (FailAll from a failed write).
  shutdown(fd_, SHUT_RDWR);
}

}  // namespace kvtier::client
