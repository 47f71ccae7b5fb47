// Checksums of stored bytes: XXH3-64 (libxxhash). Fast enough to run on every block at disk
// speed (tens of GB/s per core); not a cryptographic MAC (encryption adds its own tag).

#ifndef KVTIER_COMMON_CHECKSUM_H_
#define KVTIER_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier {

uint64_t Checksum64(std::span<const std::byte> data);

}  // namespace kvtier

#endif  // KVTIER_COMMON_CHECKSUM_H_
