#include "src/server/http_request.h"

#include <http_parser.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>

namespace kvtier::server {

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

const std::string* HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

// http_parser's callbacks: `data` is the HttpRequestParser. A non-zero return stops parsing
// with an error (SetError says which).
struct HttpRequestParser::Callbacks {
  static HttpRequestParser* Self(http_parser* p) { return static_cast<HttpRequestParser*>(p->data); }

  static int AddHead(HttpRequestParser* self, size_t n) {
    self->head_bytes_ += n;
    if (self->head_bytes_ <= self->limits_.max_head_bytes) return 0;
    self->SetError(431, "request head over " + std::to_string(self->limits_.max_head_bytes) + " bytes");
    return 1;
  }
  static int OnUrl(http_parser* p, const char* at, size_t n) {
    HttpRequestParser* self = Self(p);
    self->request_.target.append(at, n);
    return AddHead(self, n);
  }
  static int OnHeaderField(http_parser* p, const char* at, size_t n) {
    HttpRequestParser* self = Self(p);
    auto& headers = self->request_.headers;
    if (headers.empty() || self->in_value_) {
      if (headers.size() == self->limits_.max_headers) {
        self->SetError(431, "more than " + std::to_string(self->limits_.max_headers) + " headers");
        return 1;
      }
      headers.emplace_back();
      self->in_value_ = false;
    }
    headers.back().first.append(at, n);
    return AddHead(self, n);
  }
  static int OnHeaderValue(http_parser* p, const char* at, size_t n) {
    HttpRequestParser* self = Self(p);
    if (self->request_.headers.empty()) return 1;
    self->request_.headers.back().second.append(at, n);
    self->in_value_ = true;
    return AddHead(self, n);
  }
  static int OnHeadersComplete(http_parser* p) {
    HttpRequestParser* self = Self(p);
    HttpRequest& r = self->request_;
    r.method = http_method_str(static_cast<http_method>(p->method));
    const size_t q = r.target.find('?');
    r.path = r.target.substr(0, q);
    r.query = q == std::string::npos ? "" : r.target.substr(q + 1);
    for (auto& [name, value] : r.headers) {
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      value = std::string(TrimBlanks(value));
    }
    r.keep_alive = http_should_keep_alive(p) != 0;
    r.chunked = (p->flags & F_CHUNKED) != 0;
    // ULLONG_MAX: no Content-Length (http_parser's F_CONTENTLENGTH flag is not reliable here).
    if (!r.chunked && p->content_length != ULLONG_MAX) {
      r.content_length = p->content_length;
      if (p->content_length > self->limits_.max_body_bytes) {
        self->SetError(413, "body of " + std::to_string(p->content_length) + " bytes over the " +
                                std::to_string(self->limits_.max_body_bytes) + "-byte limit");
        return -1;  // 1 would mean "no body" to http_parser.
      }
    }
    self->state_ = State::kBody;
    return 0;
  }
  static int OnBody(http_parser* p, const char* at, size_t n) {
    HttpRequestParser* self = Self(p);
    self->request_.body_bytes += n;
    if (self->request_.body_bytes > self->limits_.max_body_bytes) {
      self->SetError(413, "body over the " + std::to_string(self->limits_.max_body_bytes) +
                              "-byte limit");
      return 1;
    }
    if (self->request_.chunked) self->chunk_left_ -= n;
    if (self->next_body_ != nullptr) {
      self->next_body_->emplace_back(reinterpret_cast<std::byte*>(const_cast<char*>(at)), n);
    } else {
      self->AddBodyRange(static_cast<size_t>(reinterpret_cast<const std::byte*>(at) - self->base_), n);
    }
    return 0;
  }
  static int OnChunkHeader(http_parser* p) {
    Self(p)->chunk_left_ = p->content_length;  // The chunk's size, http_parser documents.
    return 0;
  }
  static int OnMessageComplete(http_parser* p) {
    Self(p)->state_ = State::kComplete;
    http_parser_pause(p, 1);  // The next request, pipelined, waits for Reset.
    return 0;
  }

