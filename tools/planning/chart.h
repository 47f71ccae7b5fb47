// Self-contained SVG line charts and HTML pages: no scripts, fonts, stylesheets or images
// are fetched, so a chart opens offline and can be committed next to the docs.

#ifndef KVTIER_TOOLS_PLANNING_CHART_H_
#define KVTIER_TOOLS_PLANNING_CHART_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier::planning {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order.
  bool dashed = false;
};

struct ChartOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;  // Points with x <= 0 are dropped on a log axis.
  bool log_y = false;
  int width = 900;    // Pixels.
  int height = 520;
  // Optional vertical marker, e.g. the crossover length; drawn when finite and in range.
  double marker_x = 0;
  std::string marker_label;
};

// An <svg> element. Series without drawable points are listed in the legend only.
std::string RenderLineChart(const ChartOptions& options, const std::vector<ChartSeries>& series);

// Escapes &, <, >, " for HTML/SVG text and attributes.
std::string HtmlEscape(std::string_view text);

// A complete HTML page with inline CSS around `body_html`.
std::string HtmlPage(std::string_view title, std::string_view body_html);

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_CHART_H_
