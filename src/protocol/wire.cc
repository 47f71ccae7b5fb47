#include "src/protocol/wire.h"

#include <cstring>

namespace kvtier::protocol {
namespace {

template <typename T>
void PutLe(std::byte* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}

template <typename T>
T GetLe(const std::byte* in) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(std::to_integer<uint8_t>(in[i])) << (8 * i);
  return v;
}

template <typename T>
void AppendLe(std::string* out, T v) {
  std::byte buf[sizeof(T)];
  PutLe(buf, v);
  out->append(reinterpret_cast<const char*>(buf), sizeof(T));
}

}  // namespace

bool IsRequestOpcode(uint8_t opcode) {
  switch (static_cast<Opcode>(opcode)) {
    case Opcode::kHello:
    case Opcode::kAuth:
    case Opcode::kPing:
    case Opcode::kLookupPrefix:
    case Opcode::kGetMany:
    case Opcode::kPutMany:
    case Opcode::kExists:
    case Opcode::kDelete:
    case Opcode::kPin:
    case Opcode::kUnpin:
    case Opcode::kPrefetch:
    case Opcode::kStats:
    case Opcode::kDeleteSession:
    case Opcode::kDeleteTenant:
    case Opcode::kFlush:
    case Opcode::kPutAtomic:
    case Opcode::kLookupResume:
    case Opcode::kHintSession:
    case Opcode::kShmAttach:
    case Opcode::kShmGet:
    case Opcode::kShmRelease:
    case Opcode::kShmAlloc:
    case Opcode::kShmCommit:
    case Opcode::kShmAbort:
    case Opcode::kShmReserve:
    case Opcode::kShmPut:
      return true;
    case Opcode::kError:
      return false;
  }
  return false;
}

std::string_view OpcodeName(uint8_t opcode) {
  switch (static_cast<Opcode>(opcode)) {
    case Opcode::kHello: return "HELLO";
    case Opcode::kAuth: return "AUTH";
    case Opcode::kPing: return "PING";
    case Opcode::kLookupPrefix: return "LOOKUP_PREFIX";
    case Opcode::kGetMany: return "GET_MANY";
    case Opcode::kPutMany: return "PUT_MANY";
    case Opcode::kExists: return "EXISTS";
    case Opcode::kDelete: return "DELETE";
    case Opcode::kPin: return "PIN";
    case Opcode::kUnpin: return "UNPIN";
    case Opcode::kPrefetch: return "PREFETCH";
    case Opcode::kStats: return "STATS";
    case Opcode::kDeleteSession: return "DELETE_SESSION";
    case Opcode::kDeleteTenant: return "DELETE_TENANT";
    case Opcode::kFlush: return "FLUSH";
    case Opcode::kPutAtomic: return "PUT_ATOMIC";
    case Opcode::kLookupResume: return "LOOKUP_RESUME";
    case Opcode::kHintSession: return "HINT_SESSION";
    case Opcode::kShmAttach: return "SHM_ATTACH";
    case Opcode::kShmGet: return "SHM_GET";
    case Opcode::kShmRelease: return "SHM_RELEASE";
    case Opcode::kShmAlloc: return "SHM_ALLOC";
    case Opcode::kShmCommit: return "SHM_COMMIT";
    case Opcode::kShmAbort: return "SHM_ABORT";
    case Opcode::kShmReserve: return "SHM_RESERVE";
    case Opcode::kShmPut: return "SHM_PUT";
    case Opcode::kError: return "ERROR";
  }
  return "UNKNOWN";
}

void EncodeHeader(const FrameHeader& header, std::byte out[kHeaderSize]) {
  PutLe<uint32_t>(out, kMagic);
  out[4] = static_cast<std::byte>(header.version);
  out[5] = static_cast<std::byte>(header.opcode);
  PutLe<uint16_t>(out + 6, header.flags);
  PutLe<uint64_t>(out + 8, header.request_id);
  PutLe<uint32_t>(out + 16, header.body_length);
}

