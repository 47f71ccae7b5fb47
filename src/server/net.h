// Listening sockets for kvtierd. All sockets returned are non-blocking and close-on-exec.

#ifndef KVTIER_SERVER_NET_H_
#define KVTIER_SERVER_NET_H_

#include <cstdint>
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

// A listening Unix stream socket at `path`. A stale socket file left by a dead kvtierd is
// replaced; a path another live process is listening on is FailedPrecondition.
Result<int> ListenUnix(const std::string& path);

// The port a TCP socket is bound to (0 when it is not a TCP socket).
uint16_t BoundPort(int fd);

// True when the peer of connected socket `fd` is on this host: a Unix socket or a loopback
// address (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104).
bool IsLocalPeer(int fd);

// True when connected socket `fd` is a Unix-domain socket (which can pass descriptors).
bool IsUnixSocket(int fd);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_NET_H_
