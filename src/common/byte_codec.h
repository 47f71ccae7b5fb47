// Fixed-layout little-endian encoding of on-storage headers (G3 records and footers, G4
// objects): a writer into a buffer the caller has sized, and a bounds-checked reader.

#ifndef KVTIER_SRC_COMMON_BYTE_CODEC_H_
#define KVTIER_SRC_COMMON_BYTE_CODEC_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace kvtier {

// The formats are little-endian and integers are copied as the host holds them.
static_assert(std::endian::native == std::endian::little, "kvtier's formats need a little-endian host");

// `n` rounded up to a multiple of 8 (headers keep their fields 8-byte aligned).
constexpr size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// REQUIRES: the buffer has room for everything written (the caller sizes it from the layout).
class ByteWriter {
 public:
  explicit ByteWriter(std::span<std::byte> out) : out_(out) {}
  void Raw(const void* p, size_t n) {
    std::memcpy(out_.data() + pos_, p, n);
    pos_ += n;
  }
  void U8(uint8_t v) { Raw(&v, 1); }
  void U16(uint16_t v) { Raw(&v, 2); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  // Zero-fills up to offset `pos`.
  void PadTo(size_t pos) {
    std::memset(out_.data() + pos_, 0, pos - pos_);
    pos_ = pos;
  }
  size_t pos() const { return pos_; }

 private:
  std::span<std::byte> out_;
  size_t pos_ = 0;
};

// Reading past the end yields zeros and turns ok() false; it never reads out of bounds.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}
  void Raw(void* p, size_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  uint8_t U8() { return Get<uint8_t>(); }
  uint16_t U16() { return Get<uint16_t>(); }
  uint32_t U32() { return Get<uint32_t>(); }
  uint64_t U64() { return Get<uint64_t>(); }
  void Skip(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return;
    }
    pos_ += n;
  }
  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }

 private:
  template <typename T>
  T Get() {
    T v = 0;
    Raw(&v, sizeof(T));
    return v;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_COMMON_BYTE_CODEC_H_
