#include "tools/planning/trace.h"

#include <gtest/gtest.h>

#include <sstream>

namespace kvtier::planning {
namespace {

Result<Trace> Parse(const std::string& text, bool strict = false) {
  std::istringstream in(text);
  TraceReadOptions o;
  o.strict = strict;
  return ParseTrace(in, o);
}

TEST(TraceTest, ReadsMooncakeLines) {
  Result<Trace> t = Parse(
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]})"
      "\n"
      R"({"timestamp": 27482, "input_length": 513, "output_length": 1, "hash_ids": [46, 60]})"
      "\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->block_tokens, 512u);
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_EQ(t->requests[0].hash_ids.size(), 14u);
  // 6955 = 13 x 512 + 299 and 513 = 512 + 1: the last block of each is partial.
  EXPECT_EQ(t->WholeBlocks(t->requests[0]), 13u);
  EXPECT_EQ(t->WholeBlocks(t->requests[1]), 1u);
  EXPECT_EQ(t->TotalBlockReferences(), 16u);
}

TEST(TraceTest, KvtierHeaderSetsBlockSizeAndTenants) {
  Result<Trace> t = Parse(
      "{\"kvtier_trace\": 1, \"block_tokens\": 16}\n"
      "{\"timestamp\": 5, \"input_length\": 32, \"hash_ids\": [1, 2], \"session\": \"s1\", "
      "\"tenant\": \"acme\"}\n"
      "{\"timestamp\": 1, \"input_length\": 16, \"hash_ids\": [1]}\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->block_tokens, 16u);
  ASSERT_EQ(t->tenants.size(), 2u);
  EXPECT_EQ(t->tenants[1], "acme");
  // Sorted by time: the default-tenant request at t=1 comes first.
  EXPECT_EQ(t->requests[0].timestamp_ms, 1u);
  EXPECT_EQ(t->requests[1].tenant, 1u);
  EXPECT_EQ(t->requests[1].session, "s1");

  std::ostringstream out;
  WriteTrace(*t, TraceFormat::kKvtier, out);
  std::istringstream back(out.str());
  Result<Trace> again = ParseTrace(back, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->block_tokens, 16u);
  EXPECT_EQ(again->requests[1].session, "s1");
  EXPECT_EQ(again->tenants[again->requests[1].tenant], "acme");
}

TEST(TraceTest, MalformedLinesAreReportedByNumberAndSkipped) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 512, \"hash_ids\": [1]}\n"
      "not json\n"
      "\n"
      "{\"timestamp\": -4, \"input_length\": 512, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 9, \"input_length\": 100, \"hash_ids\": [1, 2]}\n"
      "{\"timestamp\": 9, \"input_length\": 100}\n"
      "{\"timestamp\": 10, \"input_length\": 512, \"hash_ids\": [3]}\n";
  Result<Trace> t = Parse(text);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->requests.size(), 2u);
  EXPECT_EQ(t->skipped_lines, 4u);
  ASSERT_EQ(t->problems.size(), 4u);
  EXPECT_EQ(t->problems[0], "line 2: not valid JSON");
  EXPECT_EQ(t->problems[1].rfind("line 4: 'timestamp'", 0), 0u) << t->problems[1];
  EXPECT_EQ(t->problems[2], "line 5: 2 hash_ids for 100 tokens of 512-token blocks");
  EXPECT_EQ(t->problems[3].rfind("line 6:", 0), 0u);

  Result<Trace> strict = Parse(text, /*strict=*/true);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().message(), "line 2: not valid JSON");
}

TEST(TraceTest, RejectsBadHeader) {
  EXPECT_FALSE(Parse("{\"kvtier_trace\": 2, \"block_tokens\": 16}\n").ok());
  EXPECT_FALSE(Parse("{\"kvtier_trace\": 1, \"block_tokens\": 0}\n").ok());
}

TEST(TraceTest, SessionHintsAreReadCheckedAndWrittenBack) {
  Result<Trace> t = Parse(
      "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
      "{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1], \"session\": \"a\", "
      "\"retain_s\": 2.5}\n"
      "{\"timestamp\": 1, \"input_length\": 4, \"hash_ids\": [1], \"session\": \"a\", "
      "\"finished\": true}\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->HasHints());
  EXPECT_DOUBLE_EQ(t->requests[0].retain_seconds, 2.5);
  EXPECT_TRUE(t->requests[1].finished);
  std::ostringstream out;
  WriteTrace(*t, TraceFormat::kKvtier, out);
  Result<Trace> again = Parse(out.str());
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again->requests[0].retain_seconds, 2.5);
  EXPECT_TRUE(again->requests[1].finished);
  EXPECT_FALSE(Parse("{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1]}\n")->HasHints());
  // A hint needs a session, a positive retention under a day, and a boolean.
  for (const char* bad :
       {"{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1], \"retain_s\": 5}",
        "{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1], \"session\": \"a\", "
        "\"retain_s\": -1}",
        "{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1], \"session\": \"a\", "
        "\"retain_s\": 1e9}",
        "{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1], \"session\": \"a\", "
        "\"finished\": 1}"}) {
    Result<Trace> r = Parse(std::string(bad) + "\n", /*strict=*/true);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace kvtier::planning
