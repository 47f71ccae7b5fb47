// Prefix-hash request traces: reading and writing JSONL.
//
// Mooncake format (FAST'25 trace release), one request per line:
//   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}
// timestamp in milliseconds from the trace start; hash_ids name the prompt's 512-token blocks,
// chained: equal ids at equal positions mean equal prefixes.
//
// kvtier format: the same lines, after a header line that makes the block size explicit, with
// optional fields per request:
//   {"kvtier_trace": 1, "block_tokens": 256}
//   {"timestamp": 0, "input_length": 700, "output_length": 20, "hash_ids": [1, 2, 3],
//    "session": "s17", "tenant": "acme", "retain_s": 30, "finished": true}
// `tenant` selects an isolated key space (blocks of different tenants never match); `session`
// names the conversation or agent run the blocks belong to. The hints are what the sender knew
// when it sent the request, sent after it as Store::HintSession: `retain_s` (seconds, > 0) the
// session should come back within (a tool's typical duration, not when the call really
// returned), `finished` the session ends with this request. A file without a header is read as
// Mooncake (512-token blocks unless the caller says otherwise).
//
// hash_ids must number at most ceil(input_length / block_tokens); a prompt's tokens past its
// last id are never cacheable. The last block may be partial.

#ifndef KVTIER_TOOLS_PLANNING_TRACE_H_
#define KVTIER_TOOLS_PLANNING_TRACE_H_

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::planning {

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint64_t input_length = 0;
  uint64_t output_length = 0;
  std::vector<uint64_t> hash_ids;
  std::string session;     // Empty when the trace has none.
  uint32_t tenant = 0;     // Index into Trace::tenants.
  double retain_seconds = 0;  // Hint: the session comes back within; 0 = no hint.
  bool finished = false;      // Hint: the session ends with this request.
};

struct Trace {
  uint32_t block_tokens = 512;
  std::vector<std::string> tenants = {"default"};
  std::vector<TraceRequest> requests;  // Sorted by timestamp (stable).
  uint64_t skipped_lines = 0;
  std::vector<std::string> problems;  // "line N: why" for the first skipped lines.

  // Blocks of `request` holding block_tokens tokens each: its hash ids but a partial last one,
  // which kvtier never keys.
  size_t WholeBlocks(const TraceRequest& request) const;
  uint64_t TotalBlockReferences() const;
  // A request carries a session hint (retain_s or finished).
  bool HasHints() const;
};

enum class TraceFormat { kMooncake, kKvtier };

struct TraceReadOptions {
  // Fail on the first malformed line instead of skipping it (and reporting its number).
  bool strict = false;
  // Block size of a file without a kvtier header (Mooncake traces use 512).
  uint32_t default_block_tokens = 512;
};

Result<Trace> ParseTrace(std::istream& in, const TraceReadOptions& options);
// NotFound when the file cannot be opened.
Result<Trace> ReadTraceFile(const std::string& path, const TraceReadOptions& options);

// Mooncake output drops sessions and tenants.
void WriteTrace(const Trace& trace, TraceFormat format, std::ostream& out);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_TRACE_H_
