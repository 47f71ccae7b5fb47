#include "src/common/checksum.h"

#include <xxhash.h>

#include <cstdlib>

namespace kvtier {

uint64_t Checksum64(std::span<const std::byte> data) {
  return XXH3_64bits(data.data(), data.size());
}

void Checksum64Stream::FreeState::operator()(XXH3_state_s* state) const {
  XXH3_freeState(state);
}

Checksum64Stream::Checksum64Stream() : state_(XXH3_createState()) {
  if (state_ == nullptr) std::abort();  // Out of memory, as a failed new.
  XXH3_64bits_reset(state_.get());
}

Checksum64Stream::~Checksum64Stream() = default;

void Checksum64Stream::Update(std::span<const std::byte> data) {
  XXH3_64bits_update(state_.get(), data.data(), data.size());
}

uint64_t Checksum64Stream::Value() const { return XXH3_64bits_digest(state_.get()); }

}  // namespace kvtier
