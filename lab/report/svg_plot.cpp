#include "svg_plot.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace lab::report {
namespace {

// Plot area inside the SVG: margins leave room for tick labels, the title and (right) the legend.
struct Frame {
  double left, top, width, height;
};

// One axis: maps data values to [0, 1] and proposes tick positions with labels.
struct Axis {
  bool log = false;
  double lo = 0, hi = 1;  // in data units (log axes: decades rounded outwards)

  static Axis fit(double min, double max, bool log) {
    Axis a;
    a.log = log;
    if (log) {
      a.lo = std::pow(10.0, std::floor(std::log10(min)));
      a.hi = std::pow(10.0, std::ceil(std::log10(max)));
      if (a.hi <= a.lo) a.hi = a.lo * 10;
    } else {
      a.lo = std::min(0.0, min);  // linear axes start at zero: ratios between paths stay honest
      a.hi = max > a.lo ? max * 1.05 : a.lo + 1;
    }
    return a;
  }
  double unit(double v) const {
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (log) {
      for (double d = lo; d <= hi * 1.0001; d *= 10) t.push_back(d);
      if (t.size() <= 2) {  // less than two decades: add 2x and 5x so the axis can be read
        std::vector<double> more;
        for (double d : t)
          for (double m : {1.0, 2.0, 5.0})
            if (d * m <= hi * 1.0001) more.push_back(d * m);
        t = more;
      }
    } else {
      double step = std::pow(10.0, std::floor(std::log10((hi - lo) / 5)));
      if ((hi - lo) / step > 10) step *= 2;
      if ((hi - lo) / step > 10) step *= 2.5;
      for (double v = std::ceil(lo / step) * step; v <= hi * 1.0001; v += step) t.push_back(v);
    }
    return t;
  }
};

std::string tick_label(double v) {
  if (v == 0) return "0";
  double a = std::fabs(v);
  if (a >= 1e4 && std::fmod(a, 1024) == 0) return fmt::format("{}k", v / 1024);  // sequence lengths: 8k, 16k
  if (a >= 1e5 || a < 1e-3) return fmt::format("{:.0e}", v);
  return fmt::format("{:g}", v);
}

std::string header(const std::string& id, const std::string& title, int width, int height, std::size_t series) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" id=\"plot-{0}\" data-series-count=\"{4}\" "
      "viewBox=\"0 0 {2} {3}\" width=\"{2}\" height=\"{3}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<title>{1}</title>\n<rect x=\"0\" y=\"0\" width=\"{2}\" height=\"{3}\" fill=\"white\"/>\n"
      "<text x=\"{5}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{1}</text>\n",
      xml_escape(id), xml_escape(title), width, height, series, width / 2);
}

// Legend at the right of the frame: a line sample (dashed for peers) and the series' name.
std::string legend(const Frame& f, const std::vector<std::tuple<std::string, std::string, bool>>& entries) {
  std::string out;
  double x = f.left + f.width + 16, y = f.top + 8;
  for (const auto& [name, color, dashed] : entries) {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
                       "stroke-width=\"3\"{}/>\n<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                       x, y, x + 24, y, color, dashed ? " stroke-dasharray=\"6,4\"" : "", x + 30, y + 4,
                       xml_escape(name));
    y += 18;
  }
  return out;
}

std::string frame_box(const Frame& f) {
  return fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
                     "stroke=\"#444\"/>\n",
                     f.left, f.top, f.width, f.height);
}

// Vertical grid lines and labels of a horizontal axis.
std::string x_axis(const Frame& f, const Axis& a, const std::string& label) {
  std::string out;
  for (double t : a.ticks()) {
    double x = f.left + a.unit(t) * f.width;
    out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>\n"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
                       x, f.top, f.top + f.height, f.top + f.height + 16, tick_label(t));
  }
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", f.left + f.width / 2,
                     f.top + f.height + 36, xml_escape(label));
  return out;
}

}  // namespace

std::string palette_color(std::size_t i) {
  // Okabe–Ito, distinguishable with the common color-vision deficiencies.
  static const char* colors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
                                 "#F0E442"};
  return colors[i % (sizeof colors / sizeof *colors)];
}

