// Synthetic prefix-hash traces for chat and agentic workloads, deterministic for a seed
// (the generator and its distributions are implemented here, so the same seed gives the same
// trace with any standard library).
//
// A session starts from one of a few shared system prompts (tool definitions, for agents),
// then alternates requests and growth: each turn appends new input (a user message or a tool
// result) and, after the request, the model's output, so the next request's prompt extends
// the previous one. Agentic sessions may fan out sub-agents that start from the parent's
// context plus a task message and run their own short loops. A coding agent waits on a tool
// call between its requests (reading files for seconds, running tests or a build for minutes,
// asking its user for longer). Block ids follow Mooncake's rule: equal ids mean equal
// prefixes, and a partially filled last block gets a fresh id whenever its content changes.
//
// Hints, as a framework would send them: every session's last request is `finished`; a coding
// agent's request that starts a tool call carries `retain_s`, twice the tool's typical
// duration (what the framework knows; the call itself takes longer or shorter).

#ifndef KVTIER_TOOLS_PLANNING_TRACE_GEN_H_
#define KVTIER_TOOLS_PLANNING_TRACE_GEN_H_

#include <cstdint>
#include <string_view>

#include "kvtier/status.h"
#include "tools/planning/trace.h"

namespace kvtier::planning {

enum class Workload { kChat, kAgentic, kCodingAgent };

// "chat", "agentic" or "coding-agent"; InvalidArgument otherwise.
Result<Workload> ParseWorkload(std::string_view name);

struct TraceGenOptions {
  Workload workload = Workload::kAgentic;
  uint64_t seed = 1;
  uint64_t sessions = 400;          // Top-level sessions (sub-agents come on top).
  uint64_t max_requests = 0;        // Keep only the first N requests in time; 0 = all.
  uint32_t block_tokens = 512;
  uint32_t tenants = 1;             // Sessions are spread round-robin over tenant-0.. .
  double sessions_per_second = 0.5; // Poisson arrival rate of new sessions.
  uint32_t max_context_tokens = 131072;  // A session ends when its context would pass this.

  // Per workload defaults are applied by DefaultsFor(); all are means unless named min/max.
  uint32_t system_prompts = 0;        // Distinct shared system prompts.
  uint32_t system_prompt_tokens = 0;
  uint32_t min_turns = 0;
  uint32_t max_turns = 0;
  double input_tokens = 0;            // Appended per turn (user message or tool result).
  double output_tokens = 0;           // Model output per turn.
  double idle_seconds = 0;            // Gap between a session's requests.
  double fanout_probability = 0;      // Per agent turn: chance to spawn sub-agents.
  uint32_t max_fanout = 0;            // Sub-agents per spawn: uniform in [2, max_fanout].
  // The gap between a session's requests is a tool call (kTools) instead of idle_seconds.
  bool tool_calls = false;
};

// Fills the workload-dependent fields for `workload`:
//   chat:    8 system prompts of 1,500 tokens; 2-12 turns; 150 in, 350 out; 45 s idle
//   agentic: 4 system prompts of 6,000 tokens; 8-40 turns; 700 in (tool results), 150 out;
//            4 s idle; 10% of turns fan out 2-4 sub-agents of 3-10 turns each
//   coding-agent: 4 system prompts of 8,000 tokens; 10-60 turns; 1,200 in, 200 out; a tool
//            call between turns: read or search 45% (typically 2 s), edit 20% (1 s), run the
//            tests 15% (90 s), build 10% (180 s), search the web 5% (10 s), ask the user 5%
//            (300 s), each lasting its typical time x a log-normal factor (sigma 0.6, mean 1);
//            10% of turns fan out 2-4 sub-agents of 3-10 turns each
TraceGenOptions DefaultsFor(Workload workload);

// InvalidArgument for zero sessions, block size or turn counts, min_turns > max_turns,
// probabilities outside [0, 1], or non-positive rates.
Result<Trace> GenerateTrace(const TraceGenOptions& options);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_TRACE_GEN_H_
