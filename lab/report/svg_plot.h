// A small SVG plotter for the report: line plots (log or linear axes) and horizontal bar charts, with axes, ticks,
// a legend, one color per series and dashed peers. Output is a standalone <svg> element that works both inline in
// report.html and as a file of its own, so the report needs no JavaScript and no network.
//
// Every data mark carries data-series="<name>" and the <svg> carries data-series-count, so a test can check that
// each series was drawn.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lab::report {

struct Series {
  std::string name;
  std::string color;   // CSS color
  bool dashed = false; // peers
  std::vector<std::pair<double, double>> points;  // (x, y); non-positive values are dropped on a log axis
};

struct LinePlot {
  std::string id, title, x_label, y_label;
  bool log_x = true, log_y = true;
  std::vector<Series> series;
};

struct Bar {
  std::string group;   // the workload: bars of one group sit together under its label
  std::string series;  // the path: gives the color and the legend entry
  std::string color;
  bool dashed = false;
  double value = 0;
};

struct BarChart {
  std::string id, title, x_label;
  bool log_x = true;  // times span orders of magnitude between workloads
  std::vector<Bar> bars;
};

std::string render_svg(const LinePlot& plot);
std::string render_svg(const BarChart& chart);

// A stable color for the i-th series of the report (a colorblind-friendly palette, cycled).
std::string palette_color(std::size_t i);

// Escapes text for XML/HTML content and attribute values.
std::string xml_escape(const std::string& text);

}  // namespace lab::report
