// HTTP/1.1 request framing for kvtierd's HTTP listeners, by Node's http_parser (Debian:
// libhttp-parser-dev): request line, headers, Content-Length and chunked bodies, keep-alive.
//
// Made for the event loop's contract (handler.h): a handler sees the buffered bytes of the
// request at the front of the input, again and longer each time more arrive, until it says it
// consumed them. The parser remembers how far it got and reads only what is new; the body is
// not copied but located, as ranges of that input, and a chunked body is joined in place
// (Body) so that a handler can store it straight from the input buffer.
//
// Thread safety: one parser per connection, used by its event-loop thread only.

#ifndef KVTIER_SERVER_HTTP_REQUEST_H_
#define KVTIER_SERVER_HTTP_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct http_parser;

namespace kvtier::server {

struct HttpRequest {
  std::string method;  // "GET", "PUT", ...
  std::string target;  // The request target as sent ("/bucket/key?uploads").
  std::string path;    // Its part before '?', still percent-encoded.
  std::string query;   // Its part after '?' ("" when none).
  // Header names in lower case, in the order sent; values with surrounding blanks removed.
  std::vector<std::pair<std::string, std::string>> headers;
  bool keep_alive = true;
  bool chunked = false;  // Transfer-Encoding: chunked.
  std::optional<uint64_t> content_length;
  uint64_t body_bytes = 0;  // Body bytes so far (chunk framing excluded).

  // The first header of that name (lower case), or nullptr.
  const std::string* Header(std::string_view lower_name) const;
};

class HttpRequestParser {
 public:
  struct Limits {
    size_t max_head_bytes = 16 << 10;  // Request line and headers.
    size_t max_headers = 100;
    uint64_t max_body_bytes = 1 << 20;  // Content-Length, or the chunks' sum.
  };
  enum class State {
    kHead,      // The head is incomplete: more bytes are needed.
    kBody,      // The head is complete (request() has it), the body not yet.
    kComplete,  // The whole request is here: request(), Body(), consumed().
    kError,     // Malformed or over a limit: error_status(), error(). Close the connection.
  };

  explicit HttpRequestParser(Limits limits);
  ~HttpRequestParser();
  HttpRequestParser(const HttpRequestParser&) = delete;
  HttpRequestParser& operator=(const HttpRequestParser&) = delete;

  // Reads what of `input` it has not read yet. `input` is the buffered bytes from the first
  // byte of the request on; each call must pass at least as many as the one before. Bytes
  // after the request are left unread (the next request, pipelined).
  State Parse(std::span<const std::byte> input);

  // What Parse or ParseNext returned last.
  State state() const { return state_; }
  // REQUIRES: Parse returned kBody or kComplete.
  const HttpRequest& request() const { return request_; }
  // REQUIRES: kComplete. The body, made contiguous in `input` (the same bytes Parse saw):
  // the pieces of a chunked body are moved together in place. Valid until `input` changes.
  std::span<std::byte> Body(std::span<std::byte> input);
  // REQUIRES: kComplete. The body where it lies in `input`, in order, nothing moved: one piece
  // (none when empty), or one per chunk of a chunked body. Valid until `input` changes.
  std::vector<std::span<std::byte>> BodyPieces(std::span<std::byte> input) const;
  // REQUIRES: kComplete. Bytes of the input that the request took.
  size_t consumed() const { return fed_; }
  // REQUIRES: kBody, a request with Content-Length (not chunked). Bytes of the input before its
  // body: the request line and the headers.
  size_t head_size() const { return fed_ - static_cast<size_t>(request_.body_bytes); }
  // REQUIRES: Parse returned kBody. For a handler that takes the body as it comes, consuming
  // the input as it goes: reads `bytes`, the request's next ones after every byte read before
  // (by Parse, then by ParseNext), and appends the body bytes among them to *body, as spans of
  // `bytes`. *read: how many were read, all of them unless the request ends before their end
  // (the rest is the next request's). Bytes of BodyRun() may lie anywhere (received in place):
  // they are located, not read.
  State ParseNext(std::span<std::byte> bytes, std::vector<std::span<std::byte>>* body,
                  size_t* read);
  // REQUIRES: kBody. Body bytes that come next with no framing before them: the rest of the
  // current chunk of a chunked body (0 inside its framing), the rest of a Content-Length body.
  uint64_t BodyRun() const;
  // REQUIRES: kError. The HTTP status to answer with (400, 413, 431 or 505) and why.
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }

  // Forgets the request, to parse the next one from the first byte after it.
  void Reset();

 private:
  struct Callbacks;
  void AddBodyRange(size_t offset, size_t length);
  void SetError(int status, std::string message);

  Limits limits_;
  std::unique_ptr<http_parser> parser_;
  State state_ = State::kHead;
  HttpRequest request_;
  size_t fed_ = 0;            // Bytes of the input the parser has read.
  const std::byte* base_ = nullptr;  // The input of the Parse call under way.
  bool in_value_ = false;     // The last header piece was a value (a new field starts a header).
  size_t head_bytes_ = 0;
  std::vector<std::pair<size_t, size_t>> body_;  // (offset, length) in the input.
  std::vector<std::span<std::byte>>* next_body_ = nullptr;  // ParseNext's, while it runs.
  uint64_t chunk_left_ = 0;  // Bytes of the current chunk still to come.
  int error_status_ = 0;
  std::string error_;
};

// Moves `pieces` (ascending, non-overlapping ranges of one buffer) together at the first one's
// start; returns the bytes they make.
std::span<std::byte> JoinInPlace(std::span<const std::span<std::byte>> pieces);

// `s` without the spaces and tabs at either end (HTTP's optional whitespace).
std::string_view TrimBlanks(std::string_view s);

// The reason phrase of an HTTP status code, for the status line ("Error" for codes kvtierd does
// not send).
std::string_view HttpReason(int status);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_HTTP_REQUEST_H_