DecodedFrame DecodeFrame(std::span<const std::byte> data, uint32_t max_body_bytes) {
  DecodedFrame result;
  if (data.empty()) return result;
  // Check the magic as soon as its bytes arrive, so that a stray client (an HTTP request on the
  // native port, say) gets its error without having to send a whole header.
  size_t magic_bytes = std::min<size_t>(data.size(), 4);
  std::byte magic[4];
  PutLe<uint32_t>(magic, kMagic);
  if (std::memcmp(data.data(), magic, magic_bytes) != 0) {
    result.state = DecodedFrame::State::kError;
    result.error = Status::InvalidArgument("bad frame magic: not the kvtier native protocol");
    return result;
  }
  if (data.size() < kHeaderSize) return result;
  const std::byte* p = data.data();
  FrameHeader& h = result.header;
  h.version = std::to_integer<uint8_t>(p[4]);
  h.opcode = std::to_integer<uint8_t>(p[5]);
  h.flags = GetLe<uint16_t>(p + 6);
  h.request_id = GetLe<uint64_t>(p + 8);
  h.body_length = GetLe<uint32_t>(p + 16);
  if (h.version != kVersion) {
    result.state = DecodedFrame::State::kError;
    result.error = Status::FailedPrecondition("unsupported protocol version " +
                                              std::to_string(h.version) + " (server speaks 1)");
    return result;
  }
  if (h.body_length > max_body_bytes) {
    result.state = DecodedFrame::State::kError;
    result.error = Status::ResourceExhausted(
        "frame body of " + std::to_string(h.body_length) + " bytes exceeds max_frame_bytes " +
        std::to_string(max_body_bytes));
    return result;
  }
  result.frame_size = kHeaderSize + h.body_length;
  if (data.size() < result.frame_size) return result;
  result.state = DecodedFrame::State::kFrame;
  result.body = data.subspan(kHeaderSize, h.body_length);
  return result;
}

void BodyWriter::U16(uint16_t v) { AppendLe(out_, v); }
void BodyWriter::U32(uint32_t v) { AppendLe(out_, v); }
void BodyWriter::U64(uint64_t v) { AppendLe(out_, v); }

void BodyWriter::Bytes(std::span<const std::byte> bytes) {
  out_->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void BodyWriter::Key(const BlockKey& key) {
  out_->append(reinterpret_cast<const char*>(key.data()), kBlockKeySize);
}

void BodyWriter::String16(std::string_view s) {
  if (s.size() > UINT16_MAX) s = s.substr(0, UINT16_MAX);
  U16(static_cast<uint16_t>(s.size()));
  out_->append(s);
}

void BodyWriter::StatusValue(const Status& status) {
  U8(static_cast<uint8_t>(status.code()));
  String16(status.message());
}

bool BodyReader::Take(size_t n, const std::byte** p) {
  if (!ok_ || remaining() < n) {
    ok_ = false;
    return false;
  }
  *p = data_.data() + pos_;
  pos_ += n;
  return true;
}

uint8_t BodyReader::U8() {
  const std::byte* p;
  return Take(1, &p) ? std::to_integer<uint8_t>(*p) : 0;
}

uint16_t BodyReader::U16() {
  const std::byte* p;
  return Take(2, &p) ? GetLe<uint16_t>(p) : 0;
}

uint32_t BodyReader::U32() {
  const std::byte* p;
  return Take(4, &p) ? GetLe<uint32_t>(p) : 0;
}

uint64_t BodyReader::U64() {
  const std::byte* p;
  return Take(8, &p) ? GetLe<uint64_t>(p) : 0;
}

BlockKey BodyReader::Key() {
  const std::byte* p;
  std::array<uint8_t, kBlockKeySize> bytes{};
  if (Take(kBlockKeySize, &p)) std::memcpy(bytes.data(), p, kBlockKeySize);
  return BlockKey(bytes);
}

std::string BodyReader::String16() {
  uint16_t n = U16();
  const std::byte* p;
  if (!Take(n, &p)) return {};
  return std::string(reinterpret_cast<const char*>(p), n);
}

std::span<const std::byte> BodyReader::Bytes(size_t n) {
  const std::byte* p;
  if (!Take(n, &p)) return {};
  return {p, n};
}

Status BodyReader::StatusValue() {
  StatusCode code = StatusCodeFromWire(U8());
  std::string message = String16();
  if (!ok_ || code == StatusCode::kOk) return Status::OK();
  return Status(code, message);
}

StatusCode StatusCodeFromWire(uint8_t value) {
  if (value > static_cast<uint8_t>(StatusCode::kUnauthenticated)) return StatusCode::kUnknown;
  return static_cast<StatusCode>(value);
}

}  // namespace kvtier::protocol
