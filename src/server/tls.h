// TLS 1.3 for kvtierd's TCP listeners (docs/protocol.md, "TLS"), with OpenSSL.
//
// A TlsContext holds the server certificate, key and client-certificate policy; it is built
// once at start and shared read-only by every event loop (OpenSSL's SSL_CTX is thread-safe for
// creating sessions). A TlsSession is one connection's TLS state over a non-blocking socket and
// belongs to that connection's event-loop thread. Nothing here blocks: every operation that
// would block says which readiness (read or write) it waits for.

#ifndef KVTIER_SERVER_TLS_H_
#define KVTIER_SERVER_TLS_H_

#include <cstddef>
#include <memory>
#include <string>

#include "kvtier/status.h"
#include "src/server/config.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace kvtier::server {

// OpenSSL's read-ahead buffer per TLS connection (allocated on its first read, kept).
inline constexpr size_t kTlsReadBufferBytes = 128 << 10;

class TlsContext {
 public:
  // Loads the certificate chain and key (and the client CA file when given), and allows
  // TLS 1.3 only. InvalidArgument naming the file and OpenSSL's reason on failure.
  static Result<std::unique_ptr<TlsContext>> Create(const TlsConfig& config);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* get() const { return ctx_; }

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

class TlsSession {
 public:
  enum class Io {
    kOk,         // Progress: the handshake finished, or bytes were read or written.
    kWantRead,   // Call again once the socket is readable.
    kWantWrite,  // Call again once the socket is writable.
    kClosed,     // The peer closed the TLS session (close_notify or EOF).
    kError,      // Protocol or socket error; error() says what. Close the connection.
  };

  // A server-side session on accepted socket `fd` (not owned). nullptr when OpenSSL cannot
  // allocate one.
  static std::unique_ptr<TlsSession> Accept(const TlsContext& ctx, int fd);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  Io Handshake();
  // Reads up to n bytes into buf; *got receives the count when kOk.
  Io Read(void* buf, size_t n, size_t* got);
  // Writes up to n bytes (at least one record's worth when it can); *wrote receives the count
  // when kOk. After kWantRead/kWantWrite, the next call must start with the same bytes.
  Io Write(const void* buf, size_t n, size_t* wrote);
  // True when OpenSSL holds input (read ahead from the socket) that Read has not returned yet:
  // epoll will not report it, so the caller keeps reading while this is true.
  bool HasPending() const;
  // Sends close_notify, best effort (never waits).
  void Shutdown();
  // What failed, for logs and metrics ("" when nothing did).
  const std::string& error() const { return error_; }

 private:
  explicit TlsSession(SSL* ssl) : ssl_(ssl) {}
  Io Classify(int ret);
  SSL* ssl_;
  std::string error_;
};

// OpenSSL's queued errors as one line (and clears the queue).
std::string TlsErrors();

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_TLS_H_
