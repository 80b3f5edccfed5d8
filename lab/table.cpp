#include "table.h"

#include <algorithm>

#include <fmt/format.h>

#include "progress.h"

namespace lab {

std::size_t display_width(std::string_view text) {
  // Count the bytes that start a code point (everything but UTF-8 continuation bytes 10xxxxxx).
  return std::size_t(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

Table& Table::columns(std::vector<std::string> headers, std::vector<Align> aligns) {
  headers_ = std::move(headers);
  aligns_ = std::move(aligns);
  aligns_.resize(headers_.size(), Align::left);
  return *this;
}

Table& Table::row(std::vector<std::string> cells) {
  rows_.push_back(std::move(cells));
  return *this;
}

std::string Table::render() const {
  std::size_t ncols = headers_.size();
  for (const auto& r : rows_) ncols = std::max(ncols, r.size());
  std::vector<std::size_t> width(ncols, 0);
  const bool show_header =
      std::any_of(headers_.begin(), headers_.end(), [](const std::string& h) { return !h.empty(); });
  if (show_header)
    for (std::size_t c = 0; c < headers_.size(); ++c) width[c] = display_width(headers_[c]);
  for (const auto& r : rows_)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], display_width(r[c]));

  auto align_of = [&](std::size_t c) { return c < aligns_.size() ? aligns_[c] : Align::left; };
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "  ";
    for (std::size_t c = 0; c < ncols; ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(width[c] - display_width(cell), ' ');
      if (c > 0) out += "  ";
      out += align_of(c) == Align::right ? pad + cell : cell + pad;
    }
    out.erase(out.find_last_not_of(' ') + 1);  // an empty last cell leaves no invisible spaces
    return out + "\n";
  };

  std::string out;
  if (!title_.empty()) out += title_ + "\n";
  if (show_header) {
    out += line(headers_);
    std::vector<std::string> rule(ncols);
    for (std::size_t c = 0; c < ncols; ++c) rule[c] = std::string(width[c], '-');
    out += line(rule);
  }
  for (const auto& r : rows_) out += line(r);
  return out;
}

void Table::print() const {
  clear_progress_line();  // a bar on the same terminal would run into the table's first line
  fmt::print("{}\n", render());
}

Table key_value_table(std::string title, const std::vector<std::pair<std::string, std::string>>& rows) {
  Table t(std::move(title));
  t.columns({"", ""});
  for (const auto& [label, value] : rows) t.row({label, value});
  return t;
}

void print_observation(std::string_view expected, std::string_view observed, bool as_expected) {
  clear_progress_line();
  fmt::print("  expected: {}\n", expected);
  fmt::print("  observed: {}\n", observed);
  fmt::print("  {}\n\n",
             as_expected ? "✓ as expected" : "✗ MISMATCH: the measurement disagrees with the codelab");
}

}  // namespace lab
