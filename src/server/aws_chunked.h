// aws-chunked bodies (Content-Encoding: aws-chunked), read as they come (AwsChunkedStream), so
// that a PUT's payload can be received straight into its G2 allocation between the framing
// (s3_put_in_place.h), and decoded where they lie in the input (DecodeAwsChunked) on the general
// path. The HTTP framing around them (Content-Length or chunked) is HttpRequestParser's.
//
//   chunk   = hex-size [";chunk-signature=" 64HEXDIG] CRLF data CRLF     (size > 0)
//   last    = "0" [";chunk-signature=" 64HEXDIG] CRLF
//   body    = *chunk last *(trailer CRLF) CRLF,  trailer = name ":" value
//
// Thread safety: a stream belongs to one request.

#ifndef KVTIER_SERVER_AWS_CHUNKED_H_
#define KVTIER_SERVER_AWS_CHUNKED_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/server/s3_auth.h"

namespace kvtier::server {

class AwsChunkedStream {
 public:
  struct Step {
    size_t consumed = 0;        // Bytes of the input read: framing, then `data`.
    std::span<std::byte> data;  // Payload bytes at the end of them (maybe none).
    bool chunk_began = false;   // A chunk header was read: chunk_size(), chunk_signature().
  };
  // Reads from the front of `input`, the body's bytes after those read before: framing up to
  // the next payload bytes and as many of them as `input` holds of their chunk, or up to the
  // end of the next chunk header (then stops, for its signature to be seen), or to the body's
  // end. A line cut short by the end of `input` is kept for the next call. The error,
  // IncompleteBody (400), when the framing is malformed or bytes come after the body's end; the
  // stream is then of no further use.
  std::optional<S3Error> Next(std::span<std::byte> input, Step* step);

  // Payload bytes of the current chunk still to come (0 inside framing).
  uint64_t run() const { return state_ == State::kData ? chunk_left_ : 0; }
  // The body's last line has been read.
  bool done() const { return state_ == State::kDone; }
  // The chunk whose header was read last.
  uint64_t chunk_size() const { return chunk_size_; }
  const std::string& chunk_signature() const { return chunk_signature_; }
  // Payload bytes so far.
  uint64_t payload_bytes() const { return payload_; }
  // The trailers read (names in lower case), in the order sent, without
  // x-amz-trailer-signature, which is trailer_signature() ("" if not sent); their canonical text
  // for it ("name:value\n" each).
  const std::vector<std::pair<std::string, std::string>>& trailers() const { return trailers_; }
  const std::string& trailer_signature() const { return trailer_signature_; }
  const std::string& canonical_trailers() const { return canonical_; }

 private:
  enum class State { kHeader, kData, kDataEnd, kTrailers, kDone };
  // The line under way is complete (without its CRLF): what it says.
  std::optional<S3Error> EndLine();

  State state_ = State::kHeader;
  uint64_t chunk_left_ = 0;  // Payload bytes of the current chunk still to come.
  std::string line_;         // The line read so far.
  bool chunk_began_ = false;
  uint64_t chunk_size_ = 0;
  std::string chunk_signature_;
  uint64_t payload_ = 0;
  std::vector<std::pair<std::string, std::string>> trailers_;
  std::string trailer_signature_;
  std::string canonical_;
};

// An aws-chunked body, decoded where it lies.
struct AwsChunkedBody {
  std::vector<std::span<std::byte>> data;  // The payload where it lies in the body, in order.
  uint64_t size = 0;                       // The payload's bytes.
  std::vector<std::pair<std::string, std::string>> trailers;  // Names in lower case.
};

// Decodes `body`, given as the pieces it lies in (HttpRequestParser::BodyPieces), moving
// nothing. With `signatures`, every chunk must carry a valid signature, and with
// `signed_trailer` the trailer too (x-amz-trailer-signature). nullopt when it is well-formed
// and every signature holds; otherwise IncompleteBody / InvalidRequest (400) or
// SignatureDoesNotMatch (403).
std::optional<S3Error> DecodeAwsChunked(std::span<const std::span<std::byte>> body,
                                        ChunkSignatures* signatures, bool signed_trailer,
                                        AwsChunkedBody* out);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_AWS_CHUNKED_H_
