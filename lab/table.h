// Aligned terminal tables: the CLI's version of the codelab's show_table(headers, rows, title).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lab {

enum class Align { left, right };

class Table {
 public:
  explicit Table(std::string title = {}) : title_(std::move(title)) {}

  // Headers name the columns; an all-empty header row is not printed (key/value tables).
  Table& columns(std::vector<std::string> headers, std::vector<Align> aligns = {});
  Table& row(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }

  std::string render() const;
  void print() const;  // to stdout, followed by a blank line

 private:
  std::string title_;
  std::vector<std::string> headers_;
  std::vector<Align> aligns_;
  std::vector<std::vector<std::string>> rows_;
};

// The codelab's two-column tables (["", "Value"]): a label and its value per row.
Table key_value_table(std::string title, const std::vector<std::pair<std::string, std::string>>& rows);

// What the codelab says the learner should see, next to what this run measured, with a marker that stands out
// when the two disagree. Printed to stdout.
void print_observation(std::string_view expected, std::string_view observed, bool as_expected);

// Display width of UTF-8 text (code points; the lab prints no double-width characters).
std::size_t display_width(std::string_view text);

}  // namespace lab
