// Writing a report to a directory: report.html, plots/*.svg, results.json and results.csv. `attnlab report` calls
// it with rows read from files; every experiment's --report and `attnlab lab` call it with the rows they measured.
#pragma once

#include <string>
#include <vector>

#include "../results.h"
#include "rows_io.h"

namespace lab::report {

// Creates DIR and DIR/plots and checks that a file can be created there, so that an unwritable folder stops a
// command before it measures anything. Throws std::runtime_error "cannot write to 'DIR': <why>".
void prepare_directory(const std::string& dir);

// The lab's rows as the report reads them (the same JSON a --jsonl file holds).
std::vector<Row> to_report_rows(const std::vector<ResultRow>& rows);

// Builds the report from `rows` and writes every file under `dir` (prepared here too). `sources` names where the
// rows came from (file names, "this run"). Returns the files written, report.html first.
std::vector<std::string> write_report(const std::string& dir, const std::vector<Row>& rows, const std::string& title,
                                      const std::vector<std::string>& sources);

}  // namespace lab::report
