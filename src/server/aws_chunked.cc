#include "src/server/aws_chunked.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <string_view>

#include "src/server/http_request.h"

namespace kvtier::server {
namespace {

// A chunk header is a size and a signature (16 + 17 + 64 bytes); a trailer a checksum header.
constexpr size_t kMaxLineBytes = 4096;
constexpr std::string_view kSignature = ";chunk-signature=";

S3Error Malformed(std::string why) {
  return S3Error{400, "IncompleteBody", "malformed aws-chunked body: " + std::move(why)};
}

// Appends `piece` to `pieces`, joined to the last one when it follows it.
void AppendPiece(std::vector<std::span<std::byte>>* pieces, std::span<std::byte> piece) {
  if (!pieces->empty() && pieces->back().data() + pieces->back().size() == piece.data()) {
    pieces->back() = {pieces->back().data(), pieces->back().size() + piece.size()};
  } else {
    pieces->push_back(piece);
  }
}

}  // namespace

std::optional<S3Error> AwsChunkedStream::Next(std::span<std::byte> input, Step* step) {
  *step = {};
  if (state_ == State::kDone && !input.empty()) return Malformed("bytes after the final CRLF");
  size_t at = 0;
  while (at < input.size() && state_ != State::kDone) {
    if (state_ == State::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_left_, input.size() - at));
      step->data = input.subspan(at, n);
      step->consumed = at + n;
      chunk_left_ -= n;
      payload_ += n;
      if (chunk_left_ == 0) state_ = State::kDataEnd;
      return std::nullopt;
    }
    // After a chunk's data only its CRLF may come.
    const size_t max = state_ == State::kDataEnd ? 0 : kMaxLineBytes;
    const char* text = reinterpret_cast<const char*>(input.data() + at);
    const size_t left = input.size() - at;
    const void* lf = std::memchr(text, '\n', left);
    const size_t n = lf == nullptr ? left : static_cast<size_t>(static_cast<const char*>(lf) - text);
    if (line_.size() + n > max + 1) {  // + 1: its CR.
      return Malformed(state_ == State::kDataEnd ? "a chunk's data is not followed by CRLF"
                                                 : "a line of over " + std::to_string(max) + " bytes");
    }
    line_.append(text, n);
    at += lf == nullptr ? n : n + 1;
    if (lf == nullptr) break;
    if (line_.empty() || line_.back() != '\r') return Malformed("a line ends with LF but no CR");
    line_.pop_back();
    std::optional<S3Error> e = EndLine();
    line_.clear();
    if (e) return e;
    if (chunk_began_) {
      chunk_began_ = false;
      step->chunk_began = true;
      break;
    }
  }
  step->consumed = at;
  return std::nullopt;
}

std::optional<S3Error> AwsChunkedStream::EndLine() {
  std::string_view line = line_;
  switch (state_) {
    case State::kHeader: {
      std::string_view signature;
      if (const size_t semi = line.find(';'); semi != std::string_view::npos) {
        if (line.substr(semi, kSignature.size()) != kSignature) return Malformed("unknown chunk extension");
        signature = line.substr(semi + kSignature.size());
        line = line.substr(0, semi);
      }
      if (line.empty() || line.size() > 15 ||
          line.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
        return Malformed("chunk size '" + std::string(line) + "' is not hexadecimal");
      }
      chunk_size_ = std::stoull(std::string(line), nullptr, 16);
      chunk_signature_ = signature;
      chunk_began_ = true;
      chunk_left_ = chunk_size_;
      state_ = chunk_size_ == 0 ? State::kTrailers : State::kData;
      return std::nullopt;
    }
    case State::kDataEnd:
      state_ = State::kHeader;  // Empty: Next let no longer line through.
      return std::nullopt;
    case State::kTrailers: {
      if (line.empty()) {
        state_ = State::kDone;
        return std::nullopt;
      }
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) return Malformed("a trailer without ':'");
      std::string name(TrimBlanks(line.substr(0, colon)));
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value(TrimBlanks(line.substr(colon + 1)));
      if (name == "x-amz-trailer-signature") {
        trailer_signature_ = std::move(value);
        return std::nullopt;
      }
      canonical_ += name + ":" + value + "\n";
      trailers_.emplace_back(std::move(name), std::move(value));
      return std::nullopt;
    }
    case State::kData:
    case State::kDone: break;
  }
  return Malformed("a line where none belongs");
}

std::optional<S3Error> DecodeAwsChunked(std::span<const std::span<std::byte>> body,
                                        ChunkSignatures* signatures, bool signed_trailer,
                                        AwsChunkedBody* out) {
  auto bad_signature = [] {
    return S3Error{403, "SignatureDoesNotMatch", "a chunk signature of the body does not match"};
  };
  AwsChunkedStream stream;
  // The data of the chunk under way, where it lies, and its signature: checked once the next
  // chunk's header says it ended (the last chunk, of size 0, at once).
  std::vector<std::span<std::byte>> chunk;
  std::string signature;
  for (std::span<std::byte> piece : body) {
    while (!piece.empty()) {
      AwsChunkedStream::Step step;
      if (std::optional<S3Error> e = stream.Next(piece, &step)) return e;
      piece = piece.subspan(step.consumed);
      if (!step.data.empty()) {
        AppendPiece(&chunk, step.data);
        AppendPiece(&out->data, step.data);
        out->size += step.data.size();
      }
      if (!step.chunk_began || signatures == nullptr) continue;
      if (!signature.empty() && !signatures->Next(signature, chunk)) return bad_signature();
      chunk.clear();
      signature = stream.chunk_signature();
      if (signature.empty()) return S3Error{403, "AccessDenied", "a chunk has no signature"};
      if (stream.chunk_size() == 0 && !signatures->Next(signature, chunk)) return bad_signature();
    }
  }
  if (!stream.done()) return Malformed("the body ends before its last chunk and final CRLF");
  out->trailers = stream.trailers();
  if (signatures != nullptr && signed_trailer) {
    if (stream.trailer_signature().empty()) return S3Error{403, "AccessDenied", "the trailer has no signature"};
    if (!signatures->Trailer(stream.trailer_signature(), stream.canonical_trailers())) return bad_signature();
  }
  return std::nullopt;
}

}  // namespace kvtier::server
