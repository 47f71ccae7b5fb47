#include "src/server/buffers.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/server/tls.h"

namespace kvtier::server {

void InputBuffer::Reserve(size_t n) {
  if (capacity_ - end_ >= n) return;
  size_t live = end_ - begin_;
  if (capacity_ - live >= n && begin_ > 0) {
    std::memmove(buf_.get(), buf_.get() + begin_, live);
  } else {
    // Doubling, but not past the capacity kept between requests when the request fits in it:
    // a buffer grown past it is released after each request, and the next one grows it again,
    // copying what it has received each time.
    size_t want = std::max(live + n, capacity_ < kRetainedCapacity
                                         ? std::min(capacity_ * 2, kRetainedCapacity)
                                         : capacity_ * 2);
    auto grown = std::make_unique_for_overwrite<std::byte[]>(want);
    if (live > 0) std::memcpy(grown.get(), buf_.get() + begin_, live);
    buf_ = std::move(grown);
    capacity_ = want;
  }
  begin_ = 0;
  end_ = live;
}

void InputBuffer::Consume(size_t n) {
  begin_ += n;
  if (begin_ == end_) {
    begin_ = end_ = 0;
    if (capacity_ > kRetainedCapacity) {
      buf_.reset();
      capacity_ = 0;
    }
  }
}

void OutputQueue::Append(std::string_view bytes) {
  if (bytes.empty()) return;
  // Append only to a piece nothing of which is sent yet, so that sent bytes are freed promptly.
  if (pieces_.empty() || pieces_.back().is_lease || pieces_.back().sent > 0) {
    pieces_.emplace_back();
  }
  Piece& p = pieces_.back();
  p.bytes.append(bytes);
  p.size = p.bytes.size();
  pending_ += bytes.size();
}

void OutputQueue::AppendLease(BlockHandle handle) {
  const size_t size = handle.size();
  AppendLease(std::move(handle), 0, size);
}

void OutputQueue::AppendLease(BlockHandle handle, size_t offset, size_t length) {
  if (length == 0) return;
  Piece& p = pieces_.emplace_back();
  p.is_lease = true;
  p.start = offset;
  p.size = length;
  p.lease = std::move(handle);
  pending_ += p.size;
}

void OutputQueue::AppendWithFds(std::string_view bytes, std::initializer_list<int> fds) {
  if (bytes.empty()) return;
  Piece& p = pieces_.emplace_back();
  p.bytes.assign(bytes);
  p.size = p.bytes.size();
  for (int fd : fds) {
    if (p.pass_count < kMaxPassedFds) p.pass_fds[p.pass_count++] = fd;
  }
  pending_ += p.size;
}

size_t OutputQueue::Gather(iovec* iov, size_t max_iov) const {
  size_t n_iov = 0;
  for (const Piece& p : pieces_) {
    if (n_iov == max_iov) break;
    // A descriptor goes with its piece's first byte: that byte starts a sendmsg of its own.
    if (p.pass_count > 0 && p.sent == 0 && n_iov > 0) break;
    if (!p.is_lease) {
      iov[n_iov++] = {const_cast<char*>(p.bytes.data()) + p.sent, p.size - p.sent};
      continue;
    }
    size_t skip = p.start + p.sent;
    size_t left = p.size - p.sent;
    for (std::span<const std::byte> extent : p.lease.extents()) {
      if (skip >= extent.size()) {
        skip -= extent.size();
        continue;
      }
      if (n_iov == max_iov || left == 0) break;
      const size_t take = std::min(extent.size() - skip, left);
      iov[n_iov++] = {const_cast<std::byte*>(extent.data()) + skip, take};
      left -= take;
      skip = 0;
    }
  }
  return n_iov;
}

void OutputQueue::Advance(size_t written) {
  pending_ -= written;
  size_t left = written;
  while (left > 0) {
    Piece& p = pieces_.front();
    size_t take = std::min(left, p.size - p.sent);
    p.sent += take;
    left -= take;
    if (p.sent == p.size) pieces_.pop_front();
  }
}

Result<size_t> OutputQueue::WriteTo(int fd, size_t max_bytes) {
  constexpr size_t kMaxIov = 64;
  iovec iov[kMaxIov];
  size_t n_iov = Gather(iov, kMaxIov);
  if (n_iov == 0 || max_bytes == 0) return size_t{0};
  size_t total = 0;
  for (size_t i = 0; i < n_iov; ++i) {
    if (total + iov[i].iov_len >= max_bytes) {
      iov[i].iov_len = max_bytes - total;
      n_iov = i + 1;
      break;
    }
    total += iov[i].iov_len;
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n_iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  if (const Piece& front = pieces_.front(); front.pass_count > 0 && front.sent == 0) {
    const size_t fd_bytes = sizeof(int) * front.pass_count;
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(fd_bytes);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fd_bytes);
    std::memcpy(CMSG_DATA(c), front.pass_fds.data(), fd_bytes);
  }
  ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return size_t{0};
    return Status::Unavailable(std::string("write to client failed: ") + std::strerror(errno));
  }
  Advance(static_cast<size_t>(n));
  return static_cast<size_t>(n);
}

Result<size_t> OutputQueue::WriteTo(TlsSession* tls) {
  // One TLS record carries at most 16 KiB of data.
  constexpr size_t kRecord = 16 << 10;
  constexpr size_t kMaxIov = 64;
  iovec iov[kMaxIov];
  size_t n_iov = Gather(iov, kMaxIov);
  if (n_iov == 0) return size_t{0};
  // The bytes handed to the session always start at the first unsent byte and are chosen the
  // same way each time, so a write retried after kWantWrite starts with the same bytes, as
  // OpenSSL requires.
  const void* data = iov[0].iov_base;
  size_t size = iov[0].iov_len;
  if (size < kRecord) {
    tls_record_.clear();
    for (size_t i = 0; i < n_iov && tls_record_.size() < kRecord; ++i) {
      size_t take = std::min(iov[i].iov_len, kRecord - tls_record_.size());
      tls_record_.append(static_cast<const char*>(iov[i].iov_base), take);
    }
    data = tls_record_.data();
    size = tls_record_.size();
  }
  size_t wrote = 0;
  switch (tls->Write(data, size, &wrote)) {
    case TlsSession::Io::kOk:
      Advance(wrote);
      return wrote;
    case TlsSession::Io::kWantRead:
    case TlsSession::Io::kWantWrite:
      return size_t{0};
    case TlsSession::Io::kClosed:
      return Status::Unavailable("client closed the TLS session");
    case TlsSession::Io::kError:
      break;
  }
  return Status::Unavailable("TLS write to client failed: " + tls->error());
}

void OutputQueue::Clear() {
  pieces_.clear();
  pending_ = 0;
}

}  // namespace kvtier::server
