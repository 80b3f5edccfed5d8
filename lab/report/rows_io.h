// Result rows as the report reads them: any JSON object per line (docs/design.md §4 keys, plus whatever extras an
// experiment or a peer script wrote). Rows are kept as JSON so that keys this code does not know survive into
// results.json and results.csv unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lab::report {

struct Row {
  nlohmann::ordered_json fields;  // the object as read, keys in file order

  std::string text(const char* key) const;            // "" when absent or null; numbers/bools as written
  std::optional<double> number(const char* key) const;  // absent, null or not a number: nullopt
  std::int64_t dim(const char* key) const;             // shape keys; 0 when absent
  bool flag(const char* key) const;                    // true only for JSON true
  bool peer() const { return flag("peer"); }
  bool measured() const { return flag("ok") && number("ms_median").has_value(); }
};

// Reads one JSON-lines file. Blank lines are skipped. Throws std::runtime_error naming file:line for a line that
// is not a JSON object, and naming the file when it cannot be read. as_peer marks every row "peer": true
// (the --merge inputs), so peers that forgot the key are still shown as peers.
std::vector<Row> read_rows(const std::string& file, bool as_peer);

// The docs/design.md §4 keys, in order: results.csv's first columns.
const std::vector<std::string>& schema_keys();

// results.json: all rows, one array. results.csv: §4 keys, then every other key in order of first appearance.
std::string rows_to_json(const std::vector<Row>& rows);
std::string rows_to_csv(const std::vector<Row>& rows);

}  // namespace lab::report
