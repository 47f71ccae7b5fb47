#include "src/server/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtier::server {
namespace {

std::string Errno(std::string_view what) {
  return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

Result<HostPort> SplitHostPort(std::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size()) {
    return Status::InvalidArgument("address '" + std::string(address) + "' is not host:port");
  }
  HostPort hp;
  hp.host = std::string(address.substr(0, colon));
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  uint32_t port = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) {
      return Status::InvalidArgument("bad port in address '" + std::string(address) + "'");
    }
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  if (port > 65535 || hp.host.empty()) {
    return Status::InvalidArgument("bad address '" + std::string(address) + "'");
  }
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

Result<int> ListenTcp(std::string_view address, uint16_t* bound_port) {
  Result<HostPort> hp = SplitHostPort(address);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(hp->port);
  int rc = getaddrinfo(hp->host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return Status::InvalidArgument("cannot resolve '" + std::string(address) + "': " + gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = Errno("socket");
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
      last_error = Errno("bind/listen");
      close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    *bound_port = ntohs(bound.ss_family == AF_INET6
                            ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    freeaddrinfo(res);
    return fd;
  }
  freeaddrinfo(res);
  return Status::Unavailable("cannot listen on " + std::string(address) + ": " + last_error);
}

Result<int> ListenUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("unix socket path too long (max " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + "): " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(Errno("socket"));
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      close(fd);
      return Status::FailedPrecondition(path + " exists and is not a socket");
    }
    // A socket file nobody accepts on is left over from a process that died: replace it.
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (probe >= 0) close(probe);
    if (live) {
      close(fd);
      return Status::FailedPrecondition("another process is serving " + path);
    }
    unlink(path.c_str());
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1024) != 0) {
    Status s = Status::Unavailable(Errno("cannot listen on " + path));
    close(fd);
    return s;
  }
  return fd;
}

uint16_t BoundPort(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return 0;
  if (local.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  if (local.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  return 0;
}

bool IsLocalPeer(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return false;
  if (peer.ss_family == AF_UNIX) return true;
  if (peer.ss_family == AF_INET) {
    uint32_t a = ntohl(reinterpret_cast<sockaddr_in*>(&peer)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (peer.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

bool IsUnixSocket(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
         local.ss_family == AF_UNIX;
}

}  // namespace kvtier::server
