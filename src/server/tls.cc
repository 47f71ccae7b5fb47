#include "src/server/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>

#include "src/common/openssl_errors.h"

namespace kvtier::server {

std::string TlsErrors() {
  std::string out = DrainOpenSslErrors();
  return out.empty() ? "unknown TLS error" : out;
}

Result<std::unique_ptr<TlsContext>> TlsContext::Create(const TlsConfig& config) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Status::Internal("SSL_CTX_new: " + TlsErrors());
  std::unique_ptr<TlsContext> out(new TlsContext(ctx));
  // TLS 1.3 only: older versions are refused during the handshake.
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1) {
    return Status::Internal("cannot require TLS 1.3: " + TlsErrors());
  }
  // A peer that closes without close_notify is an ordinary end of stream here: every native
  // message is framed, so truncation is detected by the protocol itself.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  // No session tickets: nothing is written after the handshake but replies, so the event loop
  // never has to carry a pending post-handshake write.
  SSL_CTX_set_num_tickets(ctx, 0);
  // Not SSL_MODE_RELEASE_BUFFERS: freeing the read-ahead buffer each time it drains costs an
  // mmap/munmap pair per refill at this size.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read many records per read(2): a 2 MiB value is 128 records. Bytes OpenSSL has buffered
  // are invisible to epoll; the connection drains them itself (TlsSession::HasPending).
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kTlsReadBufferBytes);
  if (SSL_CTX_use_certificate_chain_file(ctx, config.cert_file.c_str()) != 1) {
    return Status::InvalidArgument("tls.cert_file " + config.cert_file + ": " + TlsErrors());
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, config.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return Status::InvalidArgument("tls.key_file " + config.key_file + ": " + TlsErrors());
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return Status::InvalidArgument("tls.key_file does not match tls.cert_file: " + TlsErrors());
  }
  if (!config.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, config.ca_file.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("tls.ca_file " + config.ca_file + ": " + TlsErrors());
    }
    int mode = SSL_VERIFY_PEER;
    if (config.require_client_cert) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, nullptr);
  }
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

std::unique_ptr<TlsSession> TlsSession::Accept(const TlsContext& ctx, int fd) {
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return std::unique_ptr<TlsSession>(new TlsSession(ssl));
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

TlsSession::Io TlsSession::Classify(int ret) {
  int err = SSL_get_error(ssl_, ret);
  switch (err) {
    case SSL_ERROR_WANT_READ: return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE: return Io::kWantWrite;
    case SSL_ERROR_ZERO_RETURN: return Io::kClosed;
    case SSL_ERROR_SYSCALL:
      if (errno == 0) return Io::kClosed;  // EOF without close_notify.
      error_ = std::string("TLS socket error: ") + std::strerror(errno);
      ERR_clear_error();
      return Io::kError;
    default:
      error_ = TlsErrors();
      return Io::kError;
  }
}

TlsSession::Io TlsSession::Handshake() {
  ERR_clear_error();
  errno = 0;
  int r = SSL_do_handshake(ssl_);
  return r == 1 ? Io::kOk : Classify(r);
}

TlsSession::Io TlsSession::Read(void* buf, size_t n, size_t* got) {
  ERR_clear_error();
  errno = 0;
  int r = SSL_read_ex(ssl_, buf, n, got);
  return r == 1 ? Io::kOk : Classify(r);
}

TlsSession::Io TlsSession::Write(const void* buf, size_t n, size_t* wrote) {
  ERR_clear_error();
  errno = 0;
  int r = SSL_write_ex(ssl_, buf, n, wrote);
  return r == 1 ? Io::kOk : Classify(r);
}

bool TlsSession::HasPending() const { return SSL_has_pending(ssl_) == 1; }

void TlsSession::Shutdown() {
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

}  // namespace kvtier::server
