// One client connection of an event loop (src/server/event_loop.h): reading requests, handing
// them to its protocol handler, writing the replies, backpressure, the low-water mark, timeouts,
// and closing, lingering or at once. Internal to event_loop.cc, which owns the connections.

#ifndef KVTIER_SERVER_CONNECTION_H_
#define KVTIER_SERVER_CONNECTION_H_

#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "src/server/event_loop.h"
#include "src/server/metrics.h"
#include "src/server/tls.h"

namespace kvtier::server {

using Clock = std::chrono::steady_clock;

// Read in steps of this much when the handler does not know the request size yet.
inline constexpr size_t kReadChunk = 64 << 10;
// Reads per readiness event before the loop turns to other connections.
inline constexpr int kReadsPerEvent = 16;
// Bytes written to one connection per readiness event, so that large replies to several clients
// go out interleaved; past it, the output's short end goes in the same event too (a reply's last
// bytes left for the next pass would finish it a pass of the loop later).
inline constexpr size_t kWritesPerEvent = 1 << 20;
inline constexpr size_t kShortTail = 64 << 10;
// Most input a connection waits for (SO_RCVLOWAT) before the loop is woken to read the rest of a
// request of known size: a large value arrives in a few reads instead of one per segment, and a
// slow sender still shows activity that often.
inline constexpr size_t kMaxLowWater = 1 << 20;
// How long a connection waiting under a raised low-water mark may see no input (see
// Connection::RecoverFromLowWater).
inline constexpr std::chrono::seconds kLowWaterStall{1};
// How long a connection being closed may take to flush its last reply and finish sending.
inline constexpr std::chrono::seconds kMaxLinger{10};
// The most payload bytes dropped in one read (EventLoop::discard_'s size).
inline constexpr size_t kDiscardChunk = 64 << 10;


// One client connection. Lives on one loop thread.
class Connection {
 public:
  enum class State {
    kHandshaking,  // TLS handshake in progress; nothing handled yet.
    kOpen,       // Reading and handling requests.
    kClosing,    // No more requests; close once the queued replies are written.
    kLingering,  // Replies written and our side shut down; discarding input until the peer
                 // closes, so that unread input does not turn our close into a reset that
                 // destroys the last reply before the client reads it.
    kDead,
  };

  // `tls`: the connection's TLS session (the handshake has not started), or null for plaintext.
  Connection(EventLoop* loop, int fd, std::unique_ptr<ProtocolHandler> handler,
             std::unique_ptr<TlsSession> tls)
      : loop_(loop),
        fd_(fd),
        handler_(std::move(handler)),
        tls_(std::move(tls)),
        last_activity_(Clock::now()) {
    loop_->ctx_->metrics->ConnectionOpened(handler_->proto());
    if (tls_ != nullptr) state_ = State::kHandshaking;
  }
  ~Connection() {
    tls_.reset();
    close(fd_);
    loop_->ctx_->metrics->ConnectionClosed(handler_->proto());
  }

  int fd() const { return fd_; }
  State state() const { return state_; }
  Clock::time_point last_activity() const { return last_activity_; }
  uint32_t registered_events = 0;

  uint32_t WantedEvents() const {
    if (state_ == State::kHandshaking) return handshake_wants_write_ ? EPOLLOUT : EPOLLIN;
    uint32_t events = 0;
    if ((state_ == State::kOpen && out_.pending_bytes() <= MaxOutput()) ||
        state_ == State::kLingering) {
      events |= EPOLLIN;
    }
    if (!out_.empty() || read_wants_write_) events |= EPOLLOUT;
    return events;
  }

