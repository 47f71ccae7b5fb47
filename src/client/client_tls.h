// TLS 1.3 under one connection of the C++ client, over a connected TCP socket.
//
// The client reads on its reader thread while other threads write, and an OpenSSL session
// must not be used by two threads at once: every OpenSSL call here runs under a mutex on a
// non-blocking socket, and the waiting (poll) happens outside it. ReadExact is called by one
// thread at a time; WriteAll too (the caller serialises writers); the two may overlap.

#ifndef KVTIER_CLIENT_CLIENT_TLS_H_
#define KVTIER_CLIENT_CLIENT_TLS_H_

#include <sys/uio.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/client.h"
#include "kvtier/status.h"
#include "src/common/mutex.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace kvtier::client {

// Why a connection on which nothing moved for `timeout_ms` while a request waited was given up.
inline std::string NoProgressMessage(int timeout_ms) {
  return "no reply from kvtierd for " + std::to_string(timeout_ms) +
         " ms (ClientOptions::io_timeout_ms); connection closed";
}

class TlsStream {
 public:
  // Runs the handshake on connected socket `fd` (not owned; made non-blocking), verifying
  // the server as `options` say; `host` is the endpoint's host, the name checked when
  // options.server_name is empty. Unavailable when the handshake fails (a server that does not
  // speak TLS 1.3, or a certificate that does not verify, with OpenSSL's reason).
  static Result<std::unique_ptr<TlsStream>> Connect(int fd, const ClientTlsOptions& options,
                                                    std::string_view host);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Waits for the socket at most timeout_ms at a time: a write gives up then (Unavailable), a
  // read asks `stalled` whether to; calls `progress` whenever bytes move. Call before the
  // reader starts.
  void SetStallCheck(int timeout_ms, std::function<bool()> stalled, std::function<void()> progress) {
    stall_timeout_ms_ = timeout_ms;
    stalled_ = std::move(stalled);
    progress_ = std::move(progress);
  }

  // Reads exactly n bytes. Unavailable on EOF or error.
  Status ReadExact(std::byte* out, size_t n);
  // Writes every byte of iov, in order.
  Status WriteAll(std::span<const iovec> iov);

 private:
  TlsStream(int fd, SSL_CTX* ctx, SSL* ssl) : fd_(fd), ctx_(ctx), ssl_(ssl) {}
  // Writes [data, data + n) completely.
  Status WriteBytes(const void* data, size_t n);
  // Waits until fd_ is readable (want_write false) or writable.
  Status Wait(bool want_write);

  const int fd_;
  int stall_timeout_ms_ = -1;
  std::function<bool()> stalled_;
  std::function<void()> progress_;
  SSL_CTX* const ctx_;
  Mutex mu_;
  SSL* const ssl_ ABSL_PT_GUARDED_BY(mu_);
  std::string record_;  // WriteAll's gathering buffer (used by the one writer at a time).
};

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_CLIENT_TLS_H_
