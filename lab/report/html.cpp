#include "html.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "svg_plot.h"

namespace lab::report {
namespace {

const char* const kDims[] = {"B", "T", "S", "N", "K", "Hqk"};

// A path as timed: CUDA-graph replays (`attnlab bench` or `attnlab sweep` with --graph) are their own series next
// to the ordinary calls.
std::string timed_path(const Row& r) { return r.flag("graph") ? r.text("path") + " (graph replay)" : r.text("path"); }

// Shown name of a path: peers are marked, so nobody mistakes a PyTorch number for one of ours.
std::string path_label(const Row& r) { return r.peer() ? timed_path(r) + " (peer)" : timed_path(r); }

// The workload of a row, without the path: everything that must match for two rows to be comparable.
std::string workload(const Row& r) {
  std::string direction = r.text("direction");
  std::string s = fmt::format("{}{} B={} T={} S={} N={}/{} H={}", direction.empty() ? "" : direction + " ",
                              r.text("dtype"), r.dim("B"), r.dim("T"), r.dim("S"), r.dim("N"), r.dim("K"),
                              r.dim("Hqk"));
  if (r.dim("Hv") && r.dim("Hv") != r.dim("Hqk")) s += fmt::format("/{}", r.dim("Hv"));
  if (r.flag("causal")) s += " causal";
  if (!r.text("window").empty()) s += " window=" + r.text("window");
  return s;
}

std::string num(const std::optional<double>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : "—";
}

// The dimension an experiment sweeps: named sweeps by name, otherwise the only shape key that varies (S is
// folded into T when it always equals T, as in a self-attention sequence sweep). Empty: not a sweep.
std::string swept_dimension(const std::string& experiment, const std::vector<const Row*>& rows) {
  if (experiment == "sweep-seq" || experiment == "sweep-te") return "T";
  if (experiment == "sweep-batch") return "B";
  // heads varies K, but MHA/GQA/MQA are three cases to compare side by side, not a scale: bars, not lines.
  if (experiment == "heads") return "";
  std::vector<std::string> varying;
  for (const char* d : kDims) {
    std::set<std::int64_t> values;
    for (const Row* r : rows) values.insert(r->dim(d));
    if (values.size() > 1) varying.push_back(d);
  }
  bool s_is_t = std::all_of(rows.begin(), rows.end(), [](const Row* r) { return r->dim("S") == r->dim("T"); });
  if (s_is_t) varying.erase(std::remove(varying.begin(), varying.end(), "S"), varying.end());
  return varying.size() == 1 ? varying[0] : "";
}

// Series of a sweep: one per path, split by dtype/direction/causal when the experiment mixes them.
std::string series_name(const Row& r, bool by_dtype, bool by_direction, bool by_causal) {
  std::string s = path_label(r);
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on `" " + std::string` here.
  if (by_dtype) s.append(" ").append(r.text("dtype"));
  if (by_direction) s.append(" ").append(r.text("direction"));
  if (by_causal) s += r.flag("causal") ? " causal" : " non-causal";
  return s;
}

std::string slug(const std::string& text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return out;
}

const char* kStyle = R"(body{font-family:sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f2f2f2;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.peer td{color:#555;font-style:italic}tr.fail td{color:#a33}figure{margin:1em 0}
dl.summary{display:grid;grid-template-columns:max-content auto;gap:2px 16px}dt{font-weight:bold}
nav li{font-size:13px})";

}  // namespace

