#include "src/server/buffers.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace kvtier::server {

void InputBuffer::Reserve(size_t n) {
  if (capacity_ - end_ >= n) return;
  size_t live = end_ - begin_;
  if (capacity_ - live >= n && begin_ > 0) {
    std::memmove(buf_.get(), buf_.get() + begin_, live);
  } else {
    size_t want = std::max(live + n, capacity_ * 2);
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
  if (handle.size() == 0) return;
  Piece& p = pieces_.emplace_back();
  p.is_lease = true;
  p.size = handle.size();
  p.lease = std::move(handle);
  pending_ += p.size;
}

Result<size_t> OutputQueue::WriteTo(int fd) {
  constexpr size_t kMaxIov = 64;
  iovec iov[kMaxIov];
  size_t n_iov = 0;
  for (const Piece& p : pieces_) {
    if (n_iov == kMaxIov) break;
    size_t skip = p.sent;
    if (!p.is_lease) {
      iov[n_iov++] = {const_cast<char*>(p.bytes.data()) + skip, p.size - skip};
      continue;
    }
    for (std::span<const std::byte> extent : p.lease.extents()) {
      if (skip >= extent.size()) {
        skip -= extent.size();
        continue;
      }
      if (n_iov == kMaxIov) break;
      iov[n_iov++] = {const_cast<std::byte*>(extent.data()) + skip, extent.size() - skip};
      skip = 0;
    }
  }
  if (n_iov == 0) return size_t{0};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n_iov;
  ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return size_t{0};
    return Status::Unavailable(std::string("write to client failed: ") + std::strerror(errno));
  }
  size_t written = static_cast<size_t>(n);
  pending_ -= written;
  size_t left = written;
  while (left > 0) {
    Piece& p = pieces_.front();
    size_t take = std::min(left, p.size - p.sent);
    p.sent += take;
    left -= take;
    if (p.sent == p.size) pieces_.pop_front();
  }
  return written;
}

void OutputQueue::Clear() {
  pieces_.clear();
  pending_ = 0;
}

}  // namespace kvtier::server
