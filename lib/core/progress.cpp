#include "optcast/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace optcast {

progress_line::progress_line(bool quiet)
    : on_(!quiet && isatty(STDERR_FILENO)), next_(std::chrono::steady_clock::now() + std::chrono::milliseconds(300)) {}

progress_line::~progress_line() { clear(); }

void progress_line::show(const std::string& text) {
  if (!due()) return;
  next_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  // \r and erase-to-end: one line, rewritten.
  std::fprintf(stderr, "\r%s\033[K", text.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void progress_line::clear() {
  if (!shown_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace optcast
