// One connection of the C++ client: a blocking socket (or a TLS stream over a TCP socket), a
// writer lock, and a reader thread that matches replies to requests by id.

#ifndef KVTIER_CLIENT_CLIENT_CONNECTION_H_
#define KVTIER_CLIENT_CLIENT_CONNECTION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <unordered_map>

#include "kvtier/client.h"
#include "src/client/client_tls.h"
#include "src/common/mutex.h"
#include "src/protocol/wire.h"

namespace kvtier::client {

// A blocking stream socket connected to the Unix socket at `path`. Unavailable when it cannot
// be reached; InvalidArgument for a path too long for sockaddr_un.
Result<int> ConnectUnix(const std::string& path);

// A reply body; `status` is not OK when no reply came (the connection failed).
struct Reply {
  Status status;
  std::unique_ptr<std::byte[]> body;
  size_t size = 0;
  std::span<const std::byte> bytes() const { return {body.get(), size}; }
};

// Reads exactly n bytes of the reply body from the connection into `out`.
using BodyRead = std::function<Status(std::byte* out, size_t n)>;

class ClientConnection {
 public:
  using ReplyHandler = std::function<void(Reply)>;
  // Takes a reply body of `length` bytes straight from the connection, on the reader thread,
  // instead of receiving it into one buffer. It must read exactly `length` bytes through
  // `read` unless a read fails; it returns that read's error, or OK.
  using BodySink = std::function<Status(size_t length, const BodyRead& read)>;

  // Connects to options.endpoint and exchanges HELLO. Unavailable when unreachable; the
  // server's error (Unauthenticated, ...) when it refuses the HELLO.
  static Result<std::unique_ptr<ClientConnection>> Open(const ClientOptions& options);

  // Fails the requests still waiting (Unavailable) and closes.
  ~ClientConnection();

  // Sends one request made of `pieces` (written in order with gathered I/O, straight from the
  // caller's memory; they need to stay valid during the call only). `on_reply` is called
  // exactly once: on the reader thread with the reply, or with an error status when the
  // connection fails (possibly on this thread, before Send returns). With a `sink`, a reply
  // that is not an ERROR frame is read by the sink and `on_reply` gets an empty body.
  void Send(protocol::Opcode opcode, std::span<const std::span<const std::byte>> pieces,
            ReplyHandler on_reply, BodySink sink = nullptr);

  bool broken() const { return broken_.load(); }
  // Whether a request (or the HELLO) has waited io_timeout_ms without a byte moving.
  bool Stalled() ABSL_LOCKS_EXCLUDED(mu_);
  const ServerInfo& info() const { return info_; }

 private:
  ClientConnection(int fd, uint32_t io_timeout_ms) : fd_(fd), io_timeout_ms_(io_timeout_ms) {}
  void Progress();  // Records that bytes moved.
  Status Hello(const ClientOptions& options);
  // Reads exactly n bytes from the socket or the TLS stream.
  Status ReadExact(std::byte* out, size_t n);
  Status WriteFrame(const protocol::FrameHeader& header,
                    std::span<const std::span<const std::byte>> pieces);
  // Reads one frame header. Unavailable on EOF or error; InvalidArgument for a bad frame.
  Status ReadHeader(protocol::FrameHeader* header);
  // Reads the body of a frame whose header was read. An ERROR frame's status is returned.
  Status ReadBody(const protocol::FrameHeader& header, Reply* reply);
  // Both.
  Status ReadFrame(protocol::FrameHeader* header, Reply* reply);
  void ReaderLoop();
  void FailAll(const Status& status);

  const int fd_;
  const uint32_t io_timeout_ms_;  // 0: no limit.
  std::atomic<int64_t> last_progress_ns_{0};
  std::atomic<bool> in_hello_{false};
  std::atomic<bool> in_body_{false};
  // Writes under way: a blocked send detects its own stall (SO_SNDTIMEO, poll timeouts), and
  // while it moves bytes the reader must not call the connection stalled.
  std::atomic<int> writing_{0};
  std::unique_ptr<TlsStream> tls_;  // Set before the reader starts; null for plaintext.
  ServerInfo info_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> broken_{false};
  Mutex write_mu_;
  Mutex mu_;
  struct Pending {
    ReplyHandler on_reply;
    BodySink sink;
  };
  std::unordered_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  Status failure_ ABSL_GUARDED_BY(mu_);
  std::thread reader_;
};

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_CLIENT_CONNECTION_H_
