// Listening sockets for kvtierd. All sockets returned are non-blocking and close-on-exec.

#ifndef KVTIER_SERVER_NET_H_
#define KVTIER_SERVER_NET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::server {

struct HostPort {
  std::string host;  // Without IPv6 brackets.
  uint16_t port = 0;
};

// Splits "host:port" or "[v6]:port". InvalidArgument when malformed.
Result<HostPort> SplitHostPort(std::string_view address);

// A listening TCP socket on `address` ("127.0.0.1:7380"; port 0 picks one). *bound_port
// receives the port actually bound. Unavailable (naming the address and errno) on failure.
Result<int> ListenTcp(std::string_view address, uint16_t* bound_port);

// A user's or group's id from its name (getpwnam_r, getgrnam_r); nullopt for an unknown name.
std::optional<uint32_t> UserIdOf(const std::string& name);
std::optional<uint32_t> GroupIdOf(const std::string& name);
// A file mode written in octal, at most 4 digits ("0660", "660"); nullopt for anything else.
std::optional<uint32_t> ParseFileMode(std::string_view octal);

// Who may connect to a Unix socket: its file's mode ("0660"; "" = what the umask gives) and
// group (a name or a number; "" = the daemon's).
struct UnixSocketAccess {
  std::string mode;
  std::string group;
};

// A listening Unix stream socket at `path`. A stale socket file left by a dead kvtierd is
// replaced; a path another live process is listening on is FailedPrecondition. `access` is
// applied before the socket listens, so nobody connects under a looser mode. InvalidArgument
// for a mode that is not octal or an unknown group.
Result<int> ListenUnix(const std::string& path, const UnixSocketAccess& access = {});

// The port a TCP socket is bound to (0 when it is not a TCP socket).
uint16_t BoundPort(int fd);
// Whether a TCP socket is bound where `address` ("host:port") says: to an address `host`
// resolves to, and to `port` unless it is 0 (any port). False for an address that does not
// resolve.
bool BoundTo(int fd, std::string_view address);
// The path a Unix socket is bound to ("" when it is not a named Unix socket).
std::string BoundPath(int fd);

// Who is on the other end of a connection, as the kernel says.
struct PeerInfo {
  // On this host: a Unix socket or a loopback address (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104).
  bool local = false;
  bool unix_socket = false;
  // A Unix socket's peer credentials (SO_PEERCRED) at connect time.
  bool has_credentials = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  // Who it is, for rate limits and the audit log: "tcp:<address>" (no port) or "unix:uid=<n>".
  std::string id;
};

PeerInfo DescribePeer(int fd);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_NET_H_