  void OnEvents(uint32_t events) {
    write_budget_ = kWritesPerEvent;
    if (events & (EPOLLERR | EPOLLHUP)) {
      // Write whatever the peer may still accept; a reset peer fails the write.
      if ((events & EPOLLIN) == 0) {
        state_ = State::kDead;
        return;
      }
    }
    if (state_ == State::kHandshaking) {
      Handshake();
      return;
    }
    if ((events & EPOLLOUT) && read_wants_write_) {
      read_wants_write_ = false;
      OnReadable();
    }
    if (events & EPOLLOUT) Pump();
    // Reading stopped for backpressure may resume now that replies were written; input that
    // OpenSSL buffered meanwhile would raise no EPOLLIN.
    if (((events & EPOLLIN) || TlsPending()) && state_ != State::kDead) OnReadable();
  }

  void OnIdle() {
    loop_->ctx_->metrics->IdleClosed(handler_->proto());
    handler_->OnIdleTimeout(&out_);
    state_ = State::kClosing;
    Pump();
  }

  // Whether the request at the front of the input, incomplete, has taken longer than `timeout`
  // from its first byte plus a second for each `rate` bytes of it received. Time while the loop
  // did not read it (replies queued for a client that does not read them) does not count.
  bool RequestOverdue(Clock::time_point now, std::chrono::seconds timeout, uint64_t rate) {
    if (state_ != State::kOpen || ExpectedInput() == 0) return false;
    if (out_.pending_bytes() > MaxOutput()) {
      unread_until_ = now;
      return false;
    }
    const auto allowed = timeout + std::chrono::seconds((in_.size() + payload_received_) / rate);
    return now - std::max(request_began_, unread_until_) > allowed;
  }

  void OnRequestTimeout() {
    loop_->ctx_->metrics->RequestTimedOut(handler_->proto());
    handler_->OnRequestTimeout(&out_);
    in_.Consume(in_.size());
    payload_left_ = 0;
    state_ = State::kClosing;
    Pump();
  }

  // At shutdown. A connection between requests closes at once: nothing is owed to it, and
  // lingering until its peer closes would hold the drain for shutdown_grace_seconds whenever a
  // client keeps an idle connection open (an engine's pool does), and with it the G2 save and
  // a rolling upgrade's successor. With nothing unread on our side the close is a FIN, not a
  // reset; the client's next call reconnects. A connection with a request under way or replies
  // queued finishes them and lingers as before.
  void BeginClose() {
    if (state_ == State::kHandshaking) {
      state_ = State::kDead;
      return;
    }
    if (state_ == State::kOpen && BetweenRequests()) {
      if (tls_ != nullptr) tls_->Shutdown();  // close_notify, best effort.
      state_ = State::kDead;
      return;
    }
    if (state_ == State::kOpen) state_ = State::kClosing;
    Pump();
  }

  void Kill() { state_ = State::kDead; }

