// RESP2 (the Redis serialization protocol, version 2): a request parser and reply writers.
//
// The parser reads one command at a time from untrusted bytes: a multi-bulk array of bulk
// strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") or an inline command ("GET k\r\n"). It is
// stateless: call it again on the same bytes plus whatever arrived since. Every length is
// checked against RespLimits before anything is allocated, so memory per connection stays
// bounded. Thread-safe (pure functions).

#ifndef KVTIER_PROTOCOL_RESP_H_
#define KVTIER_PROTOCOL_RESP_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::protocol {

struct RespLimits {
  size_t max_args = 1 << 20;            // Elements of one multi-bulk command.
  uint64_t max_bulk_bytes = 512 << 20;  // One bulk string (a value).
  uint64_t max_command_bytes = 1u << 30;  // A whole command, all its arguments.
  size_t max_inline_bytes = 64 << 10;   // One inline command line, or one "*n"/"$n" line.
};

struct RespParse {
  enum class State {
    kNeedMore,  // No complete command yet; `bytes_needed` is its total size when known, else 0.
    kCommand,   // `args` holds the command; it spans the first `consumed` bytes.
    kError,     // Malformed; `error` is Redis's wording ("Protocol error: ..."). Close after.
  };
  State state = State::kNeedMore;
  size_t consumed = 0;
  size_t bytes_needed = 0;
  std::string error;
};

// Parses the command at the front of `data` into `args` (views into `data`, cleared first).
// A command with no arguments (an empty line, "*0") is a kCommand with empty args.
RespParse ParseRespCommand(std::string_view data, const RespLimits& limits,
                           std::vector<std::string_view>* args);

// Reply writers: append one RESP2 value to `out`.
void AppendSimpleString(std::string_view s, std::string* out);  // "+OK\r\n"
// `message` starts with the error code, e.g. "ERR unknown command", "WRONGPASS ...".
// CR and LF in it are replaced by spaces.
void AppendError(std::string_view message, std::string* out);
void AppendInteger(int64_t v, std::string* out);
void AppendBulk(std::string_view s, std::string* out);
// "$<n>\r\n": the header of a bulk string whose n bytes (and "\r\n") the caller sends.
void AppendBulkHeader(uint64_t n, std::string* out);
void AppendNullBulk(std::string* out);  // "$-1\r\n"
void AppendArrayHeader(int64_t n, std::string* out);

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_RESP_H_