Report build_report(const std::vector<Row>& rows, const std::string& title, const std::vector<std::string>& sources) {
  // Experiments in order of first appearance; paths get one color for the whole report.
  std::vector<std::string> experiments;
  std::map<std::string, std::vector<const Row*>> by_experiment;
  std::map<std::string, std::string> colors;
  std::set<std::string> devices, dtypes, ours, peers;
  for (const Row& r : rows) {
    const std::string e = r.text("experiment");
    if (!by_experiment.count(e)) experiments.push_back(e);
    by_experiment[e].push_back(&r);
    if (!colors.count(timed_path(r))) colors[timed_path(r)] = palette_color(colors.size());
    devices.insert(r.text("device"));
    dtypes.insert(r.text("dtype"));
    (r.peer() ? peers : ours).insert(r.text("path"));
  }
  auto join = [](const auto& items) {
    std::string s;
    for (const auto& i : items) s += (s.empty() ? "" : ", ") + xml_escape(i.empty() ? "?" : i);
    return s.empty() ? std::string("—") : s;
  };

  Report report;
  std::string body;
  for (const std::string& e : experiments) {
    const auto& rs = by_experiment[e];
    body += fmt::format("<section id=\"exp-{}\">\n<h2>{}</h2>\n", slug(e), xml_escape(e));
    // Table: rows grouped by workload, paths in row order within it.
    std::vector<std::string> workloads;
    for (const Row* r : rs)
      if (std::find(workloads.begin(), workloads.end(), workload(*r)) == workloads.end())
        workloads.push_back(workload(*r));
    body += "<table>\n<tr><th>workload</th><th>path</th><th>ms median [min–max]</th><th>TFLOP/s</th>"
            "<th>GB/s</th><th>ok / note</th></tr>\n";
    for (const std::string& w : workloads)
      for (const Row* r : rs) {
        if (workload(*r) != w) continue;
        std::string ms = r->number("ms_median")
                             ? fmt::format("{:.4g} [{}–{}]", *r->number("ms_median"), num(r->number("ms_min"), "{:.4g}"),
                                           num(r->number("ms_max"), "{:.4g}"))
                             : "—";
        body += fmt::format("<tr class=\"{}\"><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                            "<td class=\"n\">{}</td><td>{}{}</td></tr>\n",
                            r->flag("ok") ? (r->peer() ? "peer" : "") : "fail", xml_escape(w),
                            xml_escape(path_label(*r)), ms, num(r->number("tflops"), "{:.4g}"),
                            num(r->number("gbps"), "{:.4g}"), r->flag("ok") ? "ok" : "not run",
                            r->text("note").empty() ? "" : " — " + xml_escape(r->text("note")));
      }
    body += "</table>\n";

    // Plots: only rows that ran and were timed.
    std::vector<const Row*> measured;
    for (const Row* r : rs)
      if (r->measured()) measured.push_back(r);
    if (measured.empty()) {
      body += "<p>No timed rows: nothing to plot.</p>\n</section>\n";
      continue;
    }
    std::vector<Plot> plots;
    const std::string dim = swept_dimension(e, rs);
    if (!dim.empty()) {
      auto varies = [&](const char* key) {
        std::set<std::string> v;
        for (const Row* r : measured) v.insert(r->text(key));
        return v.size() > 1;
      };
      const bool by_dtype = varies("dtype"), by_direction = varies("direction"), by_causal = varies("causal");
      LinePlot ms{slug(e) + "-ms", e + ": time vs " + dim, dim, "ms (median)", true, true, {}};
      LinePlot tf{slug(e) + "-tflops", e + ": TFLOP/s vs " + dim, dim, "TFLOP/s", true, false, {}};
      std::vector<std::string> names;
      for (const Row* r : measured) {
        std::string name = series_name(*r, by_dtype, by_direction, by_causal);
        auto it = std::find(names.begin(), names.end(), name);
        if (it == names.end()) {
          names.push_back(name);
          ms.series.push_back({name, colors[timed_path(*r)], r->peer(), {}});
          tf.series.push_back({name, colors[timed_path(*r)], r->peer(), {}});
          it = names.end() - 1;
        }
        std::size_t i = it - names.begin();
        double x = static_cast<double>(r->dim(dim.c_str()));
        ms.series[i].points.emplace_back(x, *r->number("ms_median"));
        if (r->number("tflops")) tf.series[i].points.emplace_back(x, *r->number("tflops"));
      }
      plots.push_back({ms.id, render_svg(ms)});
      plots.push_back({tf.id, render_svg(tf)});
    } else {
      BarChart chart{slug(e) + "-ms", e + ": time per call (ms, median, log scale)", "ms", true, {}};
      for (const Row* r : measured)
        chart.bars.push_back({workload(*r), path_label(*r), colors[timed_path(*r)], r->peer(),
                              *r->number("ms_median")});
      plots.push_back({chart.id, render_svg(chart)});
    }
    for (Plot& p : plots) {
      body += fmt::format("<figure data-plot=\"{}\">\n{}</figure>\n", p.id, p.svg);
      report.plots.push_back(std::move(p));
    }
    body += "</section>\n";
  }

  std::string nav;
  for (const Plot& p : report.plots)
    nav += fmt::format("<li class=\"plot-link\" data-plot=\"{0}\"><a href=\"#plot-{0}\">{0}</a> "
                       "(<a href=\"plots/{0}.svg\">svg</a>)</li>\n",
                       p.id);
  report.html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{0}</title>\n<style>{1}</style>\n"
      "</head>\n<body>\n<h1>{0}</h1>\n<dl class=\"summary\">\n<dt>device</dt><dd>{2}</dd>\n<dt>rows</dt><dd>{3} "
      "from {4}</dd>\n<dt>experiments</dt><dd>{5}</dd>\n<dt>paths</dt><dd>{6}</dd>\n<dt>peers</dt><dd>{7}</dd>\n"
      "<dt>dtypes</dt><dd>{8}</dd>\n</dl>\n<p>Times are medians of several timed groups (min–max in brackets). "
      "Peers ran the same shapes with their own libraries and write the same row keys; they are drawn dashed.</p>\n"
      "<nav><h2>Plots</h2>\n<ul id=\"plots\">\n{9}</ul></nav>\n{10}</body>\n</html>\n",
      xml_escape(title), kStyle, join(devices), rows.size(), join(sources), join(experiments), join(ours),
      join(peers), join(dtypes), nav, body);
  return report;
}

}  // namespace lab::report
