#include "src/common/checksum.h"

#include <xxhash.h>

namespace kvtier {

uint64_t Checksum64(std::span<const std::byte> data) {
  return XXH3_64bits(data.data(), data.size());
}

}  // namespace kvtier
