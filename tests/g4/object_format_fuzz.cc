// libFuzzer target for the G4 object decoder (STYLE.md 14): an object read from shared
// storage (anything another node, a bug or an attacker left there) must decode or fail with
// a status, never crash or read out of bounds. Built with clang only:
//   kvtier_g4_object_fuzz [corpus_dir] -max_total_time=60

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "src/common/checksum.h"
#include "src/tier/shared/object_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier;  // NOLINT: a fuzz entry point, not a header.
  std::vector<std::byte> object(reinterpret_cast<const std::byte*>(data),
                                reinterpret_cast<const std::byte*>(data) + size);
  size_t header_bytes = 0;
  static_cast<void>(g4::DecodeObjectHeader(object, &header_bytes));
  static_cast<void>(g4::OpenObject(nullptr, "t", BlockKey(), object));
  // Vouch for the header checksum, so that fuzzing reaches the field checks behind it.
  if (size >= 16) {
    uint16_t length = 0;
    std::memcpy(&length, object.data() + 6, 2);
    if (length >= 8 && length <= size) {
      const uint64_t sum = Checksum64(std::span(object).first(length - 8));
      std::memcpy(object.data() + length - 8, &sum, 8);
      bool bad = false;
      static_cast<void>(
          g4::VerifyHeader("t", BlockKey(), object, object.size(), &header_bytes, &bad));
      static_cast<void>(g4::OpenObject(nullptr, "t", BlockKey(), object, &bad));
    }
  }
  return 0;
}
