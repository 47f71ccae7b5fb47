#include "tools/planning/trace.h"

#include <algorithm>
#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <unordered_map>

namespace kvtier::planning {
namespace {

using nlohmann::json;

constexpr size_t kMaxReportedProblems = 20;
constexpr uint32_t kMaxBlockTokens = 1 << 20;
constexpr double kMaxRetainSeconds = 86400;

// A non-negative integer (a float is accepted when whole-valued, as some exports write
// timestamps as 123.0); nullopt otherwise.
std::optional<uint64_t> AsCount(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i >= 0) return static_cast<uint64_t>(i);
    return std::nullopt;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0 && d < 1.8e19 && d == static_cast<double>(static_cast<uint64_t>(d))) {
      return static_cast<uint64_t>(d);
    }
  }
  return std::nullopt;
}

Status ParseRequest(const json& line, uint32_t block_tokens,
                    std::unordered_map<std::string, uint32_t>* tenant_index,
                    std::vector<std::string>* tenants, TraceRequest* out) {
  if (!line.is_object()) return Status::InvalidArgument("not a JSON object");
  auto field = [&](const char* key, bool required, uint64_t* value) -> Status {
    auto it = line.find(key);
    if (it == line.end()) {
      return required ? Status::InvalidArgument(std::string("missing '") + key + "'")
                      : Status::OK();
    }
    std::optional<uint64_t> v = AsCount(*it);
    if (!v) return Status::InvalidArgument(std::string("'") + key + "' must be a non-negative integer");
    *value = *v;
    return Status::OK();
  };
  KVTIER_RETURN_IF_ERROR(field("timestamp", true, &out->timestamp_ms));
  KVTIER_RETURN_IF_ERROR(field("input_length", true, &out->input_length));
  KVTIER_RETURN_IF_ERROR(field("output_length", false, &out->output_length));
  auto ids = line.find("hash_ids");
  if (ids == line.end() || !ids->is_array()) {
    return Status::InvalidArgument("'hash_ids' must be an array");
  }
  out->hash_ids.reserve(ids->size());
  for (const json& id : *ids) {
    std::optional<uint64_t> v = AsCount(id);
    if (!v) return Status::InvalidArgument("'hash_ids' must hold non-negative integers");
    out->hash_ids.push_back(*v);
  }
  const uint64_t blocks = (out->input_length + block_tokens - 1) / block_tokens;
  if (out->hash_ids.size() > blocks) {
    return Status::InvalidArgument(std::to_string(out->hash_ids.size()) + " hash_ids for " +
                                   std::to_string(out->input_length) + " tokens of " +
                                   std::to_string(block_tokens) + "-token blocks");
  }
  if (auto s = line.find("session"); s != line.end()) {
    if (!s->is_string()) return Status::InvalidArgument("'session' must be a string");
    out->session = s->get<std::string>();
  }
  if (auto t = line.find("tenant"); t != line.end()) {
    if (!t->is_string() || t->get<std::string>().empty() || t->get<std::string>().size() > 128) {
      return Status::InvalidArgument("'tenant' must be a string of 1 to 128 bytes");
    }
    const std::string name = t->get<std::string>();
    auto [it, inserted] = tenant_index->try_emplace(name, static_cast<uint32_t>(tenants->size()));
    if (inserted) tenants->push_back(name);
    out->tenant = it->second;
  }
  if (auto r = line.find("retain_s"); r != line.end()) {
    if (!r->is_number() || !(r->get<double>() > 0 && r->get<double>() <= kMaxRetainSeconds)) {
      return Status::InvalidArgument("'retain_s' must be a number of seconds from 0 to 86400");
    }
    out->retain_seconds = r->get<double>();
  }
  if (auto f = line.find("finished"); f != line.end()) {
    if (!f->is_boolean()) return Status::InvalidArgument("'finished' must be true or false");
    out->finished = f->get<bool>();
  }
  if ((out->retain_seconds > 0 || out->finished) && out->session.empty()) {
    return Status::InvalidArgument("a hint ('retain_s', 'finished') needs a 'session'");
  }
  return Status::OK();
}

}  // namespace

