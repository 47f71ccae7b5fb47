#include <cstring>

#include "kvtier/store.h"

namespace kvtier {

BlockHandle::BlockHandle(std::vector<std::byte> owned)
    : size_(owned.size()), owned_(std::move(owned)) {
  extents_.emplace_back(owned_.data(), owned_.size());
}

BlockHandle& BlockHandle::operator=(BlockHandle&& other) noexcept {
  if (this != &other) {
    Release();
    releaser_ = std::exchange(other.releaser_, nullptr);
    entry_ = other.entry_;
    size_ = std::exchange(other.size_, 0);
    extents_ = std::move(other.extents_);
    owned_ = std::move(other.owned_);  // Moving keeps the buffer, so extents_ stay valid.
  }
  return *this;
}

void BlockHandle::CopyTo(std::span<std::byte> out) const {
  size_t offset = 0;
  for (std::span<const std::byte> piece : extents_) {
    std::memcpy(out.data() + offset, piece.data(), piece.size());
    offset += piece.size();
  }
}

void BlockHandle::Release() {
  if (releaser_ != nullptr) std::exchange(releaser_, nullptr)->ReleaseLease(entry_);
  extents_.clear();
  owned_.clear();
  size_ = 0;
}

}  // namespace kvtier
