// ContiguousBytes: one span over a block that G2 may have stored in several pieces, for the
// tiers whose writes take one buffer (the demoter's and the uploader's batches).

#ifndef KVTIER_ENGINE_CONTIGUOUS_BYTES_H_
#define KVTIER_ENGINE_CONTIGUOUS_BYTES_H_

#include <cstddef>
#include <span>
#include <vector>

namespace kvtier {

// The only piece itself, or the pieces joined into a new buffer kept in *storage (whose
// elements must not be destroyed while the span is used).
inline std::span<const std::byte> ContiguousBytes(
    const std::vector<std::span<const std::byte>>& pieces,
    std::vector<std::vector<std::byte>>* storage) {
  if (pieces.size() == 1) return pieces[0];
  std::vector<std::byte>& joined = storage->emplace_back();
  for (std::span<const std::byte> piece : pieces) {
    joined.insert(joined.end(), piece.begin(), piece.end());
  }
  return joined;
}

}  // namespace kvtier

#endif  // KVTIER_ENGINE_CONTIGUOUS_BYTES_H_
