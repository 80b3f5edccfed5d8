// A progress bar on stderr for long experiments: "sweep seq [#####.....] 5/10 T=512 cpu-flash". Drawn only when
// stderr is a terminal, so logs, pipes and tests see nothing of it.
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
  void draw(const std::string& what) const;
  std::string label_;
  int total_;
  int done_ = 0;
  bool shown_;
};

}  // namespace lab
