// Checksums of stored bytes: XXH3-64, and XXH3-128 where a digest names content (libxxhash).
// Fast enough to run on every block at disk speed (tens of GB/s per core); not a cryptographic
// MAC (encryption adds its own tag).

#ifndef KVTIER_COMMON_CHECKSUM_H_
#define KVTIER_COMMON_CHECKSUM_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

struct XXH3_state_s;

namespace kvtier {

uint64_t Checksum64(std::span<const std::byte> data);

// XXH3-128 of `data` in its canonical (big-endian) byte order: a digest that names content (an
// S3 object's ETag), where 64 bits would collide among billions of objects.
std::array<uint8_t, 16> Digest128(std::span<const std::byte> data);

namespace checksum_internal {
// libxxhash's streaming state, freed by XXH3_freeState.
struct FreeXxh3State {
  void operator()(XXH3_state_s* state) const;
};
using Xxh3State = std::unique_ptr<XXH3_state_s, FreeXxh3State>;
}  // namespace checksum_internal

// Checksum64 of bytes that arrive in pieces: Value() equals Checksum64 of their concatenation.
// Lets a reader checksum each piece while it is still in cache instead of the whole buffer
// again afterwards.
class Checksum64Stream {
 public:
  Checksum64Stream();
  ~Checksum64Stream();
  Checksum64Stream(const Checksum64Stream&) = delete;
  Checksum64Stream& operator=(const Checksum64Stream&) = delete;

  void Update(std::span<const std::byte> data);
  uint64_t Value() const;

 private:
  checksum_internal::Xxh3State state_;
};

// Digest128 of bytes that arrive in pieces, as Checksum64Stream is to Checksum64.
class Digest128Stream {
 public:
  Digest128Stream();
  ~Digest128Stream();
  Digest128Stream(const Digest128Stream&) = delete;
  Digest128Stream& operator=(const Digest128Stream&) = delete;

  void Update(std::span<const std::byte> data);
  std::array<uint8_t, 16> Value() const;

 private:
  checksum_internal::Xxh3State state_;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_CHECKSUM_H_
