// libFuzzer target for the DiskTier's on-disk decoders (STYLE.md 14): record headers, segment
// headers, trailers and footers read from a damaged or hostile disk must decode or fail with a
// status, never crash or read out of bounds. Built with clang only:
//   kvtier_disk_format_fuzz [corpus_dir] -max_total_time=60

#include <cstddef>
#include <cstdint>
#include <span>

#include "src/common/checksum.h"
#include "src/tier/disk/disk_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::disk;  // NOLINT: a fuzz entry point, not a header.
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  size_t header_bytes = 0;
  static_cast<void>(DecodeRecordHeader(in, &header_bytes));
  static_cast<void>(DecodeSegmentHeader(in));
  kvtier::Result<Trailer> trailer = DecodeTrailer(in);
  // The footer decoder, with a trailer that vouches for the input (checksum and length), so
  // that fuzzing reaches past the checksum check.
  Trailer t;
  t.footer_offset = (1u << 20);
  t.footer_bytes = size;
  t.footer_checksum = kvtier::Checksum64(in);
  static_cast<void>(DecodeFooter(in, t));
  if (trailer.ok()) static_cast<void>(DecodeFooter(in, *trailer));
  return 0;
}
