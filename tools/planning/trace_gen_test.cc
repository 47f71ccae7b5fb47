#include "tools/planning/trace_gen.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

namespace kvtier::planning {
namespace {

std::string Serialize(const Trace& t) {
  std::ostringstream out;
  WriteTrace(t, TraceFormat::kKvtier, out);
  return out.str();
}

TEST(TraceGenTest, SameSeedSameTraceOtherSeedOtherTrace) {
  TraceGenOptions o = DefaultsFor(Workload::kAgentic);
  o.sessions = 20;
  Result<Trace> a = GenerateTrace(o);
  Result<Trace> b = GenerateTrace(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Serialize(*a), Serialize(*b));
  o.seed = 2;
  Result<Trace> c = GenerateTrace(o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(Serialize(*a), Serialize(*c));
}

TEST(TraceGenTest, TurnsExtendThePreviousPromptAndSessionsShareSystemPrompts) {
  TraceGenOptions o = DefaultsFor(Workload::kChat);
  o.sessions = 30;
  Result<Trace> t = GenerateTrace(o);
  ASSERT_TRUE(t.ok());
  // Within a session each prompt starts with every full block of the previous one.
  std::map<std::string, const TraceRequest*> last;
  std::set<uint64_t> first_blocks;
  for (const TraceRequest& r : t->requests) {
    ASSERT_EQ(r.hash_ids.size(), (r.input_length + 511) / 512);
    auto it = last.find(r.session);
    if (it != last.end()) {
      const TraceRequest& prev = *it->second;
      const size_t full = prev.input_length / 512;
      ASSERT_GE(r.hash_ids.size(), full);
      for (size_t i = 0; i < full; ++i) EXPECT_EQ(r.hash_ids[i], prev.hash_ids[i]);
    } else {
      first_blocks.insert(r.hash_ids[0]);
    }
    last[r.session] = &r;
  }
  // 30 sessions start from at most 8 distinct system prompts.
  EXPECT_LE(first_blocks.size(), 8u);
  EXPECT_GT(last.size(), 20u);
}

TEST(TraceGenTest, AgentsFanOutSubAgentsAndTheRequestCapHolds) {
  TraceGenOptions o = DefaultsFor(Workload::kAgentic);
  o.sessions = 50;
  o.max_requests = 300;
  Result<Trace> t = GenerateTrace(o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->requests.size(), 300u);
  bool saw_subagent = false;
  for (const TraceRequest& r : t->requests) saw_subagent |= r.session.find(".a") != std::string::npos;
  EXPECT_TRUE(saw_subagent);
}

TEST(TraceGenTest, RejectsNonsense) {
  TraceGenOptions o = DefaultsFor(Workload::kChat);
  o.min_turns = 5;
  o.max_turns = 2;
  EXPECT_FALSE(GenerateTrace(o).ok());
  o = DefaultsFor(Workload::kAgentic);
  o.fanout_probability = 1.5;
  EXPECT_FALSE(GenerateTrace(o).ok());
  EXPECT_FALSE(ParseWorkload("batch").ok());
}

}  // namespace
}  // namespace kvtier::planning
