#include "write_report.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "html.h"

namespace lab::report {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void cannot_write(const fs::path& dir, const std::string& why) {
  throw std::runtime_error(fmt::format("cannot write to '{}': {}", dir.string(), why));
}

void make_directory(const fs::path& dir, const fs::path& named) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) cannot_write(named, ec.message());
  if (!fs::is_directory(dir)) cannot_write(named, "not a directory");
}

void write_file(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write '{}'", file.string()));
}

}  // namespace

void prepare_directory(const std::string& dir) {
  const fs::path root(dir);
  // Errors name the directory the user gave, not plots/ below it.
  make_directory(root, root);
  make_directory(root / "plots", root);
  // A directory can exist and still refuse files (permissions, a read-only mount): try one.
  const fs::path probe = root / ".attnlab-write-check";
  {
    std::ofstream out(probe, std::ios::binary);
    if (!out) cannot_write(root, "cannot create a file there");
  }
  std::error_code ec;
  fs::remove(probe, ec);
}

std::vector<Row> to_report_rows(const std::vector<ResultRow>& rows) {
  std::vector<Row> out;
  out.reserve(rows.size());
  // Through the JSON line: the report sees exactly what a --jsonl file would hold, extras included.
  for (const ResultRow& r : rows) out.push_back(Row{nlohmann::ordered_json::parse(to_json_line(r))});
  return out;
}

std::vector<std::string> write_report(const std::string& dir, const std::vector<Row>& rows, const std::string& title,
                                      const std::vector<std::string>& sources) {
  if (rows.empty()) throw std::runtime_error("no result rows to report");
  const Report r = build_report(rows, title, sources);
  prepare_directory(dir);
  const fs::path root(dir);
  std::vector<std::string> written;
  auto write = [&](const fs::path& file, const std::string& text) {
    write_file(file, text);
    written.push_back(file.string());
  };
  write(root / "report.html", r.html);
  for (const Plot& p : r.plots)
    write(root / "plots" / (p.id + ".svg"), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + p.svg);
  write(root / "results.json", rows_to_json(rows));
  write(root / "results.csv", rows_to_csv(rows));
  return written;
}

}  // namespace lab::report
