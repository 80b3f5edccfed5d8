// `attnlab report`: turns result rows (from any experiment, and from the peers' scripts) into report.html, one SVG
// per plot, results.json and results.csv. It reads rows only, never runs anything, so a report can be rebuilt on
// a laptop from rows measured on a GPU machine.
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "../experiment.h"
#include "html.h"
#include "rows_io.h"

namespace lab {
namespace {

namespace fs = std::filesystem;

struct ReportOptions {
  std::vector<std::string> rows, merge;
  std::string out, title = "attnlab report";
};

void make_directory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw std::runtime_error(fmt::format("cannot write to '{}': {}", dir.string(),
                                         ec ? ec.message() : "not a directory"));
}

// Writes a whole file and says so: the command's output is one line per file written.
void write_file(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write '{}'", file.string()));
  fmt::print("wrote {}\n", file.string());
}

int run_report(const ReportOptions& o) {
  // Read everything before writing anything: a bad line must not leave a half-written report behind.
  std::vector<report::Row> rows;
  std::vector<std::string> sources;
  for (const auto* list : {&o.rows, &o.merge})
    for (const std::string& file : *list) {
      auto more = report::read_rows(file, list == &o.merge);
      rows.insert(rows.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
      sources.push_back(fs::path(file).filename().string());
    }
  if (rows.empty()) throw std::runtime_error("no result rows in the input files");

  const report::Report r = report::build_report(rows, o.title, sources);
  const fs::path dir(o.out);
  make_directory(dir);  // first, so an error names the directory the user gave
  make_directory(dir / "plots");
  write_file(dir / "report.html", r.html);
  for (const report::Plot& p : r.plots)
    write_file(dir / "plots" / (p.id + ".svg"), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + p.svg);
  write_file(dir / "results.json", report::rows_to_json(rows));
  write_file(dir / "results.csv", report::rows_to_csv(rows));
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
