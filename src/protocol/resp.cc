#include "src/protocol/resp.h"

#include <algorithm>

namespace kvtier::protocol {
namespace {

// Parses a decimal integer that fills all of `s` (an optional '-', then 1 to 18 digits).
bool ParseInt(std::string_view s, int64_t* out) {
  bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = negative ? -v : v;
  return true;
}

// Finds the "\r\n"-terminated line at `pos`. Returns false when it is not complete yet.
bool FindLine(std::string_view data, size_t pos, size_t* end) {
  size_t cr = data.find("\r\n", pos);
  if (cr == std::string_view::npos) return false;
  *end = cr;
  return true;
}

RespParse Error(std::string message) {
  RespParse r;
  r.state = RespParse::State::kError;
  r.error = std::move(message);
  return r;
}

RespParse ParseInline(std::string_view data, const RespLimits& limits,
                      std::vector<std::string_view>* args) {
  size_t nl = data.find('\n');
  if (nl == std::string_view::npos) {
    if (data.size() > limits.max_inline_bytes) return Error("Protocol error: too big inline request");
    return {};
  }
  if (nl > limits.max_inline_bytes) return Error("Protocol error: too big inline request");
  std::string_view line = data.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) {
      if (args->size() >= limits.max_args) return Error("Protocol error: invalid multibulk length");
      args->push_back(line.substr(start, i - start));
    }
  }
  RespParse r;
  r.state = RespParse::State::kCommand;
  r.consumed = nl + 1;
  return r;
}

}  // namespace

RespParse ParseRespCommand(std::string_view data, const RespLimits& limits,
                           std::vector<std::string_view>* args) {
  args->clear();
  if (data.empty()) return {};
  if (data[0] != '*') return ParseInline(data, limits, args);

  size_t end;
  if (!FindLine(data, 1, &end)) {
    if (data.size() > limits.max_inline_bytes) return Error("Protocol error: too big count line");
    return {};
  }
  int64_t count;
  if (!ParseInt(data.substr(1, end - 1), &count) || count > static_cast<int64_t>(limits.max_args)) {
    return Error("Protocol error: invalid multibulk length");
  }
  size_t pos = end + 2;
  if (count <= 0) {
    RespParse r;
    r.state = RespParse::State::kCommand;
    r.consumed = pos;
    return r;
  }
  // Reserve by what the bytes present can hold (at least 4 bytes per argument), not by the
  // claimed count, so a lying count cannot make us allocate.
  args->reserve(std::min<size_t>(static_cast<size_t>(count), data.size() / 4 + 1));
  for (int64_t i = 0; i < count; ++i) {
    if (pos >= data.size()) return {};
    if (data[pos] != '$') {
      return Error(std::string("Protocol error: expected '$', got '") + data[pos] + "'");
    }
    if (!FindLine(data, pos + 1, &end)) {
      if (data.size() - pos > limits.max_inline_bytes) {
        return Error("Protocol error: invalid bulk length");
      }
      return {};
    }
    int64_t len;
    if (!ParseInt(data.substr(pos + 1, end - pos - 1), &len) || len < 0 ||
        static_cast<uint64_t>(len) > limits.max_bulk_bytes) {
      return Error("Protocol error: invalid bulk length");
    }
    size_t start = end + 2;
    uint64_t need = static_cast<uint64_t>(start) + static_cast<uint64_t>(len) + 2;
    if (need > limits.max_command_bytes) return Error("Protocol error: command too large");
    if (data.size() < need) {
      RespParse r;
      r.bytes_needed = static_cast<size_t>(need);
      return r;
    }
    if (data[need - 2] != '\r' || data[need - 1] != '\n') {
      return Error("Protocol error: bulk string not terminated by CRLF");
    }
    args->push_back(data.substr(start, static_cast<size_t>(len)));
    pos = static_cast<size_t>(need);
  }
  RespParse r;
  r.state = RespParse::State::kCommand;
  r.consumed = pos;
  return r;
}

void AppendSimpleString(std::string_view s, std::string* out) {
  out->push_back('+');
  out->append(s);
  out->append("\r\n");
}

void AppendError(std::string_view message, std::string* out) {
  out->push_back('-');
  size_t start = out->size();
  out->append(message);
  std::replace_if(out->begin() + static_cast<std::ptrdiff_t>(start), out->end(),
                  [](char c) { return c == '\r' || c == '\n'; }, ' ');
  out->append("\r\n");
}

void AppendInteger(int64_t v, std::string* out) {
  out->push_back(':');
  out->append(std::to_string(v));
  out->append("\r\n");
}

void AppendBulkHeader(uint64_t n, std::string* out) {
  out->push_back('$');
  out->append(std::to_string(n));
  out->append("\r\n");
}

void AppendBulk(std::string_view s, std::string* out) {
  AppendBulkHeader(s.size(), out);
  out->append(s);
  out->append("\r\n");
}

void AppendNullBulk(std::string* out) { out->append("$-1\r\n"); }

void AppendArrayHeader(int64_t n, std::string* out) {
  out->push_back('*');
  out->append(std::to_string(n));
  out->append("\r\n");
}

}  // namespace kvtier::protocol
