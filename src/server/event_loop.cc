#include "src/server/event_loop.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvtier/env.h"
#include "src/server/connection.h"
#include "src/server/metrics.h"
#include "src/server/net.h"
#include "src/server/tls.h"

namespace kvtier::server {

namespace {

// Accepts per readiness event of a listener.
constexpr int kAcceptsPerEvent = 256;

}  // namespace

std::string RefusalMessage(Proto proto) {
  switch (proto) {
    case Proto::kResp:
      return "-ERR max number of clients reached\r\n";
    case Proto::kHttp:
      return "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 27\r\nConnection: close\r\n\r\n"
             "max number of clients open\n";
    case Proto::kS3:
      return S3RefusalMessage();
    case Proto::kNative:
    case Proto::kCount:
      break;
  }
  return "";
}

EventLoop::EventLoop(const ServerContext* ctx, std::vector<EventLoop*>* loops)
    : ctx_(ctx), loops_(loops) {}

EventLoop::~EventLoop() {
  connections_.clear();
  closed_.clear();
  for (const Listener& l : listeners_) close(l.fd);
  {
    MutexLock lock(&mu_);
    for (const Pending& p : adopted_) close(p.fd);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

Status EventLoop::Init() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return Status::Internal(std::string("epoll/eventfd: ") + std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    return Status::Internal(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  return Status::OK();
}

void EventLoop::AddListener(int fd, Proto proto, bool tls) {
  listeners_.push_back({fd, proto, tls});
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = listeners_.size();  // 1-based; 0 is the wake-up fd.
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void EventLoop::Start() { thread_ = std::thread([this] { Run(); }); }

void EventLoop::Adopt(int fd, Proto proto, PeerInfo peer, bool tls) {
  {
    MutexLock lock(&mu_);
    adopted_.push_back({fd, proto, std::move(peer), tls});
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;  // The eventfd only fails when its counter would overflow: already awake.
}

void EventLoop::BeginShutdown() {
  shutting_down_.store(true);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void EventLoop::Join() {
  if (thread_.joinable()) thread_.join();
}

void EventLoop::Accept(const Listener& listener) {
  for (int i = 0; i < kAcceptsPerEvent; ++i) {
    int fd = accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        Env::Default()->Log(std::string("kvtierd: accept failed: ") + std::strerror(errno));
      }
      return;
    }
    if (ctx_->metrics->ActiveConnections() >= ctx_->config->max_connections) {
      ctx_->metrics->ConnectionRefused(listener.proto);
      std::string msg = RefusalMessage(listener.proto);
      ssize_t ignored = send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)ignored;  // Best effort: the client is being turned away either way.
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // Fails harmlessly on Unix.
    EventLoop* target = (*loops_)[next_loop_++ % loops_->size()];
    target->Adopt(fd, listener.proto, DescribePeer(fd), listener.tls);
  }
}

void EventLoop::TakeAdopted() {
  uint64_t counter;
  ssize_t ignored = read(wake_fd_, &counter, sizeof(counter));
  (void)ignored;  // Nothing to read is fine: the queue below is the real state.
  std::vector<Pending> adopted;
  {
    MutexLock lock(&mu_);
    adopted.swap(adopted_);
  }
  for (const Pending& p : adopted) {
    if (shutting_down_.load()) {
      close(p.fd);
      continue;
    }
    std::unique_ptr<ProtocolHandler> handler;
    switch (p.proto) {
      case Proto::kNative: handler = NewNativeHandler(ctx_, p.peer); break;
      case Proto::kResp: handler = NewRespHandler(ctx_, p.peer); break;
      case Proto::kS3: handler = NewS3Handler(ctx_, p.peer); break;
      case Proto::kHttp:
      case Proto::kCount: handler = NewHttpHandler(ctx_, p.peer); break;
    }
    std::unique_ptr<TlsSession> tls;
    if (p.tls) {
      tls = TlsSession::Accept(*ctx_->tls, p.fd);
      if (tls == nullptr) {
        Env::Default()->Log("kvtierd: cannot create a TLS session: " + TlsErrors());
        close(p.fd);
        continue;
      }
    }
    auto conn = std::make_unique<Connection>(this, p.fd, std::move(handler), std::move(tls));
    Connection* raw = conn.get();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = raw;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, p.fd, &ev) != 0) continue;  // conn closes the fd.
    raw->registered_events = EPOLLIN;
    connections_.emplace(raw, std::move(conn));
  }
}

void EventLoop::UpdateInterest(Connection* conn) {
  if (conn->state() == Connection::State::kDead) {
    CloseConnection(conn);
    return;
  }
  uint32_t want = conn->WantedEvents();
  if (want == conn->registered_events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = conn;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn->fd(), &ev);
  conn->registered_events = want;
}

void EventLoop::LogTrace(const std::string& line) {
  const Clock::time_point now = Clock::now();
  if (now - last_trace_ < std::chrono::seconds(1)) {
    ++traces_held_back_;
    return;
  }
  last_trace_ = now;
  std::string held;
  if (traces_held_back_ > 0) {
    held = " (and " + std::to_string(traces_held_back_) + " lines held back since the last)";
    traces_held_back_ = 0;
  }
  Env::Default()->Log(line + held);
}

void EventLoop::CloseConnection(Connection* conn) {
  auto it = connections_.find(conn);
  if (it == connections_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd(), nullptr);
  closed_.push_back(std::move(it->second));
  connections_.erase(it);
}

void EventLoop::SweepIdle(Clock::time_point now) {
  const auto idle = std::chrono::seconds(ctx_->config->idle_timeout_seconds);
  const auto request_timeout = std::chrono::seconds(ctx_->config->request_timeout_seconds);
  const uint64_t rate = std::max<uint64_t>(ctx_->config->min_request_rate, 1);
  const auto linger = idle.count() > 0 ? std::min<std::chrono::seconds>(idle, kMaxLinger) : kMaxLinger;
  std::vector<Connection*> all;
  for (auto& [raw, conn] : connections_) {
    auto quiet = now - raw->last_activity();
    if (raw->state() == Connection::State::kOpen) {
      raw->RecoverFromLowWater(now);
      if (idle.count() > 0 && quiet > idle) {
        raw->OnIdle();
      } else if (request_timeout.count() > 0 && raw->RequestOverdue(now, request_timeout, rate)) {
        raw->OnRequestTimeout();
      }
    } else if (raw->state() == Connection::State::kHandshaking) {
      // A handshake gets the idle timeout (or the linger bound when there is none).
      if (quiet > (idle.count() > 0 ? idle : std::chrono::seconds(kMaxLinger))) raw->Kill();
    } else if (quiet > linger) {
      raw->Kill();
    }
    all.push_back(raw);
  }
  for (Connection* c : all) UpdateInterest(c);
}

void EventLoop::Run() {
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  bool draining = false;
  Clock::time_point drain_deadline;
  Clock::time_point next_sweep = Clock::now() + std::chrono::seconds(1);
  const std::chrono::microseconds busy_poll(ctx_->config->busy_poll_us);
  Clock::time_point poll_until;  // Past: sleep at once.
  for (;;) {
    if (!draining && shutting_down_.load()) {
      draining = true;
      drain_deadline = Clock::now() + std::chrono::seconds(ctx_->config->shutdown_grace_seconds);
      for (const Listener& l : listeners_) close(l.fd);
      listeners_.clear();
      std::vector<Connection*> all;
      for (auto& [raw, conn] : connections_) all.push_back(raw);
      for (Connection* c : all) {
        c->BeginClose();
        UpdateInterest(c);
      }
    }
    if (draining && (connections_.empty() || Clock::now() >= drain_deadline)) break;
    closed_.clear();

    // server.busy_poll_us: after a wakeup that brought requests, poll before sleeping.
    int n = 0;
    while (Clock::now() < poll_until && (n = epoll_wait(epoll_fd_, events, kMaxEvents, 0)) == 0) {
      sched_yield();
    }
    if (n == 0) n = epoll_wait(epoll_fd_, events, kMaxEvents, 1000);
    if (n > 0 && busy_poll.count() > 0) poll_until = Clock::now() + busy_poll;
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == 0) {
        TakeAdopted();
      } else if (tag <= listeners_.size()) {
        Accept(listeners_[tag - 1]);
      } else {
        auto* conn = static_cast<Connection*>(events[i].data.ptr);
        if (!connections_.count(conn)) continue;  // Closed earlier in this batch.
        conn->OnEvents(events[i].events);
        UpdateInterest(conn);
      }
    }
    Clock::time_point now = Clock::now();
    if (now >= next_sweep) {
      SweepIdle(now);
      next_sweep = now + std::chrono::seconds(1);
    }
  }
  closed_.clear();
  connections_.clear();
}

}  // namespace kvtier::server
