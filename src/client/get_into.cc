#include "src/client/get_into.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "src/protocol/wire.h"

namespace kvtier::client {
namespace {

// Bytes read ahead into the scratch buffer while the item list is parsed: a whole small
// directory in one read; the value bytes that come with it are copied out of it.
constexpr size_t kReadAhead = 4096;

// A reply body as it arrives: a scratch window for the item list, direct reads for values.
class Incoming {
 public:
  Incoming(size_t length, const BodyRead& read) : length_(length), read_(read) {}

  // The first failed read, if any: the connection is unusable after it.
  const Status& read_error() const { return read_error_; }

  // Makes the next n bytes available through Take. False when the body ends first (the reply
  // is malformed) or a read fails.
  bool Need(size_t n) {
    while (buffered() < n) {
      if (!read_error_.ok() || consumed_ == length_) return false;
      if (pos_ > 0) {
        buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(pos_));
        pos_ = 0;
      }
      size_t want = std::min(length_ - consumed_, std::max(n - buffered(), kReadAhead));
      size_t old = buf_.size();
      buf_.resize(old + want);
      read_error_ = read_(buf_.data() + old, want);
      if (!read_error_.ok()) return false;
      consumed_ += want;
    }
    return true;
  }

  // The next n bytes, made available by Need(n).
  std::span<const std::byte> Take(size_t n) {
    std::span<const std::byte> out(buf_.data() + pos_, n);
    pos_ += n;
    return out;
  }

  // Body bytes not yet handed out.
  size_t left() const { return length_ - consumed_ + buffered(); }

  // Moves the next out.size() bytes into `out`: what was read ahead, then straight from the
  // connection. REQUIRES: out.size() <= left().
  bool ReadInto(std::span<std::byte> out) {
    size_t from_buffer = std::min(out.size(), buffered());
    if (from_buffer > 0) std::memcpy(out.data(), Take(from_buffer).data(), from_buffer);
    return Direct(out.subspan(from_buffer));
  }

  // Drops the next n bytes. REQUIRES: n <= left().
  bool Skip(size_t n) {
    size_t from_buffer = std::min(n, buffered());
    pos_ += from_buffer;
    n -= from_buffer;
    std::byte sink[16384];
    while (n > 0) {
      size_t step = std::min(n, sizeof(sink));
      if (!Direct(std::span(sink, step))) return false;
      n -= step;
    }
    return true;
  }

 private:
  size_t buffered() const { return buf_.size() - pos_; }

  bool Direct(std::span<std::byte> out) {
    if (out.empty()) return true;
    if (!read_error_.ok()) return false;
    read_error_ = read_(out.data(), out.size());
    consumed_ += out.size();
    return read_error_.ok();
  }

  const size_t length_;
  const BodyRead& read_;
  std::vector<std::byte> buf_;
  size_t pos_ = 0;       // Next unparsed byte of buf_.
  size_t consumed_ = 0;  // Body bytes read from the connection.
  Status read_error_;
};

// Reads a status (code:u8 message:string16). False when the body ends first.
bool ReadStatus(Incoming* in, Status* out) {
  if (!in->Need(3)) return false;
  protocol::BodyReader head(in->Take(3));
  StatusCode code = protocol::StatusCodeFromWire(head.U8());
  uint16_t len = head.U16();
  if (!in->Need(len)) return false;
  std::span<const std::byte> message = in->Take(len);
  *out = code == StatusCode::kOk
             ? Status::OK()
             : Status(code, std::string_view(reinterpret_cast<const char*>(message.data()), len));
  return true;
}

bool ReadU32(Incoming* in, uint32_t* out) {
  if (!in->Need(4)) return false;
  *out = protocol::BodyReader(in->Take(4)).U32();
  return true;
}

bool ReadU64(Incoming* in, uint64_t* out) {
  if (!in->Need(8)) return false;
  *out = protocol::BodyReader(in->Take(8)).U64();
  return true;
}

}  // namespace

Status ReadGetManyInto(size_t length, const BodyRead& read,
                       std::span<const std::span<std::byte>> outs,
                       std::vector<Result<size_t>>* results) {
  const size_t n = outs.size();
  results->assign(n, Result<size_t>(Status::Internal("malformed GET_MANY reply from kvtierd")));
  Incoming in(length, read);
  auto give_up = [&]() -> Status {
    if (in.read_error().ok()) in.Skip(in.left());
    if (!in.read_error().ok()) results->assign(n, Result<size_t>(in.read_error()));
    return in.read_error();
  };

  Status overall;
  if (!ReadStatus(&in, &overall)) return give_up();
  if (!overall.ok()) {
    results->assign(n, Result<size_t>(overall));
    return give_up();
  }
  uint32_t count = 0;
  if (!ReadU32(&in, &count) || count != n) return give_up();
  std::vector<Status> statuses(n);
  std::vector<uint64_t> sizes(n, 0);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!ReadStatus(&in, &statuses[i])) return give_up();
    if (statuses[i].ok() && !ReadU64(&in, &sizes[i])) return give_up();
    // The values follow the list: more than the bytes left is malformed (and `total` cannot wrap).
    if (total > in.left() || sizes[i] > in.left() - total) return give_up();
    total += sizes[i];
  }
  if (total != in.left()) return give_up();
  for (size_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      (*results)[i] = statuses[i];
    } else if (sizes[i] > outs[i].size()) {
      if (!in.Skip(sizes[i])) return give_up();
      (*results)[i] = Status::OutOfRange("value of " + std::to_string(sizes[i]) +
                                         " bytes does not fit the " +
                                         std::to_string(outs[i].size()) + "-byte buffer");
    } else {
      if (!in.ReadInto(outs[i].first(sizes[i]))) return give_up();
      (*results)[i] = static_cast<size_t>(sizes[i]);
    }
  }
  return Status::OK();
}

}  // namespace kvtier::client