size_t Trace::WholeBlocks(const TraceRequest& request) const {
  return static_cast<size_t>(
      std::min<uint64_t>(request.hash_ids.size(), request.input_length / block_tokens));
}

bool Trace::HasHints() const {
  return std::any_of(requests.begin(), requests.end(), [](const TraceRequest& r) {
    return r.retain_seconds > 0 || r.finished;
  });
}

uint64_t Trace::TotalBlockReferences() const {
  uint64_t n = 0;
  for (const TraceRequest& r : requests) n += r.hash_ids.size();
  return n;
}

Result<Trace> ParseTrace(std::istream& in, const TraceReadOptions& options) {
  if (options.default_block_tokens == 0 || options.default_block_tokens > kMaxBlockTokens) {
    return Status::InvalidArgument("block size must be from 1 to 2^20 tokens");
  }
  Trace trace;
  trace.block_tokens = options.default_block_tokens;
  std::unordered_map<std::string, uint32_t> tenant_index = {{"default", 0}};
  std::string text;
  uint64_t line_number = 0;
  bool seen_content = false;
  while (std::getline(in, text)) {
    ++line_number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
    Status status;
    if (line.is_discarded()) {
      status = Status::InvalidArgument("not valid JSON");
    } else if (!seen_content && line.is_object() && line.contains("kvtier_trace")) {
      std::optional<uint64_t> version = AsCount(line["kvtier_trace"]);
      // value_or rather than an optional kept alive: gcc 12 -O2 misreports it as uninitialised.
      const uint64_t block =
          line.contains("block_tokens") ? AsCount(line["block_tokens"]).value_or(0) : 0;
      if (version != 1u) {
        return Status::InvalidArgument("line " + std::to_string(line_number) +
                                       ": unsupported kvtier_trace version (want 1)");
      }
      if (block == 0 || block > kMaxBlockTokens) {
        return Status::InvalidArgument("line " + std::to_string(line_number) +
                                       ": header needs block_tokens from 1 to 2^20");
      }
      trace.block_tokens = static_cast<uint32_t>(block);
      seen_content = true;
      continue;
    } else {
      TraceRequest request;
      status = ParseRequest(line, trace.block_tokens, &tenant_index, &trace.tenants, &request);
      if (status.ok()) trace.requests.push_back(std::move(request));
    }
    seen_content = true;
    if (!status.ok()) {
      const std::string problem =
          "line " + std::to_string(line_number) + ": " + std::string(status.message());
      if (options.strict) return Status::InvalidArgument(problem);
      ++trace.skipped_lines;
      if (trace.problems.size() < kMaxReportedProblems) trace.problems.push_back(problem);
    }
  }
  std::stable_sort(trace.requests.begin(), trace.requests.end(),
                   [](const TraceRequest& a, const TraceRequest& b) {
                     return a.timestamp_ms < b.timestamp_ms;
                   });
  return trace;
}

Result<Trace> ReadTraceFile(const std::string& path, const TraceReadOptions& options) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open trace '" + path + "'");
  return ParseTrace(in, options);
}

void WriteTrace(const Trace& trace, TraceFormat format, std::ostream& out) {
  if (format == TraceFormat::kKvtier) {
    nlohmann::ordered_json header;
    header["kvtier_trace"] = 1;
    header["block_tokens"] = trace.block_tokens;
    out << header.dump() << '\n';
  }
  for (const TraceRequest& r : trace.requests) {
    // Ordered so that the file reads like the Mooncake release: timestamp first.
    nlohmann::ordered_json line;
    line["timestamp"] = r.timestamp_ms;
    line["input_length"] = r.input_length;
    line["output_length"] = r.output_length;
    line["hash_ids"] = r.hash_ids;
    if (format == TraceFormat::kKvtier) {
      if (!r.session.empty()) line["session"] = r.session;
      if (r.tenant != 0) line["tenant"] = trace.tenants[r.tenant];
      if (r.retain_seconds > 0) line["retain_s"] = r.retain_seconds;
      if (r.finished) line["finished"] = true;
    }
    out << line.dump() << '\n';
  }
}

}  // namespace kvtier::planning