  static const http_parser_settings& Settings() {
    static const http_parser_settings settings = [] {
      http_parser_settings s{};
      s.on_url = OnUrl;
      s.on_header_field = OnHeaderField;
      s.on_header_value = OnHeaderValue;
      s.on_headers_complete = OnHeadersComplete;
      s.on_body = OnBody;
      s.on_message_complete = OnMessageComplete;
      s.on_chunk_header = OnChunkHeader;
      return s;
    }();
    return settings;
  }
};

HttpRequestParser::HttpRequestParser(Limits limits)
    : limits_(limits), parser_(std::make_unique<http_parser>()) {
  Reset();
}

HttpRequestParser::~HttpRequestParser() = default;

void HttpRequestParser::Reset() {
  http_parser_init(parser_.get(), HTTP_REQUEST);
  parser_->data = this;
  state_ = State::kHead;
  request_ = HttpRequest{};
  fed_ = 0;
  base_ = nullptr;
  in_value_ = false;
  head_bytes_ = 0;
  body_.clear();
  chunk_left_ = 0;
  error_status_ = 0;
  error_.clear();
}

void HttpRequestParser::SetError(int status, std::string message) {
  if (error_status_ != 0) return;
  error_status_ = status;
  error_ = std::move(message);
}

void HttpRequestParser::AddBodyRange(size_t offset, size_t length) {
  if (!body_.empty() && body_.back().first + body_.back().second == offset) {
    body_.back().second += length;
  } else {
    body_.emplace_back(offset, length);
  }
}

HttpRequestParser::State HttpRequestParser::Parse(std::span<const std::byte> input) {
  if (state_ == State::kComplete || state_ == State::kError || input.size() <= fed_) return state_;
  base_ = input.data();
  const size_t n = input.size() - fed_;
  const size_t parsed = http_parser_execute(parser_.get(), &Callbacks::Settings(),
                                            reinterpret_cast<const char*>(input.data() + fed_), n);
  fed_ += parsed;
  const http_errno err = HTTP_PARSER_ERRNO(parser_.get());
  if (err == HPE_PAUSED) return state_;
  if (err != HPE_OK) {
    // An unknown method token is malformed (400): methods http_parser knows but a handler
    // does not serve are the handler's to refuse (405, 501).
    const int status = err == HPE_INVALID_VERSION   ? 505
                       : err == HPE_HEADER_OVERFLOW ? 431
                                                    : 400;
    SetError(status, std::string("malformed HTTP request: ") + http_errno_description(err));
    state_ = State::kError;
  } else if (state_ == State::kHead && fed_ > limits_.max_head_bytes) {
    SetError(431, "request head over " + std::to_string(limits_.max_head_bytes) + " bytes");
    state_ = State::kError;
  }
  return state_;
}

HttpRequestParser::State HttpRequestParser::ParseNext(std::span<std::byte> bytes,
                                                      std::vector<std::span<std::byte>>* body,
                                                      size_t* read) {
  *read = 0;
  if (state_ != State::kBody || bytes.empty()) return state_;
  next_body_ = body;
  *read = http_parser_execute(parser_.get(), &Callbacks::Settings(),
                              reinterpret_cast<const char*>(bytes.data()), bytes.size());
  next_body_ = nullptr;
  const http_errno err = HTTP_PARSER_ERRNO(parser_.get());
  if (err != HPE_OK && err != HPE_PAUSED) {
    SetError(400, std::string("malformed HTTP request: ") + http_errno_description(err));
    state_ = State::kError;
  }
  return state_;
}

uint64_t HttpRequestParser::BodyRun() const {
  if (state_ != State::kBody) return 0;
  if (request_.chunked) return chunk_left_;
  return request_.content_length ? *request_.content_length - request_.body_bytes : 0;
}

std::vector<std::span<std::byte>> HttpRequestParser::BodyPieces(std::span<std::byte> input) const {
  std::vector<std::span<std::byte>> pieces;
  pieces.reserve(body_.size());
  for (const auto& [offset, length] : body_) pieces.push_back(input.subspan(offset, length));
  return pieces;
}

std::span<std::byte> HttpRequestParser::Body(std::span<std::byte> input) {
  if (body_.empty()) return {};
  const std::span<std::byte> body = JoinInPlace(BodyPieces(input));
  body_.resize(1);
  body_[0].second = body.size();
  return body;
}

std::span<std::byte> JoinInPlace(std::span<const std::span<std::byte>> pieces) {
  if (pieces.empty()) return {};
  std::byte* const start = pieces[0].data();
  size_t size = pieces[0].size();
  for (size_t i = 1; i < pieces.size(); ++i) {
    if (!pieces[i].empty()) std::memmove(start + size, pieces[i].data(), pieces[i].size());
    size += pieces[i].size();
  }
  return {start, size};
}

std::string_view HttpReason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Payload Too Large";
    case 416: return "Requested Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

}  // namespace kvtier::server
