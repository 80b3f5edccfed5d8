// --report DIR and --merge FILE... on the experiments that produce rows (compare, causal, bench, sweep, heads) and
// on `attnlab lab`: the rows the command measured become the same report `attnlab report` writes.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "../experiment.h"
#include "../results.h"
#include "rows_io.h"

namespace CLI {
class App;
}

namespace lab {

struct ReportFlags {
  std::string dir;                 // empty: no report
  std::vector<std::string> merge;  // peers' rows (JSON lines), drawn as peers
};

// Declares --report and --merge (which needs --report). `default_dir` non-empty: --report has that default.
void add_report_flags(CLI::App& command, ReportFlags& flags, const std::string& default_dir = "");

// A report to be written once the command has its rows. Made before anything runs: it checks that the directory
// can be written and reads the --merge files, so a bad folder or a bad peers file stops the command at once.
class PendingReport {
 public:
  explicit PendingReport(const ReportFlags& flags);
  bool wanted() const { return !dir_.empty(); }
  // Writes the report from `rows` (and the peers' rows) and prints one line saying where to `out`.
  void write(const std::vector<ResultRow>& rows, const std::string& title, std::FILE* out) const;

 private:
  std::string dir_;
  std::vector<report::Row> peers_;
  std::vector<std::string> peer_sources_;
};

// An experiment's action with --report: prepares the report, runs, writes the report from the outcome's rows (also
// when a check failed: the rows say which), and returns the exit status (0 when the outcome passed). `json`: the
// report's line goes to stderr so stdout stays JSON lines.
int run_with_report(const ReportFlags& flags, const std::string& title, bool json, const std::function<Outcome()>& run);

}  // namespace lab
