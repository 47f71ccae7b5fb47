#include "tools/planning/trace_gen.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace kvtier::planning {
namespace {

// SplitMix64: tiny, fast, and its output is fixed by its definition, unlike the standard
// library's distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Next() % (hi - lo + 1); }
  // Standard normal (Box-Muller).
  double Normal() {
    const double u = 1 - Uniform();
    return std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * Uniform());
  }
  // At least one token, exponentially distributed around `mean`.
  uint64_t Tokens(double mean) { return 1 + static_cast<uint64_t>(Exponential(mean)); }

 private:
  uint64_t state_;
};

// A coding agent's tools: how often it calls each and how long a call typically takes.
struct Tool {
  double probability;
  double typical_seconds;
};
constexpr Tool kTools[] = {{0.45, 2}, {0.20, 1}, {0.15, 90}, {0.10, 180}, {0.05, 10}, {0.05, 300}};
constexpr double kToolSigma = 0.6;      // Of the log-normal factor on a call's duration.
constexpr double kRetainPerTypical = 2;  // A framework's retain hint: this x the typical time.

// A prompt's block chain: full blocks plus an optional partial tail.
struct Context {
  std::vector<uint64_t> full_ids;
  uint64_t tail_id = 0;
  uint32_t tail_tokens = 0;

  uint64_t Tokens(uint32_t block) const { return full_ids.size() * uint64_t{block} + tail_tokens; }
};

class Generator {
 public:
  explicit Generator(const TraceGenOptions& o) : o_(o), rng_(o.seed) {}

  Trace Run() {
    Trace trace;
    trace.block_tokens = o_.block_tokens;
    trace.tenants.clear();
    for (uint32_t t = 0; t < o_.tenants; ++t) trace.tenants.push_back("tenant-" + std::to_string(t));
    trace_ = &trace;
    std::vector<std::vector<Context>> prompts(o_.tenants);
    for (uint32_t t = 0; t < o_.tenants; ++t) {
      for (uint32_t i = 0; i < o_.system_prompts; ++i) {
        Context c;
        Append(&c, o_.system_prompt_tokens);
        prompts[t].push_back(std::move(c));
      }
    }
    double start = 0;
    for (uint64_t s = 0; s < o_.sessions; ++s) {
      start += rng_.Exponential(1.0 / o_.sessions_per_second);
      const uint32_t tenant = static_cast<uint32_t>(s % o_.tenants);
      const Context& system = prompts[tenant][rng_.Between(0, o_.system_prompts - 1)];
      const uint64_t turns = rng_.Between(o_.min_turns, o_.max_turns);
      RunSession(system, "s" + std::to_string(s), tenant, start, turns, /*may_fan_out=*/true);
    }
    std::stable_sort(trace.requests.begin(), trace.requests.end(),
                     [](const TraceRequest& a, const TraceRequest& b) {
                       return a.timestamp_ms < b.timestamp_ms;
                     });
    if (o_.max_requests > 0 && trace.requests.size() > o_.max_requests) {
      trace.requests.resize(o_.max_requests);
    }
    return trace;
  }

 private:
  // Appends `tokens` tokens: the old partial tail and every block completed or started get
  // new ids, since their content is new.
  void Append(Context* c, uint64_t tokens) {
    uint64_t in_tail = c->tail_tokens + tokens;
    while (in_tail >= o_.block_tokens) {
      c->full_ids.push_back(next_id_++);
      in_tail -= o_.block_tokens;
    }
    c->tail_tokens = static_cast<uint32_t>(in_tail);
    c->tail_id = in_tail > 0 ? next_id_++ : 0;
  }

  void Emit(const Context& c, const std::string& session, uint32_t tenant, double time,
            uint64_t output) {
    TraceRequest r;
    r.timestamp_ms = static_cast<uint64_t>(std::llround(time * 1000));
    r.input_length = c.Tokens(o_.block_tokens);
    r.output_length = output;
    r.hash_ids = c.full_ids;
    if (c.tail_tokens > 0) r.hash_ids.push_back(c.tail_id);
    r.session = session;
    r.tenant = tenant;
    trace_->requests.push_back(std::move(r));
  }

