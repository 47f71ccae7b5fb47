// AlignedBuffer: heap memory aligned for direct I/O (kDirectIoAlignment), zero-filled.
//
// Thread safety: none; a value type owned by one thread at a time.

#ifndef KVTIER_ENV_ALIGNED_BUFFER_H_
#define KVTIER_ENV_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

#include "kvtier/env.h"

namespace kvtier {

// Rounds `n` up to a multiple of kDirectIoAlignment.
constexpr uint64_t AlignUp(uint64_t n) {
  return (n + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `size` is rounded up to kDirectIoAlignment. An allocation failure leaves the buffer empty.
  explicit AlignedBuffer(size_t size) {
    size_ = static_cast<size_t>(AlignUp(size));
    if (size_ != 0) {
      data_.reset(static_cast<std::byte*>(std::aligned_alloc(kDirectIoAlignment, size_)));
      if (data_ == nullptr) {
        size_ = 0;
      } else {
        std::memset(data_.get(), 0, size_);
      }
    }
  }

  std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_.get(), size_}; }
  // The first `n` bytes. REQUIRES: n <= size().
  std::span<std::byte> prefix(size_t n) const { return {data_.get(), n}; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

}  // namespace kvtier

#endif  // KVTIER_ENV_ALIGNED_BUFFER_H_
