#include "src/client/client_tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/common/openssl_errors.h"

namespace kvtier::client {
namespace {

// One TLS record carries at most 16 KiB.
constexpr size_t kRecord = 16 << 10;
// OpenSSL's read-ahead buffer.
constexpr size_t kReadBufferBytes = 256 << 10;
// Upper bound on the handshake; a server that accepts and says nothing fails it.
constexpr int kHandshakeTimeoutMs = 30'000;

bool IsIpAddress(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

bool WaitFd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = 0;  // Timed out: no error.
    return r > 0;
  }
}

}  // namespace

Result<std::unique_ptr<TlsStream>> TlsStream::Connect(int fd, const ClientTlsOptions& options,
                                                      std::string_view host) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return Status::Internal("SSL_CTX_new: " + DrainOpenSslErrors());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Many records per read(2). ReadExact polls only after WANT_READ, which OpenSSL reports only
  // once its buffer is empty, so read-ahead never hides input from the poll.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kReadBufferBytes);
  auto fail = [&](Status s) {
    SSL_CTX_free(ctx);
    return s;
  };
  if (options.verify_peer) {
    int ok = options.ca_file.empty()
                 ? SSL_CTX_set_default_verify_paths(ctx)
                 : SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr);
    if (ok != 1) {
      return fail(Status::InvalidArgument("TLS CA file " + options.ca_file + ": " +
                                          DrainOpenSslErrors()));
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  }
  if (!options.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail(Status::InvalidArgument("TLS client certificate/key: " + DrainOpenSslErrors()));
    }
  }
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return fail(Status::Internal("SSL_new: " + DrainOpenSslErrors()));
  std::unique_ptr<TlsStream> stream(new TlsStream(fd, ctx, ssl));
  std::string name = options.server_name.empty() ? std::string(host) : options.server_name;
  if (IsIpAddress(name)) {
    if (options.verify_peer) X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, name.c_str());
    if (options.verify_peer) SSL_set1_host(ssl, name.c_str());
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  SSL_set_fd(ssl, fd);
  for (;;) {
    ERR_clear_error();
    int r = SSL_connect(ssl);
    if (r == 1) break;
    int err = SSL_get_error(ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (!WaitFd(fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, kHandshakeTimeoutMs)) {
        return Status::Unavailable("TLS handshake with kvtierd timed out");
      }
      continue;
    }
    std::string why = DrainOpenSslErrors();
    long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      why += std::string(why.empty() ? "" : "; ") + "certificate: " +
             X509_verify_cert_error_string(verify);
    }
    if (why.empty()) why = "the server closed the connection (does it speak TLS 1.3?)";
    return Status::Unavailable("TLS handshake with kvtierd failed: " + why);
  }
  return stream;
}

TlsStream::~TlsStream() {
  // No close_notify: the socket is being torn down (and may be shut down already); the server
  // treats EOF as the end of the session.
  SSL_free(ssl_);
  SSL_CTX_free(ctx_);
}

Status TlsStream::Wait(bool want_write) {
  while (!WaitFd(fd_, want_write ? POLLOUT : POLLIN, stall_timeout_ms_)) {
    if (errno != 0) return Status::Unavailable(std::string("poll: ") + std::strerror(errno));
    // Unwritable that long: kvtierd took no byte. Unreadable: stalled if a request waits.
    if (want_write || (stalled_ && stalled_())) {
      return Status::Unavailable(NoProgressMessage(stall_timeout_ms_));
    }
  }
  return Status::OK();
}

Status TlsStream::ReadExact(std::byte* out, size_t n) {
  while (n > 0) {
    size_t got = 0;
    int r, err;
    std::string why;
    {
      MutexLock lock(&mu_);
      ERR_clear_error();
      errno = 0;
      r = SSL_read_ex(ssl_, out, n, &got);
      err = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl_, r);
      if (err == SSL_ERROR_SSL) why = DrainOpenSslErrors();
    }
    switch (err) {
      case SSL_ERROR_NONE:
        if (progress_) progress_();
        out += got;
        n -= got;
        break;
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        KVTIER_RETURN_IF_ERROR(Wait(err == SSL_ERROR_WANT_WRITE));
        break;
      case SSL_ERROR_ZERO_RETURN:
        return Status::Unavailable("kvtierd closed the connection");
      case SSL_ERROR_SYSCALL:
        if (errno == 0) return Status::Unavailable("kvtierd closed the connection");
        return Status::Unavailable(std::string("read from kvtierd failed: ") + std::strerror(errno));
      default:
        return Status::Unavailable("TLS read from kvtierd failed: " + why);
    }
  }
  return Status::OK();
}

Status TlsStream::WriteBytes(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t wrote = 0;
    int r, err;
    std::string why;
    {
      MutexLock lock(&mu_);
      ERR_clear_error();
      errno = 0;
      r = SSL_write_ex(ssl_, p, n, &wrote);
      err = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl_, r);
      if (err == SSL_ERROR_SSL) why = DrainOpenSslErrors();
    }
    switch (err) {
      case SSL_ERROR_NONE:
        if (progress_) progress_();
        p += wrote;
        n -= wrote;
        break;
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        // Retried with the same bytes, as OpenSSL requires.
        KVTIER_RETURN_IF_ERROR(Wait(err == SSL_ERROR_WANT_WRITE));
        break;
      case SSL_ERROR_SYSCALL:
        return Status::Unavailable(std::string("write to kvtierd failed: ") +
                                   (errno != 0 ? std::strerror(errno) : "connection closed"));
      default:
        return Status::Unavailable("TLS write to kvtierd failed: " + why);
    }
  }
  return Status::OK();
}

Status TlsStream::WriteAll(std::span<const iovec> iov) {
  // Small pieces (headers, directories, small values) are gathered into whole records; large
  // values go to OpenSSL in place.
  record_.clear();
  for (const iovec& v : iov) {
    if (v.iov_len >= kRecord) {
      if (!record_.empty()) {
        KVTIER_RETURN_IF_ERROR(WriteBytes(record_.data(), record_.size()));
        record_.clear();
      }
      KVTIER_RETURN_IF_ERROR(WriteBytes(v.iov_base, v.iov_len));
      continue;
    }
    record_.append(static_cast<const char*>(v.iov_base), v.iov_len);
    if (record_.size() >= kRecord) {
      KVTIER_RETURN_IF_ERROR(WriteBytes(record_.data(), record_.size()));
      record_.clear();
    }
  }
  if (!record_.empty()) KVTIER_RETURN_IF_ERROR(WriteBytes(record_.data(), record_.size()));
  return Status::OK();
}

}  // namespace kvtier::client
