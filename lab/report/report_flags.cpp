#include "report_flags.h"

#include <filesystem>
#include <iterator>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "write_report.h"

namespace lab {

void add_report_flags(CLI::App& command, ReportFlags& flags, const std::string& default_dir) {
  const char* group = "Report";
  CLI::Option* report =
      command.add_option("--report", flags.dir, "write report.html, plots/*.svg, results.json and results.csv of "
                                                "this run to DIR (checked writable before anything runs)")
          ->type_name("DIR")->group(group);
  if (!default_dir.empty()) {
    flags.dir = default_dir;
    report->capture_default_str();
  }
  CLI::Option* merge = command.add_option("--merge", flags.merge, "peers' result rows (JSON lines, e.g. "
                                                                 "bench/peers.py output) to show next to ours")
                           ->type_name("FILE")->group(group);
  if (default_dir.empty()) merge->needs(report);
}

PendingReport::PendingReport(const ReportFlags& flags) : dir_(flags.dir) {
  if (!wanted()) return;
  report::prepare_directory(dir_);
  for (const std::string& file : flags.merge) {
    auto rows = report::read_rows(file, /*as_peer=*/true);
    peers_.insert(peers_.end(), std::make_move_iterator(rows.begin()), std::make_move_iterator(rows.end()));
    peer_sources_.push_back(std::filesystem::path(file).filename().string());
  }
}

void PendingReport::write(const std::vector<ResultRow>& rows, const std::string& title, std::FILE* out) const {
  if (!wanted()) return;
  std::vector<report::Row> all = report::to_report_rows(rows);
  all.insert(all.end(), peers_.begin(), peers_.end());
  std::vector<std::string> sources = {"this run"};
  sources.insert(sources.end(), peer_sources_.begin(), peer_sources_.end());
  const std::vector<std::string> written = report::write_report(dir_, all, title, sources);
  // written: report.html, the plots, results.json, results.csv.
  const std::filesystem::path root(dir_);
  const std::size_t plots = written.size() - 3;
  fmt::print(out, "Report: {} ({}, {}, {})\n", written.front(),
             plots == 0 ? std::string("no plots: nothing was timed")
                        : fmt::format("{} plot{} in {}", plots, plots == 1 ? "" : "s", (root / "plots").string()),
             (root / "results.json").string(), (root / "results.csv").string());
}

int run_with_report(const ReportFlags& flags, const std::string& title, bool json,
                    const std::function<Outcome()>& run) {
  const PendingReport report(flags);
  const Outcome outcome = run();
  report.write(outcome.rows, title, json ? stderr : stdout);
  return outcome.passed ? 0 : 1;
}

}  // namespace lab
