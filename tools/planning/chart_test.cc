#include "tools/planning/chart.h"

#include <gtest/gtest.h>

namespace kvtier::planning {
namespace {

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

TEST(ChartTest, DrawsOneLinePerSeriesWithLegendAndEscapedText) {
  ChartOptions o;
  o.title = "Recompute <vs> reload";
  o.x_label = "prompt tokens";
  o.y_label = "seconds";
  o.log_x = true;
  o.marker_x = 300;
  o.marker_label = "crossover";
  const std::string svg = RenderLineChart(
      o, {{"recompute", {{100, 0.01}, {1000, 0.1}, {10000, 2}}, false},
          {"reload", {{100, 0.02}, {1000, 0.05}, {10000, 0.5}}, true}});
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("Recompute &lt;vs&gt; reload"), std::string::npos);
  EXPECT_NE(svg.find(">crossover<"), std::string::npos);
  EXPECT_NE(svg.find(">reload<"), std::string::npos);
  // Log axis: decade ticks 100, 1k (printed as 1000), 10k.
  EXPECT_NE(svg.find(">10k<"), std::string::npos);
}

TEST(ChartTest, NothingIsFetchedAndBadPointsAreDropped) {
  ChartOptions o;
  o.log_y = true;
  const std::string svg =
      RenderLineChart(o, {{"s", {{0, 0}, {1, -1}, {2, 5}, {3, 50}}, false}, {"empty", {}, false}});
  EXPECT_EQ(svg.find("href"), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("url("), std::string::npos);
  EXPECT_EQ(Count(svg, "<polyline"), 1u);
  EXPECT_NE(svg.find(">empty<"), std::string::npos);
  const std::string page = HtmlPage("A & B", svg);
  EXPECT_NE(page.find("<title>A &amp; B</title>"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::planning
