// The report page: built from result rows alone, so every experiment and every peer script feeds it through the
// docs/design.md §4 schema. One section per experiment (a table and its plots); a summary at the top.
#pragma once

#include <string>
#include <vector>

#include "rows_io.h"

namespace lab::report {

struct Plot {
  std::string id;   // file name under plots/ (without .svg), also the element id in the page
  std::string svg;  // a standalone <svg> document element
};

struct Report {
  std::string html;         // report.html, self-contained
  std::vector<Plot> plots;  // every plot the page shows, in page order
};

Report build_report(const std::vector<Row>& rows, const std::string& title, const std::vector<std::string>& sources);

}  // namespace lab::report
