// A progress bar on stderr for long experiments: "sweep seq [#####.....] 5/10 T=512 cpu-flash". Drawn only when
// stderr is a terminal, so logs, pipes and tests see nothing of it.
//
// Bars nest: a bar made while another is alive (sweep's inside `attnlab lab`'s) shows its parent's place first,
// "lab 4/7 › sweep seq [###.......] 3/10 T=256 cpu-flash". The bar sits on the terminal's last line
// without a newline, so whatever prints to stdout on the same terminal first calls clear_progress_line()
// (Table::print and print_observation do).
#pragma once

#include <string>

namespace lab {

class Progress {
 public:
  Progress(std::string label, int total);
  ~Progress();  // clears the bar's line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Announces the step about to run (`what`, e.g. "T=512 cpu-flash"); the count is the steps done so far.
  void step(const std::string& what);

 private:
  void draw() const;
  std::string prefix() const;  // the parents' places, "lab 4/7 › "
  std::string label_;
  int total_;
  int done_ = 0;
  std::string what_;  // the step running now
  bool shown_;
  Progress* parent_;
};

// Erases a bar drawn on the terminal, if one is; the next step() draws it again.
void clear_progress_line();

}  // namespace lab