  // For the once-a-second sweep. A connection waiting for the rest of a request under a raised
  // SO_RCVLOWAT that has received nothing for a second may be one the kernel will not wake:
  // Linux wakes a reader only when the mark's worth of data is queued, and the receive buffer
  // may not let that much in (memory pressure, skb overhead on loopback). It reads what has
  // come and goes back to waking on every byte for good.
  void RecoverFromLowWater(Clock::time_point now) {
    if (low_water_ <= 1 || state_ != State::kOpen || now - last_activity_ < kLowWaterStall) return;
    int queued = -1, rcvbuf = -1;
    socklen_t len = sizeof(rcvbuf);
    ioctl(fd_, FIONREAD, &queued);
    getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len);
    loop_->LogTrace("kvtierd: a " + std::string(ProtoName(handler_->proto())) +
                    " connection waiting for " + std::to_string(ExpectedInput()) +
                    " more bytes of a request under SO_RCVLOWAT " + std::to_string(low_water_) +
                    " was not woken for " + Millis(now - last_activity_) + " with " +
                    std::to_string(queued) + " bytes queued (SO_RCVBUF " +
                    std::to_string(rcvbuf) + "); it reads every byte from now on");
    int one = 1;
    if (setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) == 0) low_water_ = 1;
    low_water_off_ = true;
    loop_->ctx_->metrics->LowWaterStall();
    OnReadable();
  }

 private:
  uint64_t MaxOutput() const { return loop_->ctx_->config->max_output_bytes; }

  // True when a TLS session holds input that epoll cannot see.
  bool TlsPending() const { return tls_ != nullptr && tls_->HasPending(); }

  void OnReadable() {
    // Past kReadsPerEvent reads, input already buffered by OpenSSL is still drained: no
    // readiness event would bring the loop back for it.
    for (int i = 0; i < kReadsPerEvent || TlsPending(); ++i) {
      if (state_ != State::kOpen && state_ != State::kLingering) return;
      if (state_ == State::kOpen && out_.pending_bytes() > MaxOutput()) break;
      const bool payload = state_ == State::kOpen && payload_left_ > 0;
      ssize_t n;
      size_t tail = 0;  // Bytes read past the payload, into the input buffer.
      if (payload) {
        size_t want = target_.size() - target_filled_;
        if (target_.data() == nullptr) want = std::min(want, kDiscardChunk);
        if (read_step_ > 0 && tls_ == nullptr && target_.data() != nullptr && want == payload_left_) {
          // The payload's last bytes, and the framing after them in the same read.
          in_.Reserve(read_step_);
          n = ReceiveWithTail(PayloadDestination(), want, in_.write_ptr(), read_step_);
          if (n > static_cast<ssize_t>(want)) {
            tail = static_cast<size_t>(n) - want;
            n = static_cast<ssize_t>(want);
          }
        } else {
          n = Receive(PayloadDestination(), want);
        }
      } else {
        // Room for the rest of a request of known size, no more: rounding it up to a read chunk
        // would outgrow a buffer sized to the request, copying the request into a new one.
        size_t want = kReadChunk;
        if (state_ == State::kOpen && needed_ > in_.size()) want = needed_ - in_.size();
        if (read_step_ > 0) want = read_step_;  // A request read in steps.
        in_.Reserve(want);
        n = Receive(in_.write_ptr(), read_step_ > 0 ? want : in_.writable_size());
      }
      if (n == kWouldBlock) {
        WakeForTheRest();
        return;
      }
      if (n < 0) {
        state_ = State::kDead;
        return;
      }
      if (n == 0) {
        peer_done_ = true;
        if (state_ == State::kLingering) {
          state_ = State::kDead;
          return;
        }
        state_ = State::kClosing;
        Pump();
        return;
      }
      last_activity_ = Clock::now();
      loop_->ctx_->metrics->BytesReceived(handler_->proto(), static_cast<uint64_t>(n) + tail);
      if (payload) {
        PayloadReceived(static_cast<size_t>(n));
        in_.Commit(tail);
        if (payload_left_ == 0) Pump();
        continue;
      }
      if (in_.empty() && !mid_request_) request_began_ = last_activity_;
      in_.Commit(static_cast<size_t>(n));
      if (state_ == State::kLingering) {
        in_.Consume(in_.size());
        continue;
      }
      Pump();
    }
    // Reading stops with input maybe still queued (this event's reads spent, or replies backed
    // up): the mark must not exceed what the request still needs, or the rest (or the next
    // request) would not wake the loop. Set for a payload's first bytes, a 1 MiB mark outlived
    // it when the reads ended on its last byte (an 8 MiB S3 part is 32 reads of 256 KiB) or
    // with less than 1 MiB of it to come: such a request waited a second for RecoverFromLowWater.
    if (state_ == State::kOpen) WakeForTheRest();
  }

  // Asks the kernel to wake the loop only when the rest of a partly received request has come
  // (up to kMaxLowWater), not for each segment of it. Plaintext only: TLS records do not map
  // onto request bytes.
  void WakeForTheRest() {
    size_t low = 1;
    if (tls_ == nullptr && !low_water_off_ && state_ == State::kOpen && ExpectedInput() > 0) {
      low = std::min(ExpectedInput(), kMaxLowWater);
    }
    if (low == low_water_) return;
    int value = static_cast<int>(low);
    if (setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &value, sizeof(value)) == 0) low_water_ = low;
  }

  // A request that took longer than server.slow_request_ms from its first byte read to its
  // reply queued is logged with where the time went.
  void TraceIfSlow(Clock::time_point handling, size_t bytes) {
    const uint32_t slow_ms = loop_->ctx_->config->slow_request_ms;
    const Clock::time_point now = Clock::now();
    if (slow_ms == 0 || now - request_began_ < std::chrono::milliseconds(slow_ms)) return;
    loop_->ctx_->metrics->SlowRequest(handler_->proto());
    loop_->LogTrace("kvtierd: slow " + std::string(ProtoName(handler_->proto())) +
                    " request of " + std::to_string(bytes) + " bytes: " +
                    Millis(now - request_began_) + " from its first byte to its reply, " +
                    Millis(handling - request_began_) + " receiving it or waiting for its turn " +
                    "(SO_RCVLOWAT " + std::to_string(low_water_) + "), " +
                    Millis(now - handling) + " handling it");
  }

  static std::string Millis(Clock::duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) +
           " ms";
  }

  // A whole request is buffered and may be handled.
  bool CanHandle() const {
    return state_ == State::kOpen && payload_left_ == 0 && !in_.empty() && needed_ <= in_.size();
  }

  // Input bytes the request being received still needs, when known; 0 between requests.
  size_t ExpectedInput() const {
    if (payload_left_ > 0) return payload_left_ + (payload_goes_on_ ? rest_at_least_ : 0);
    if (mid_request_) return std::max<size_t>(rest_at_least_, 1);
    return !in_.empty() && needed_ > in_.size() ? needed_ - in_.size() : 0;
  }

  // No request received in part or waiting to be read, and no reply left to write.
  bool BetweenRequests() const {
    if (!in_.empty() || payload_left_ > 0 || mid_request_ || !out_.empty() || TlsPending()) {
      return false;
    }
    int unread = -1;
    return ioctl(fd_, FIONREAD, &unread) == 0 && unread == 0;
  }

  // Where the next payload bytes are read: the handler's target, or the loop's discard buffer.
  std::byte* PayloadDestination() {
    if (target_.data() != nullptr) return target_.data() + target_filled_;
    if (loop_->discard_ == nullptr) loop_->discard_ = std::make_unique<std::byte[]>(kDiscardChunk);
    return loop_->discard_.get();
  }

  // A request's payload begins (ProtocolHandler::Outcome::kReceivePayload); the part of it
  // already read into the input buffer goes to its place first.
  void BeginPayload(size_t bytes) {
    payload_left_ = bytes;
    if (!mid_request_) payload_received_ = 0;
    NextTarget();
    while (payload_left_ > 0 && !in_.empty() && state_ == State::kOpen) {
      const size_t n = std::min(in_.size(), target_.size() - target_filled_);
      if (target_.data() != nullptr) {
        std::memcpy(target_.data() + target_filled_, in_.data().data(), n);
      }
      in_.Consume(n);
      PayloadReceived(n);
    }
  }

  void PayloadReceived(size_t n) {
    target_filled_ += n;
    payload_left_ -= n;
    payload_received_ += n;
    if (target_filled_ < target_.size()) return;
    if (payload_left_ > 0) {
      handler_->PayloadFilled(&out_);
      NextTarget();
      return;
    }
    if (payload_goes_on_) {  // The handler reads the rest of the request from the input.
      handler_->PayloadFilled(&out_);
      return;
    }
    const Clock::time_point handling = Clock::now();
    handler_->PayloadFilled(&out_);  // The last: the reply is queued.
    TraceIfSlow(handling, payload_received_);
    payload_received_ = 0;  // The next request's deadline counts its own bytes only.
  }

  // Whether the request at the front goes on after outcome `o` (read in steps, its reply not yet
  // queued), and what the handler said of its rest.
  void GoesOn(const ProtocolHandler::Outcome& o, bool goes_on) {
    mid_request_ = goes_on;
    rest_at_least_ = goes_on ? o.bytes_needed : 0;
    read_step_ = goes_on ? o.read_step : 0;
  }

  void NextTarget() {
    target_ = handler_->PayloadTarget();
    target_filled_ = 0;
    if (target_.empty() || target_.size() > payload_left_) {
      // A handler that lost count of its payload: the stream cannot be followed any further.
      loop_->LogTrace("kvtierd: a " + std::string(ProtoName(handler_->proto())) +
                      " handler gave a payload target of " + std::to_string(target_.size()) +
                      " bytes with " + std::to_string(payload_left_) + " left; closing");
      payload_left_ = 0;
      state_ = State::kDead;
    }
  }

  // Handles the buffered requests while replies fit, writes, and goes on while writing made
  // room: requests already read raise no readiness event, so stopping with room in the output
  // and an empty socket buffer would leave them unanswered for good.
  void Pump() {
    for (;;) {
      while (CanHandle() && out_.pending_bytes() <= MaxOutput()) {
        const Clock::time_point handling = Clock::now();
        ProtocolHandler::Outcome o = handler_->HandleOne(in_.data(), &out_);
        if (o.action == ProtocolHandler::Outcome::Action::kNeedMore) {
          needed_ = std::max(o.bytes_needed, in_.size() + 1);
          break;
        }
        if (o.action == ProtocolHandler::Outcome::Action::kReceivePayload) {
          needed_ = 0;
          in_.Consume(o.consumed);
          payload_goes_on_ = o.request_goes_on;
          GoesOn(o, payload_goes_on_);
          BeginPayload(o.payload_bytes);
          if (payload_left_ > 0) break;
          if (!in_.empty() && !mid_request_) request_began_ = Clock::now();
          continue;
        }
        if (o.action == ProtocolHandler::Outcome::Action::kConsumed) {
          in_.Consume(o.consumed);
          payload_received_ += o.consumed;
          GoesOn(o, true);
          needed_ = in_.size() + 1;  // Whatever comes next.
          continue;
        }
        TraceIfSlow(handling, o.consumed);
        GoesOn(o, false);
        payload_received_ = 0;
        needed_ = 0;
        if (o.action == ProtocolHandler::Outcome::Action::kClose) {
          in_.Consume(in_.size());
          state_ = State::kClosing;
          break;
        }
        in_.Consume(o.consumed);
        if (!in_.empty()) request_began_ = Clock::now();  // The next request is here already.
      }
      Flush();
      if (!CanHandle() || out_.pending_bytes() > MaxOutput()) return;
    }
  }

  static constexpr ssize_t kWouldBlock = -2;

  // Receive for plaintext, into `buf` and then up to `tail_n` bytes at `tail`, in one read.
  ssize_t ReceiveWithTail(std::byte* buf, size_t n, std::byte* tail, size_t tail_n) {
    iovec iov[2] = {{buf, n}, {tail, tail_n}};
    ssize_t r = readv(fd_, iov, 2);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return kWouldBlock;
    return r;
  }

  // Reads into buf: the byte count, 0 at end of stream, kWouldBlock, or -1 on error. Input of a
  // TLS connection is decrypted here; a lingering connection's input is discarded raw.
  ssize_t Receive(std::byte* buf, size_t n) {
    if (tls_ == nullptr || state_ == State::kLingering) {
      ssize_t r = read(fd_, buf, n);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return kWouldBlock;
      return r;
    }
    size_t got = 0;
    switch (tls_->Read(buf, n, &got)) {
      case TlsSession::Io::kOk: return static_cast<ssize_t>(got);
      case TlsSession::Io::kWantRead: return kWouldBlock;
      case TlsSession::Io::kWantWrite:
        read_wants_write_ = true;
        return kWouldBlock;
      case TlsSession::Io::kClosed: return 0;
      case TlsSession::Io::kError: break;
    }
    return -1;
  }

  void Handshake() {
    switch (tls_->Handshake()) {
      case TlsSession::Io::kOk:
        state_ = State::kOpen;
        last_activity_ = Clock::now();
        // The client's first request may have arrived with its last handshake message.
        OnReadable();
        return;
      case TlsSession::Io::kWantRead:
        handshake_wants_write_ = false;
        return;
      case TlsSession::Io::kWantWrite:
        handshake_wants_write_ = true;
        return;
      case TlsSession::Io::kClosed:
        state_ = State::kDead;
        return;
      case TlsSession::Io::kError:
        break;
    }
    // Not TLS 1.3, not TLS at all (a plaintext client), or a bad client certificate. OpenSSL
    // has sent its alert; close our side and discard input until the peer closes, so that the
    // alert is not destroyed by a reset.
    loop_->ctx_->metrics->ProtocolError(handler_->proto());
    tls_.reset();
    state_ = State::kClosing;
    Flush();
  }

  void Flush() {
    while (!out_.empty() && state_ != State::kDead && write_budget_ > 0) {
      const size_t pending = out_.pending_bytes();
      const size_t allowed = pending <= write_budget_ + kShortTail ? pending : write_budget_;
      Result<size_t> n = tls_ != nullptr ? out_.WriteTo(tls_.get()) : out_.WriteTo(fd_, allowed);
      if (!n.ok()) {
        state_ = State::kDead;
        return;
      }
      if (*n == 0) break;
      write_budget_ -= std::min(write_budget_, *n);
      last_activity_ = Clock::now();
      loop_->ctx_->metrics->BytesSent(handler_->proto(), *n);
    }
    if (state_ == State::kClosing && out_.empty()) {
      if (tls_ != nullptr) {
        tls_->Shutdown();  // close_notify; from here on the socket is only drained.
        tls_.reset();
      }
      if (peer_done_) {
        state_ = State::kDead;
      } else {
        shutdown(fd_, SHUT_WR);
        in_.Consume(in_.size());
        state_ = State::kLingering;
      }
    }
  }

  EventLoop* loop_;
  int fd_;
  std::unique_ptr<ProtocolHandler> handler_;
  std::unique_ptr<TlsSession> tls_;  // Null for plaintext, and once the session is over.
  State state_ = State::kOpen;
  bool handshake_wants_write_ = false;
  bool read_wants_write_ = false;  // A TLS read needs the socket writable to progress.
  bool peer_done_ = false;
  size_t needed_ = 0;  // Input bytes the handler needs before it can make progress.
  // The payload being received in place (ProtocolHandler::PayloadTarget): bytes still to come,
  // bytes received so far, and the handler's current target with how much of it is filled.
  size_t payload_left_ = 0;
  size_t payload_received_ = 0;
  bool payload_goes_on_ = false;  // The request goes on after the payload (Outcome::request_goes_on).
  // A request read in steps (kConsumed, or a payload that the request goes on after) is under
  // way: the bytes its rest has at least, and the most read into the input at a time.
  bool mid_request_ = false;
  size_t rest_at_least_ = 0;
  size_t read_step_ = 0;
  std::span<std::byte> target_;
  size_t target_filled_ = 0;
  size_t write_budget_ = kWritesPerEvent;  // Left to write in this readiness event.
  size_t low_water_ = 1;  // The socket's SO_RCVLOWAT.
  bool low_water_off_ = false;  // A raised mark once left this connection unwoken.
  InputBuffer in_;
  OutputQueue out_;
  Clock::time_point last_activity_;
  Clock::time_point request_began_;  // First byte of the request at the front of in_.
  Clock::time_point unread_until_;  // Last seen not reading for backpressure.
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_CONNECTION_H_
