#include "src/server/net.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

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

std::optional<uint32_t> UserIdOf(const std::string& name) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return found->pw_uid;
}

std::optional<uint32_t> GroupIdOf(const std::string& name) {
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  if (getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return found->gr_gid;
}

std::optional<uint32_t> ParseFileMode(std::string_view octal) {
  if (octal.empty() || octal.size() > 4 || octal.find_first_not_of("01234567") != std::string_view::npos) {
    return std::nullopt;
  }
  uint32_t mode = 0;
  for (char c : octal) mode = mode * 8 + static_cast<uint32_t>(c - '0');
  return mode;
}

namespace {

Status ApplyAccess(const std::string& path, const UnixSocketAccess& access) {
  if (!access.group.empty()) {
    uint32_t number = 0;
    const char* end = access.group.data() + access.group.size();
    const auto [at, error] = std::from_chars(access.group.data(), end, number);
    const std::optional<uint32_t> gid =
        error == std::errc() && at == end ? std::optional<uint32_t>(number) : GroupIdOf(access.group);
    if (!gid) return Status::InvalidArgument("server.unix_socket_group: no group '" + access.group + "'");
    if (chown(path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(*gid)) != 0) {
      return Status::Unavailable(Errno("cannot give " + path + " to group " + access.group));
    }
  }
  if (!access.mode.empty()) {
    std::optional<uint32_t> mode = ParseFileMode(access.mode);
    if (!mode) {
      return Status::InvalidArgument("server.unix_socket_mode must be octal like \"0660\", got '" +
                                     access.mode + "'");
    }
    if (chmod(path.c_str(), static_cast<mode_t>(*mode)) != 0) {
      return Status::Unavailable(Errno("cannot set the mode of " + path));
    }
  }
  return Status::OK();
}

}  // namespace

Result<int> ListenUnix(const std::string& path, const UnixSocketAccess& access) {
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
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status s = Status::Unavailable(Errno("cannot listen on " + path));
    close(fd);
    return s;
  }
  // Nobody can connect before listen(): set who may, then listen.
  if (Status s = ApplyAccess(path, access); !s.ok() || listen(fd, 1024) != 0) {
    if (s.ok()) s = Status::Unavailable(Errno("cannot listen on " + path));
    close(fd);
    unlink(path.c_str());
    return s;
  }
  return fd;
}

bool BoundTo(int fd, std::string_view address) {
  Result<HostPort> hp = SplitHostPort(address);
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (!hp.ok() || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return false;
  if (hp->port != 0 && hp->port != BoundPort(fd)) return false;
  addrinfo hints{};
  hints.ai_family = local.ss_family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(hp->host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool same = false;
  for (addrinfo* ai = res; ai != nullptr && !same; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      same = reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr.s_addr ==
             reinterpret_cast<sockaddr_in*>(&local)->sin_addr.s_addr;
    } else if (ai->ai_family == AF_INET6) {
      same = std::memcmp(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr,
                         &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr,
                         sizeof(in6_addr)) == 0;
    }
  }
  freeaddrinfo(res);
  return same;
}

std::string BoundPath(int fd) {
  sockaddr_un local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 ||
      local.sun_family != AF_UNIX || len <= offsetof(sockaddr_un, sun_path) ||
      local.sun_path[0] == '\0') {
    return "";
  }
  return std::string(local.sun_path, strnlen(local.sun_path, sizeof(local.sun_path)));
}

uint16_t BoundPort(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return 0;
  if (local.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  if (local.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  return 0;
}

PeerInfo DescribePeer(int fd) {
  PeerInfo info;
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
    info.id = "unknown";
    return info;
  }
  char text[INET6_ADDRSTRLEN] = "?";
  if (peer.ss_family == AF_UNIX) {
    info.local = true;
    info.unix_socket = true;
    ucred cred{};
    socklen_t cred_len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0) {
      info.has_credentials = true;
      info.uid = cred.uid;
      info.gid = cred.gid;
      info.id = "unix:uid=" + std::to_string(cred.uid);
    } else {
      info.id = "unix";
    }
  } else if (peer.ss_family == AF_INET) {
    const in_addr& a = reinterpret_cast<sockaddr_in*>(&peer)->sin_addr;
    info.local = (ntohl(a.s_addr) >> 24) == 127;
    inet_ntop(AF_INET, &a, text, sizeof(text));
    info.id = std::string("tcp:") + text;
  } else if (peer.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr;
    info.local = IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
    inet_ntop(AF_INET6, &a, text, sizeof(text));
    info.id = std::string("tcp:") + text;
  }
  return info;
}

}  // namespace kvtier::server
