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

TEST(TraceGenTest, SessionsFinishUnlessSubAgentsRunOnAndCodingAgentsHintTheirToolCalls) {
  for (Workload w : {Workload::kChat, Workload::kAgentic, Workload::kCodingAgent}) {
    TraceGenOptions o = DefaultsFor(w);
    o.sessions = 30;
    Result<Trace> t = GenerateTrace(o);
    ASSERT_TRUE(t.ok());
    EXPECT_TRUE(t->HasHints());
    // The last request of each session, and only it, is finished, unless sub-agents forked
    // from its context send requests after it: they still extend it.
    std::map<std::string, uint64_t> last;
    std::map<std::string, int> finished;
    for (const TraceRequest& r : t->requests) {
      last[r.session] = std::max(last[r.session], r.timestamp_ms);
      finished[r.session] += r.finished ? 1 : 0;
    }
    int open_parents = 0;
    for (const auto& [session, n] : finished) {
      uint64_t sub_agents_end = 0;
      for (auto it = last.upper_bound(session + ".a"); it != last.end(); ++it) {
        if (it->first.rfind(session + ".a", 0) != 0) break;
        sub_agents_end = std::max(sub_agents_end, it->second);
      }
      EXPECT_EQ(n, sub_agents_end > last[session] ? 0 : 1) << session;
      open_parents += n == 0 ? 1 : 0;
    }
    if (w != Workload::kChat) {
      EXPECT_GT(open_parents, 0);
    }
    std::set<double> retains;
    for (const TraceRequest& r : t->requests) {
      if (r.finished) {
        EXPECT_EQ(r.timestamp_ms, last[r.session]) << r.session;
      }
      if (r.retain_seconds > 0) retains.insert(r.retain_seconds);
      EXPECT_FALSE(r.finished && r.retain_seconds > 0);
    }
    if (w != Workload::kCodingAgent) {
      EXPECT_TRUE(retains.empty());
      continue;
    }
    // Twice a tool's typical time, from the tools' table: what the framework knows.
    EXPECT_EQ(retains, (std::set<double>{2, 4, 20, 180, 360, 600}));
  }
}

// A digest of a trace's requests (times, lengths, block ids), hints aside.
uint64_t RequestsDigest(const Trace& t) {
  uint64_t h = 0;
  for (const TraceRequest& r : t.requests) {
    uint64_t x = r.timestamp_ms * 1000003 + r.input_length * 131 + r.output_length;
    for (uint64_t id : r.hash_ids) x = x * 31 + id;
    h = h * 1099511628211ULL + x;
  }
  return h;
}

TEST(TraceGenTest, HintsChangeNoRequestOfTheChatAndAgenticTraces) {
  // docs/store.md's tables replay these traces as generated before hints existed: the same
  // seeds still give the same requests (digests of the earlier generator's output).
  Result<Trace> chat = GenerateTrace(DefaultsFor(Workload::kChat));
  Result<Trace> agentic = GenerateTrace(DefaultsFor(Workload::kAgentic));
  ASSERT_TRUE(chat.ok() && agentic.ok());
  EXPECT_EQ(chat->requests.size(), 2705u);
  EXPECT_EQ(RequestsDigest(*chat), 1318452530696092468ULL);
  EXPECT_EQ(agentic->requests.size(), 28622u);
  EXPECT_EQ(RequestsDigest(*agentic), 11858762500794208213ULL);
}

}  // namespace
}  // namespace kvtier::planning
