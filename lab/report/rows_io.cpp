#include "rows_io.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace lab::report {
namespace {

using Json = nlohmann::ordered_json;

const Json* find(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A CSV cell: strings bare, other values as JSON, quoted when they hold a separator, a quote or a line break.
std::string csv_cell(const Json* v) {
  if (!v || v->is_null()) return "";
  std::string s = v->is_string() ? v->get<std::string>() : v->dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the bracket names nothing a user can act on.
std::string plain_message(const std::string& what) {
  auto close = what.find("] ");
  return what.rfind("[json.", 0) == 0 && close != std::string::npos ? what.substr(close + 2) : what;
}

}  // namespace

std::string Row::text(const char* key) const {
  const Json* v = find(fields, key);
  if (!v) return "";
  return v->is_string() ? v->get<std::string>() : v->dump();
}

std::optional<double> Row::number(const char* key) const {
  const Json* v = find(fields, key);
  if (!v || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

std::int64_t Row::dim(const char* key) const {
  const Json* v = find(fields, key);
  return v && v->is_number() ? v->get<std::int64_t>() : 0;
}

bool Row::flag(const char* key) const {
  const Json* v = find(fields, key);
  return v && v->is_boolean() && v->get<bool>();
}

std::vector<Row> read_rows(const std::string& file, bool as_peer) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(fmt::format("cannot read '{}'", file));
  std::vector<Row> rows;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Row row;
    try {
      row.fields = Json::parse(line);
    } catch (const Json::exception& e) {
      throw std::runtime_error(fmt::format("{}:{}: invalid JSON: {}", file, number, plain_message(e.what())));
    }
    if (!row.fields.is_object())
      throw std::runtime_error(fmt::format("{}:{}: not a JSON object (one result row per line)", file, number));
    for (const char* key : {"experiment", "path"})
      if (row.text(key).empty())
        throw std::runtime_error(fmt::format("{}:{}: the row has no \"{}\"", file, number, key));
    if (as_peer) row.fields["peer"] = true;
    rows.push_back(std::move(row));
  }
  if (in.bad()) throw std::runtime_error(fmt::format("cannot read '{}'", file));
  return rows;
}

const std::vector<std::string>& schema_keys() {
  static const std::vector<std::string> keys = {
      "experiment", "path",     "device", "dtype",  "B",      "T",    "S",           "N",  "K",   "Hqk", "Hv",
      "causal",     "window",   "ms_median", "ms_min", "ms_max", "tflops", "gbps", "max_abs_err", "ok", "note"};
  return keys;
}

std::string rows_to_json(const std::vector<Row>& rows) {
  Json all = Json::array();
  for (const Row& r : rows) all.push_back(r.fields);
  return all.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string rows_to_csv(const std::vector<Row>& rows) {
  std::vector<std::string> columns = schema_keys();
  for (const Row& r : rows)
    for (auto it = r.fields.begin(); it != r.fields.end(); ++it)
      if (std::find(columns.begin(), columns.end(), it.key()) == columns.end()) columns.push_back(it.key());
  std::string out;
  for (std::size_t i = 0; i < columns.size(); ++i) out.append(i ? "," : "").append(columns[i]);
  out += "\n";
  for (const Row& r : rows) {
    for (std::size_t i = 0; i < columns.size(); ++i) {
      auto it = r.fields.find(columns[i]);
      out.append(i ? "," : "").append(csv_cell(it == r.fields.end() ? nullptr : &*it));
    }
    out += "\n";
  }
  return out;
}

}  // namespace lab::report
