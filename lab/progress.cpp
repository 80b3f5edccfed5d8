#include "progress.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <unistd.h>

namespace lab {
namespace {
Progress* g_innermost = nullptr;  // the bar made last and still alive
bool g_drawn = false;             // a bar is on the terminal's line now
}  // namespace

Progress::Progress(std::string label, int total)
    : label_(std::move(label)), total_(std::max(total, 1)), shown_(isatty(fileno(stderr)) != 0),
      parent_(g_innermost) {
  g_innermost = this;
}

Progress::~Progress() {
  g_innermost = parent_;
  // Erase the bar so the tables printed next start on a clean line.
  clear_progress_line();
  std::fflush(stderr);
}

void Progress::step(const std::string& what) {
  what_ = what;
  draw();
  ++done_;
}

std::string Progress::prefix() const {
  if (parent_ == nullptr) return "";
  // The parent's count as its own bar shows it: steps done before the one running now (step() counts it as it
  // starts).
  return parent_->prefix() + fmt::format("{} {}/{} › ", parent_->label_, std::max(parent_->done_ - 1, 0),
                                         parent_->total_);
}

void Progress::draw() const {
  if (!shown_) return;
  constexpr int kWidth = 10;
  const int filled = std::clamp(done_ * kWidth / total_, 0, kWidth);
  fmt::print(stderr, "\r\033[2K{}{} [{}{}] {}/{} {}", prefix(), label_, std::string(std::size_t(filled), '#'),
             std::string(std::size_t(kWidth - filled), '.'), done_, total_, what_);
  std::fflush(stderr);
  g_drawn = true;
}

void clear_progress_line() {
  if (!g_drawn) return;
  fmt::print(stderr, "\r\033[2K");
  std::fflush(stderr);
  g_drawn = false;
}

}  // namespace lab