std::string xml_escape(const std::string& text) {
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

std::string render_svg(const LinePlot& p) {
  const int width = 760, height = 420;
  const Frame f{70, 36, 470, 320};
  // Keep only points the axes can show, then fit the axes to them.
  std::vector<Series> shown;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : p.series) {
    Series kept = s;
    kept.points.clear();
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y) || (p.log_x && x <= 0) || (p.log_y && y <= 0)) continue;
      kept.points.emplace_back(x, y);
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
    std::sort(kept.points.begin(), kept.points.end());
    if (!kept.points.empty()) shown.push_back(std::move(kept));
  }
  std::string out = header(p.id, p.title, width, height, shown.size());
  if (shown.empty()) return out + "<text x=\"50%\" y=\"50%\" text-anchor=\"middle\">no measured rows</text>\n</svg>\n";
  const Axis ax = Axis::fit(x0, x1, p.log_x), ay = Axis::fit(y0, y1, p.log_y);
  out += x_axis(f, ax, p.x_label);
  for (double t : ay.ticks()) {
    double y = f.top + (1 - ay.unit(t)) * f.height;
    out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>\n"
                       "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                       f.left, y, f.left + f.width, f.left - 6, y + 4, tick_label(t));
  }
  out += fmt::format("<text transform=\"translate(18,{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     f.top + f.height / 2, xml_escape(p.y_label));
  out += frame_box(f);
  std::vector<std::tuple<std::string, std::string, bool>> entries;
  for (const Series& s : shown) {
    std::string pts;
    for (auto [x, y] : s.points)
      pts += fmt::format("{:.1f},{:.1f} ", f.left + ax.unit(x) * f.width, f.top + (1 - ay.unit(y)) * f.height);
    out += fmt::format("<polyline class=\"mark\" data-series=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" "
                       "stroke-width=\"2\"{}/>\n",
                       xml_escape(s.name), pts, s.color, s.dashed ? " stroke-dasharray=\"6,4\"" : "");
    for (auto [x, y] : s.points)
      out += fmt::format("<circle class=\"mark\" data-series=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" "
                         "fill=\"{}\"><title>{}: {:g}, {:.4g}</title></circle>\n",
                         xml_escape(s.name), f.left + ax.unit(x) * f.width, f.top + (1 - ay.unit(y)) * f.height,
                         s.color, xml_escape(s.name), x, y);
    entries.emplace_back(s.name, s.color, s.dashed);
  }
  return out + legend(f, entries) + "</svg>\n";
}

std::string render_svg(const BarChart& c) {
  // Group bars by workload, in order of first appearance; each group gets a label line above its bars.
  std::vector<std::string> groups;
  std::map<std::string, std::vector<const Bar*>> by_group;
  std::vector<std::tuple<std::string, std::string, bool>> entries;
  double v0 = INFINITY, v1 = -INFINITY;
  for (const Bar& b : c.bars) {
    if (!std::isfinite(b.value) || (c.log_x && b.value <= 0)) continue;
    if (!by_group.count(b.group)) groups.push_back(b.group);
    by_group[b.group].push_back(&b);
    v0 = std::min(v0, b.value), v1 = std::max(v1, b.value);
    if (std::none_of(entries.begin(), entries.end(), [&](auto& e) { return std::get<0>(e) == b.series; }))
      entries.emplace_back(b.series, b.color, b.dashed);
  }
  const double bar_h = 12, group_gap = 22;
  std::size_t n_bars = 0;
  for (auto& [g, bars] : by_group) n_bars += bars.size();
  const Frame f{20, 40, 560, groups.size() * group_gap + n_bars * (bar_h + 2) + 8};
  const int width = 800, height = static_cast<int>(f.top + f.height + 50);
  std::string out = header(c.id, c.title, width, height, entries.size());
  if (groups.empty()) return out + "<text x=\"50%\" y=\"50%\" text-anchor=\"middle\">no measured rows</text>\n</svg>\n";
  const Axis ax = Axis::fit(v0, v1, c.log_x);
  out += x_axis(f, ax, c.x_label) + frame_box(f);
  double y = f.top + 4;
  for (const std::string& g : groups) {
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" fill=\"#333\">{}</text>\n", f.left + 4,
                       y + 14, xml_escape(g));
    y += group_gap;
    for (const Bar* b : by_group[g]) {
      // On a log axis bars start at the axis minimum: the bar's end, not its area, carries the value.
      double w = std::max(1.0, ax.unit(b->value) * f.width);
      out += fmt::format("<rect class=\"mark\" data-series=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
                         "height=\"{}\" fill=\"{}\"{}><title>{} {}: {:.4g}</title></rect>\n",
                         xml_escape(b->series), f.left, y, w, bar_h, b->color,
                         // Peers: a pale bar with a dashed outline, like their dashed lines in the sweeps.
                         b->dashed ? fmt::format(" fill-opacity=\"0.25\" stroke=\"{}\" stroke-width=\"1.5\" "
                                                 "stroke-dasharray=\"4,3\"",
                                                 b->color)
                                   : std::string(),
                         xml_escape(g), xml_escape(b->series), b->value);
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\">{:.4g}</text>\n", f.left + w + 4,
                         y + bar_h - 2, b->value);
      y += bar_h + 2;
    }
  }
  // Bar legend: solid swatch for attnlab paths, dashed outline for peers.
  return out + legend(f, entries) + "</svg>\n";
}

}  // namespace lab::report
