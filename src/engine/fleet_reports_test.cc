// Fleet reports: their encoding, and a reader of a real SharedFsTier's records keeping each
// node's newest report, its last one when the newest does not read, and forgetting the rest.

#include "src/engine/fleet_reports.h"

#include <gtest/gtest.h>

#include <string>

#include "src/tier/sharedfs/shared_fs_test_util.h"
#include "src/tier/sharedfs/shared_fs_tier.h"

namespace kvtier {
namespace {

using testing_g4::ScratchDir;

constexpr uint64_t kSecond = 1'000'000;
constexpr uint64_t kT0 = 1'700'000'000 * kSecond;

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

NodeReport Report(const std::string& node, uint64_t time_us, uint64_t reads) {
  NodeReport r;
  r.node = node;
  r.time_us = time_us;
  r.shared_hits = reads;
  r.shared_read_bytes = reads << 16;
  r.shared_reads_coalesced = 7;
  r.shared_checks_coalesced = 9;
  return r;
}

TEST(FleetReportsTest, AReportRoundTripsAndGarbageIsRejected) {
  NodeReport r = Report("node-a", kT0, 12);
  r.shared_misses = 1;
  r.shared_written_bytes = 2;
  r.shared_puts = 3;
  r.shared_errors = 4;
  Result<NodeReport> back = DecodeNodeReport(Bytes(EncodeNodeReport(r)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->node, "node-a");
  EXPECT_EQ(back->time_us, kT0);
  for (const auto& [name, field] : NodeReport::kCounters) {
    EXPECT_EQ((*back).*field, r.*field) << name;
  }
  for (const std::string& bad :
       {std::string(""), std::string("[]"), std::string(R"({"v":2,"node":"a","time_us":1})"),
        std::string(R"({"v":1,"node":"a","time_us":1})"),
        std::string(R"({"v":1,"node":"a","time_us":-1,"shared_hits":0})")}) {
    EXPECT_EQ(DecodeNodeReport(Bytes(bad)).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(NodeReportName("a", kT0), "fleet.a.00001700000000000000");
}

TEST(FleetReportsTest, TheNewestOfEachNodeIsReadAndTheGoneAndSupersededAreDeleted) {
  ScratchDir dir;
  SharedFsTierOptions o;
  o.root = dir.path();
  o.node_id = "r";
  Result<std::unique_ptr<SharedFsTier>> tier = SharedFsTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  SharedTier* g4 = tier->get();
  auto write = [&](const NodeReport& r) {
    const std::string body = EncodeNodeReport(r);
    ASSERT_TRUE(g4->CreateRecord(NodeReportName(r.node, r.time_us), Bytes(body)).ok());
  };
  const uint64_t now = kT0 + 100 * kSecond;
  write(Report("a", now - 1 * kSecond, 5));
  write(Report("a", now - 60 * kSecond, 1));   // Superseded by more than 30 s: deleted.
  write(Report("a", now - 20 * kSecond, 3));   // Superseded by less: left to its node.
  write(Report("b", now - 2 * kSecond, 8));
  write(Report("r", now, 99));                 // The reader's own: never listed.
  write(Report("gone", kT0 - kSecond, 4));     // Before forget_before_us: deleted.
  ASSERT_TRUE(g4->CreateRecord("fleet.other", Bytes("{}")).ok());  // Not a report's name.
  std::vector<NodeReport> reports;
  uint64_t skipped = 0;
  ASSERT_TRUE(ReadNodeReports(g4, "r", kT0, 30 * kSecond, &reports, &skipped).ok());
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].node, "a");
  EXPECT_EQ(reports[0].shared_hits, 5u);
  EXPECT_EQ(reports[1].node, "b");
  EXPECT_EQ(reports[1].shared_hits, 8u);
  EXPECT_EQ(skipped, 0u);
  Result<std::vector<std::string>> left = g4->ListRecords("fleet.");
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, (std::vector<std::string>{
                       NodeReportName("a", now - 20 * kSecond), NodeReportName("a", now - kSecond),
                       NodeReportName("b", now - 2 * kSecond), "fleet.other",
                       NodeReportName("r", now)}));

  // b's next report does not decode: b keeps its last, counted. a's node deleted its report
  // (it stopped): a leaves.
  ASSERT_TRUE(g4->CreateRecord(NodeReportName("b", now), Bytes("not json")).ok());
  for (uint64_t ago : {1, 20}) {
    ASSERT_TRUE(g4->DeleteRecord(NodeReportName("a", now - ago * kSecond)).ok());
  }
  ASSERT_TRUE(ReadNodeReports(g4, "r", kT0, 30 * kSecond, &reports, &skipped).ok());
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].node, "b");
  EXPECT_EQ(reports[0].shared_hits, 8u);
  EXPECT_EQ(skipped, 1u);
}

}  // namespace
}  // namespace kvtier
