#include "progress.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <unistd.h>

namespace lab {

Progress::Progress(std::string label, int total)
    : label_(std::move(label)), total_(std::max(total, 1)), shown_(isatty(fileno(stderr)) != 0) {}

Progress::~Progress() {
  // Erase the bar so the tables printed next start on a clean line.
  if (shown_) fmt::print(stderr, "\r\033[2K");
  std::fflush(stderr);
}

void Progress::step(const std::string& what) {
  draw(what);
  ++done_;
}

void Progress::draw(const std::string& what) const {
  if (!shown_) return;
  constexpr int kWidth = 10;
  const int filled = std::clamp(done_ * kWidth / total_, 0, kWidth);
  fmt::print(stderr, "\r\033[2K{} [{}{}] {}/{} {}", label_, std::string(std::size_t(filled), '#'),
             std::string(std::size_t(kWidth - filled), '.'), done_, total_, what);
  std::fflush(stderr);
}

}  // namespace lab