  // Returns when its last request, or the last of its sub-agents', was sent (0: none was).
  double RunSession(const Context& start_context, const std::string& name, uint32_t tenant,
                    double time, uint64_t turns, bool may_fan_out) {
    Context c = start_context;
    size_t last = SIZE_MAX;  // This session's last request so far.
    double sub_agents_end = 0;
    for (uint64_t turn = 0; turn < turns; ++turn) {
      const uint64_t input = rng_.Tokens(o_.input_tokens);
      const uint64_t output = rng_.Tokens(o_.output_tokens);
      if (c.Tokens(o_.block_tokens) + input + output > o_.max_context_tokens) break;
      Append(&c, input);
      Emit(c, name, tenant, time, output);
      last = trace_->requests.size() - 1;
      Append(&c, output);
      if (may_fan_out && o_.max_fanout >= 2 && rng_.Uniform() < o_.fanout_probability) {
        const uint64_t children = rng_.Between(2, o_.max_fanout);
        for (uint64_t k = 0; k < children; ++k) {
          Context task = c;
          Append(&task, rng_.Tokens(300));
          const double child_start = time + rng_.Exponential(1.0);
          sub_agents_end = std::max(
              sub_agents_end,
              RunSession(task, name + ".a" + std::to_string(turn) + "." + std::to_string(k),
                         tenant, child_start, rng_.Between(3, 10), /*may_fan_out=*/false));
        }
      }
      if (!o_.tool_calls) {
        time += rng_.Exponential(o_.idle_seconds);
        continue;
      }
      // The request ends in a tool call; the next one comes with its result.
      const Tool& tool = PickTool();
      trace_->requests[last].retain_seconds = kRetainPerTypical * tool.typical_seconds;
      time += tool.typical_seconds *
              std::exp(kToolSigma * rng_.Normal() - kToolSigma * kToolSigma / 2);
    }
    if (last == SIZE_MAX) return 0;
    trace_->requests[last].retain_seconds = 0;
    // Sub-agents still at work extend this session's context: it is not over while they run,
    // and the framework that forked them knows it.
    const double end = static_cast<double>(trace_->requests[last].timestamp_ms) / 1000;
    trace_->requests[last].finished = sub_agents_end <= end;
    return std::max(end, sub_agents_end);
  }

  const Tool& PickTool() {
    double u = rng_.Uniform();
    for (const Tool& t : kTools) {
      if (u < t.probability) return t;
      u -= t.probability;
    }
    return kTools[0];
  }

  const TraceGenOptions& o_;
  Rng rng_;
  Trace* trace_ = nullptr;
  uint64_t next_id_ = 1;
};

}  // namespace

Result<Workload> ParseWorkload(std::string_view name) {
  if (name == "chat") return Workload::kChat;
  if (name == "agentic") return Workload::kAgentic;
  if (name == "coding-agent") return Workload::kCodingAgent;
  return Status::InvalidArgument("unknown workload '" + std::string(name) +
                                 "'; known: chat, agentic, coding-agent");
}

TraceGenOptions DefaultsFor(Workload workload) {
  TraceGenOptions o;
  o.workload = workload;
  if (workload == Workload::kChat) {
    o.system_prompts = 8;
    o.system_prompt_tokens = 1500;
    o.min_turns = 2;
    o.max_turns = 12;
    o.input_tokens = 150;
    o.output_tokens = 350;
    o.idle_seconds = 45;
  } else if (workload == Workload::kCodingAgent) {
    o.system_prompts = 4;
    o.system_prompt_tokens = 8000;
    o.min_turns = 10;
    o.max_turns = 60;
    o.input_tokens = 1200;
    o.output_tokens = 200;
    o.tool_calls = true;
    o.fanout_probability = 0.1;
    o.max_fanout = 4;
  } else {
    o.system_prompts = 4;
    o.system_prompt_tokens = 6000;
    o.min_turns = 8;
    o.max_turns = 40;
    o.input_tokens = 700;
    o.output_tokens = 150;
    o.idle_seconds = 4;
    o.fanout_probability = 0.1;
    o.max_fanout = 4;
  }
  return o;
}

Result<Trace> GenerateTrace(const TraceGenOptions& o) {
  if (o.sessions == 0 || o.sessions > 100'000'000) {
    return Status::InvalidArgument("sessions must be from 1 to 10^8");
  }
  if (o.block_tokens == 0 || o.tenants == 0 || o.system_prompts == 0) {
    return Status::InvalidArgument("block size, tenants and system prompts must be positive");
  }
  if (o.min_turns == 0 || o.min_turns > o.max_turns) {
    return Status::InvalidArgument("turns must satisfy 1 <= min_turns <= max_turns");
  }
  if (!(o.sessions_per_second > 0) || !(o.idle_seconds >= 0) || !(o.input_tokens > 0) ||
      !(o.output_tokens > 0)) {
    return Status::InvalidArgument("rates and token means must be positive");
  }
  if (!(o.fanout_probability >= 0 && o.fanout_probability <= 1)) {
    return Status::InvalidArgument("fan-out probability must be from 0 to 1");
  }
  return Generator(o).Run();
}

}  // namespace kvtier::planning
