// The native protocol's framing and the little-endian codec its message bodies use.
// docs/protocol.md is the specification; this file and messages.h implement it.
//
// Everything here is pure: no I/O, no allocation beyond the outputs the caller asks for, and
// every decoder accepts arbitrary bytes (a malformed input is an error, never a crash).
// Thread safety: free functions are thread-safe; a BodyWriter or BodyReader is used by one
// thread at a time.

#ifndef KVTIER_PROTOCOL_WIRE_H_
#define KVTIER_PROTOCOL_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::protocol {

// The four bytes "KVT1" read as a little-endian u32.
inline constexpr uint32_t kMagic = 0x3154564B;
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderSize = 20;

enum class Opcode : uint8_t {
  kHello = 0x01,
  kAuth = 0x02,
  kPing = 0x03,
  kLookupPrefix = 0x10,
  kGetMany = 0x11,
  kPutMany = 0x12,
  kExists = 0x13,
  kDelete = 0x14,
  kPin = 0x15,
  kUnpin = 0x16,
  kPrefetch = 0x17,
  kStats = 0x18,
  kDeleteSession = 0x19,
  kDeleteTenant = 0x1A,
  kFlush = 0x1B,
  // State beside KV (docs/state.md; kFeatureState).
  kPutAtomic = 0x1C,
  kLookupResume = 0x1D,
  kHintSession = 0x1E,  // kFeatureHints.
  // Shared-memory fast path (docs/protocol.md; Unix socket with SHARED_MEMORY granted only).
  kShmAttach = 0x20,
  kShmGet = 0x21,
  kShmRelease = 0x22,
  kShmAlloc = 0x23,
  kShmCommit = 0x24,
  kShmAbort = 0x25,
  kShmReserve = 0x26,
  kShmPut = 0x27,
  // Server only: a connection-level error (bad framing); the server closes after sending it.
  kError = 0x7F,
};

// True for the opcodes a client may send.
bool IsRequestOpcode(uint8_t opcode);
// "GET_MANY", ...; "UNKNOWN" for anything else.
std::string_view OpcodeName(uint8_t opcode);

// Header flags.
inline constexpr uint16_t kFlagResponse = 0x0001;

// Feature bits negotiated by HELLO: the server grants the intersection of what the client asks
// for and what it supports. Unknown bits are ignored.
inline constexpr uint64_t kFeaturePrefetch = 1u << 0;      // PREFETCH hints are accepted.
// The SHM_* requests (the G2 arena mapped by the client). Granted on the Unix socket only, and
// not part of kServerFeatures: the native handler adds it per connection.
inline constexpr uint64_t kFeatureSharedMemory = 1u << 1;
// PUT_MANY entries may carry a session id and a dtype (entry flags bits 1 and 2), and the
// DELETE_SESSION / DELETE_TENANT requests exist. A server without it rejects those flags as
// unknown and answers the opcodes UNIMPLEMENTED.
inline constexpr uint64_t kFeatureSessions = 1u << 2;
// PUT_MANY entries may carry the engine's own hash of the block (entry flags bit 3), which the
// server's KV events use to name it. A server without it rejects the flag as unknown.
inline constexpr uint64_t kFeatureEngineHashes = 1u << 3;
// PUT_MANY and PUT_ATOMIC entries may carry a block role (entry flags bit 4), and the
// PUT_ATOMIC and LOOKUP_RESUME requests exist. A server without it rejects the flag as unknown
// and answers the opcodes UNIMPLEMENTED.
inline constexpr uint64_t kFeatureState = 1u << 4;
// DELETE_SESSION and DELETE_TENANT replies carry the G4 objects removed after the G3 count. A
// reply without it is the original encoding, which clients still read.
inline constexpr uint64_t kFeatureSharedReport = 1u << 5;
// The HINT_SESSION request exists (Store::HintSession). A server without it answers the opcode
// UNIMPLEMENTED.
inline constexpr uint64_t kFeatureHints = 1u << 6;
inline constexpr uint64_t kServerFeatures = kFeaturePrefetch | kFeatureSessions |
                                            kFeatureEngineHashes | kFeatureState |
                                            kFeatureSharedReport | kFeatureHints;

struct FrameHeader {
  uint8_t version = kVersion;
  uint8_t opcode = 0;
  uint16_t flags = 0;
  uint64_t request_id = 0;
  uint32_t body_length = 0;
};

// Writes the 20-byte header to `out`.
void EncodeHeader(const FrameHeader& header, std::byte out[kHeaderSize]);

struct DecodedFrame {
  enum class State {
    kNeedMore,  // `data` holds no complete frame yet; `frame_size` is its size when known.
    kFrame,     // `header` and `body` describe the first frame; it spans `frame_size` bytes.
    kError,     // The stream is not a valid frame sequence; `error` says why. Close it.
  };
  State state = State::kNeedMore;
  FrameHeader header;
  std::span<const std::byte> body;  // A view into the caller's `data`.
  size_t frame_size = 0;            // Header plus body, once the header has been read.
  Status error;
};

// Decodes the frame at the front of `data`. Bad magic, an unsupported version or a body longer
// than `max_body_bytes` are errors (kError), reported as soon as the header is complete, before
// any body byte arrives. Unknown opcodes are not a framing error: the caller answers them.
DecodedFrame DecodeFrame(std::span<const std::byte> data, uint32_t max_body_bytes);

// Appends little-endian values to a byte string.
class BodyWriter {
 public:
  explicit BodyWriter(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U16(uint16_t v);
  void U32(uint32_t v);
  void U64(uint64_t v);
  void Bytes(std::span<const std::byte> bytes);
  void Key(const BlockKey& key);
  // u16 length, then the bytes; longer strings are truncated to 65535 bytes.
  void String16(std::string_view s);
  // A status: code u8, message as String16.
  void StatusValue(const Status& status);

 private:
  std::string* out_;
};

// Reads little-endian values from a byte span. The first read past the end (or of a malformed
// value) sets a sticky failure; later reads return zeros. Check ok() once at the end.
class BodyReader {
 public:
  explicit BodyReader(std::span<const std::byte> data) : data_(data) {}
  uint8_t U8();
  uint16_t U16();
  uint32_t U32();
  uint64_t U64();
  BlockKey Key();
  std::string String16();
  // A view of the next n bytes (empty on failure). Valid while the underlying data lives.
  std::span<const std::byte> Bytes(size_t n);
  Status StatusValue();

  bool ok() const { return ok_; }
  size_t remaining() const { return data_.size() - pos_; }
  // True when every byte was consumed and nothing failed.
  bool done() const { return ok_ && pos_ == data_.size(); }

 private:
  bool Take(size_t n, const std::byte** p);
  std::span<const std::byte> data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Status codes travel as their kvtier::StatusCode value; an unknown value decodes as kUnknown.
StatusCode StatusCodeFromWire(uint8_t value);

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_WIRE_H_
