#include "src/server/handover.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "src/server/net.h"

namespace kvtier::server {
namespace {

constexpr std::string_view kRequest = "kvtier-takeover 1\n";
constexpr std::string_view kReplyPrefix = "kvtier-handover 1";
// The reply's flags are in this order; a kvtierd from before the S3 listener sends the first
// four only, which a newer one accepts (kMinRoles).
constexpr int kRoles = 5;
constexpr int kMinRoles = 4;

int* Role(ListenerFds* fds, int i) {
  int* roles[kRoles] = {&fds->native, &fds->resp, &fds->http, &fds->unix_socket, &fds->s3};
  return roles[i];
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Waits until `fd` is readable or `deadline` passes (false).
bool WaitReadable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

std::string HandoverPath(const std::string& data_dir) { return data_dir + "/kvtierd.handover"; }

Result<std::unique_ptr<HandoverListener>> HandoverListener::Start(
    const std::string& path, ListenerFds listeners, std::function<void()> handed_over) {
  Result<int> fd = ListenUnix(path);
  if (!fd.ok()) return fd.status();
  // Whoever connects gets the listening sockets: only this user (and root) may.
  if (::chmod(path.c_str(), 0600) != 0) {
    Status s = Status::Unavailable(Errno("chmod 0600 " + path));
    ::close(*fd);
    return s;
  }
  std::unique_ptr<HandoverListener> h(new HandoverListener());
  h->path_ = path;
  h->listeners_ = listeners;
  h->on_handed_over_ = std::move(handed_over);
  h->listen_fd_ = *fd;
  h->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (h->stop_fd_ < 0) return Status::Internal(Errno("eventfd"));
  h->thread_ = std::thread([p = h.get()] { p->Run(); });
  return h;
}

HandoverListener::~HandoverListener() {
  uint64_t one = 1;
  ssize_t ignored = write(stop_fd_, &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    if (!handed_over_.load()) unlink(path_.c_str());
  }
  close(stop_fd_);
  if (successor_ >= 0) close(successor_);  // Last: the new kvtierd may open the Store now.
}

void HandoverListener::Run() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    if (Serve(conn)) {
      successor_ = conn;
      handed_over_.store(true);
      on_handed_over_();
      return;
    }
    close(conn);
  }
}

bool HandoverListener::Serve(int conn) {
  // The socket's mode keeps others out; the peer's credentials say so again.
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
      (peer.uid != ::geteuid() && peer.uid != 0)) {
    return false;
  }
  // A peer that connects and says nothing (ListenUnix's liveness probe does) is not waited
  // for long.
  timeval tv{5, 0};
  setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string request(kRequest.size(), '\0');
  size_t got = 0;
  while (got < request.size()) {
    ssize_t n = recv(conn, request.data() + got, request.size() - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  if (request != kRequest) return false;
  // The path goes first, so that the new kvtierd can listen there for the next upgrade.
  unlink(path_.c_str());
  std::string reply(kReplyPrefix);
  std::vector<int> fds;
  for (int i = 0; i < kRoles; ++i) {
    const int fd = *Role(&listeners_, i);
    reply += fd >= 0 ? " 1" : " 0";
    if (fd >= 0) fds.push_back(fd);
  }
  reply += '\n';
  iovec iov{reply.data(), reply.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kRoles), 0);
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return sendmsg(conn, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(reply.size());
}

Result<ListenerFds> TakeOver(const std::string& path, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("handover socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(Errno("socket"));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status s = Status::FailedPrecondition(
        Errno("no running kvtierd to take over from at " + path +
              " (is one running with this data_dir?)"));
    close(fd);
    return s;
  }
  ListenerFds out;
  auto fail = [&](Status s) {
    for (int i = 0; i < kRoles; ++i) {
      if (*Role(&out, i) >= 0) close(*Role(&out, i));
    }
    close(fd);
    return s;
  };
  if (send(fd, kRequest.data(), kRequest.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(kRequest.size())) {
    return fail(Status::Unavailable(Errno("asking " + path + " for its sockets")));
  }
  if (!WaitReadable(fd, deadline)) {
    return fail(Status::DeadlineExceeded("the running kvtierd did not hand over its sockets"));
  }
  char text[64] = {};
  iovec iov{text, sizeof(text) - 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kRoles), 0);
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    fds.resize(count);
    std::memcpy(fds.data(), CMSG_DATA(c), sizeof(int) * count);
  }
  int flags[kRoles] = {};
  if (n <= 0 || std::sscanf(text, "kvtier-handover 1 %d %d %d %d %d", &flags[0], &flags[1],
                            &flags[2], &flags[3], &flags[4]) < kMinRoles) {
    for (int f : fds) close(f);
    return fail(Status::Unavailable("the running kvtierd answered the handover with '" +
                                    std::string(text) + "'"));
  }
  size_t next = 0;
  for (int i = 0; i < kRoles; ++i) {
    if (flags[i] != 0 && next < fds.size()) *Role(&out, i) = fds[next++];
  }
  // The old kvtierd closes the connection once it has drained and closed its Store.
  for (;;) {
    if (!WaitReadable(fd, deadline)) {
      return fail(Status::DeadlineExceeded("the kvtierd handing over did not stop within " +
                                           std::to_string(timeout.count()) + " s"));
    }
    char byte;
    ssize_t r = recv(fd, &byte, 1, 0);
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) break;
  }
  close(fd);
  return out;
}

}  // namespace kvtier::server
