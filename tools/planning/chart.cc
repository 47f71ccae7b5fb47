#include "tools/planning/chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tools/planning/units.h"

namespace kvtier::planning {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr int kLeft = 90, kRight = 30, kTop = 50, kBottom = 60;

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;

  double Norm(double v) const {
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
};

// 1-2-5 steps for linear axes, decades (with 2 and 5 when few) for log axes.
std::vector<double> Ticks(const Axis& a) {
  std::vector<double> ticks;
  if (a.log) {
    const int first = static_cast<int>(std::floor(std::log10(a.lo)));
    const int last = static_cast<int>(std::ceil(std::log10(a.hi)));
    const bool dense = last - first <= 3;
    for (int e = first; e <= last; ++e) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (m != 1.0 && !dense) continue;
        const double v = m * std::pow(10.0, e);
        if (v >= a.lo * (1 - 1e-9) && v <= a.hi * (1 + 1e-9)) ticks.push_back(v);
      }
    }
    return ticks;
  }
  const double raw = (a.hi - a.lo) / 6;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  for (double v = std::ceil(a.lo / step) * step; v <= a.hi + step * 1e-9; v += step) {
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  }
  return ticks;
}

std::string TickLabel(double v) {
  const double a = std::fabs(v);
  if (a == 0) return "0";
  if (a >= 1e9) return Format("%gG", v / 1e9);
  if (a >= 1e6) return Format("%gM", v / 1e6);
  if (a >= 1e4) return Format("%gk", v / 1e3);
  return Format("%g", v);
}

Axis FitAxis(const std::vector<double>& values, bool log) {
  Axis a;
  a.log = log;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (double v : values) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) {
    lo = log ? 1 : 0;
    hi = log ? 10 : 1;
  }
  if (log) {
    a.lo = std::pow(10.0, std::floor(std::log10(lo)));
    a.hi = std::pow(10.0, std::ceil(std::log10(hi)));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
  } else {
    a.lo = std::min(0.0, lo);
    a.hi = hi > a.lo ? hi * 1.05 : a.lo + 1;
  }
  return a;
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string RenderLineChart(const ChartOptions& o, const std::vector<ChartSeries>& series) {
  auto drawable = [&o](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!o.log_x || x > 0) && (!o.log_y || y > 0);
  };
  std::vector<double> xs, ys;
  for (const ChartSeries& s : series) {
    for (auto [x, y] : s.points) {
      if (!drawable(x, y)) continue;
      xs.push_back(x);
      ys.push_back(y);
    }
  }
  const Axis ax = FitAxis(xs, o.log_x);
  const Axis ay = FitAxis(ys, o.log_y);
  const double pw = o.width - kLeft - kRight;
  const double ph = o.height - kTop - kBottom;
  auto px = [&](double x) { return kLeft + ax.Norm(x) * pw; };
  auto py = [&](double y) { return kTop + (1 - ay.Norm(y)) * ph; };

  std::string svg = Format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"13\">\n",
      o.width, o.height, o.width, o.height);
  svg += Format("<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", o.width, o.height);
  svg += Format("<text x=\"%d\" y=\"28\" font-size=\"17\" font-weight=\"bold\">%s</text>\n", kLeft,
                HtmlEscape(o.title).c_str());
  for (double t : Ticks(ax)) {
    const double x = px(t);
    svg += Format("<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", x,
                  kTop, x, kTop + ph);
    svg += Format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#444\">%s</text>\n", x,
                  kTop + ph + 18, TickLabel(t).c_str());
  }
  for (double t : Ticks(ay)) {
    const double y = py(t);
    svg += Format("<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", kLeft,
                  y, kLeft + pw, y);
    svg += Format("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#444\">%s</text>\n",
                  kLeft - 8, y + 4, TickLabel(t).c_str());
  }
  svg += Format("<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                "stroke=\"#888\"/>\n",
                kLeft, kTop, pw, ph);
  svg += Format("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", kLeft + pw / 2,
                o.height - 15, HtmlEscape(o.x_label).c_str());
  svg += Format("<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
                kTop + ph / 2, HtmlEscape(o.y_label).c_str());
  if (!o.marker_label.empty() && std::isfinite(o.marker_x) && (!o.log_x || o.marker_x > 0) &&
      o.marker_x >= ax.lo && o.marker_x <= ax.hi) {
    const double x = px(o.marker_x);
    svg += Format("<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
                  "stroke-dasharray=\"4 4\"/>\n",
                  x, kTop, x, kTop + ph);
    svg += Format("<text x=\"%.1f\" y=\"%d\" fill=\"#333\">%s</text>\n", x + 4, kTop + 14,
                  HtmlEscape(o.marker_label).c_str());
  }
  for (size_t i = 0; i < series.size(); ++i) {
    const ChartSeries& s = series[i];
    const char* color = kPalette[i % std::size(kPalette)];
    std::string points;
    for (auto [x, y] : s.points) {
      if (!drawable(x, y)) continue;
      points += Format("%.1f,%.1f ", px(x), py(y));
    }
    if (!points.empty()) {
      svg += Format("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\"%s points=\"%s\"/>\n",
                    color, s.dashed ? " stroke-dasharray=\"8 5\"" : "", points.c_str());
    }
    const double ly = kTop + 18 + 20.0 * static_cast<double>(i);
    svg += Format("<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"3\"%s/>\n",
                  kLeft + 12, ly, kLeft + 40, ly, color,
                  s.dashed ? " stroke-dasharray=\"8 5\"" : "");
    svg += Format("<text x=\"%d\" y=\"%.1f\">%s</text>\n", kLeft + 46, ly + 4,
                  HtmlEscape(s.name).c_str());
  }
  svg += "</svg>\n";
  return svg;
}

std::string HtmlPage(std::string_view title, std::string_view body_html) {
  std::string page = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>";
  page += HtmlEscape(title);
  page +=
      "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}"
      "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 10px;"
      "text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}"
      "</style></head><body>\n<h1>";
  page += HtmlEscape(title);
  page += "</h1>\n";
  page += body_html;
  page += "\n</body></html>\n";
  return page;
}

}  // namespace kvtier::planning
