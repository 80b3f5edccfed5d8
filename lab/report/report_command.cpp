// `attnlab report`: turns result rows (from any experiment, and from the peers' scripts) into report.html, one SVG
// per plot, results.json and results.csv. It reads rows only, never runs anything, so a report can be rebuilt on
// a laptop from rows measured on a GPU machine. The writing itself is write_report.h's, shared with --report.
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "../experiment.h"
#include "rows_io.h"
#include "write_report.h"

namespace lab {
namespace {

struct ReportOptions {
  std::vector<std::string> rows, merge;
  std::string out, title = "attnlab report";
};

int run_report(const ReportOptions& o) {
  // Read everything before writing anything: a bad line must not leave a half-written report behind.
  std::vector<report::Row> rows;
  std::vector<std::string> sources;
  for (const auto* list : {&o.rows, &o.merge})
    for (const std::string& file : *list) {
      auto more = report::read_rows(file, list == &o.merge);
      rows.insert(rows.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
      sources.push_back(std::filesystem::path(file).filename().string());
    }
  if (rows.empty()) throw std::runtime_error("no result rows in the input files");
  // The command's output is one line per file written.
  for (const std::string& file : report::write_report(o.out, rows, o.title, sources)) fmt::print("wrote {}\n", file);
  return 0;
}

}  // namespace

Action attach_report(CLI::App& command) {
  auto o = std::make_shared<ReportOptions>();
  command.add_option("rows", o->rows, "result rows (JSON lines) from attnlab experiments")->required();
  command.add_option("--merge", o->merge, "more rows, marked as peers (bench/peers.py output)");
  command.add_option("--out", o->out, "directory for report.html, plots/, results.json, results.csv")->required();
  command.add_option("--title", o->title, "the report's title")->capture_default_str();
  return [o] { return run_report(*o); };
}

}  // namespace lab
