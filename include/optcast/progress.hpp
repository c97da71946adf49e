// A progress line for long runs (optcast verify, simulate, calibrate, the benchmarks):
// on stderr, only when stderr is a terminal and the caller is not asked to be quiet,
// rewritten in place at most five times a second, erased when the work is done. Output
// to a pipe or a file stays exactly what the program prints otherwise.
#pragma once

#include <chrono>
#include <string>

namespace optcast {

class progress_line {
public:
  explicit progress_line(bool quiet = false);
  ~progress_line();
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;

  // Whether anything is shown (a terminal, not quiet): skip building the text otherwise.
  bool on() const noexcept { return on_; }
  // Whether show() would draw now (a fifth of a second since the last line).
  bool due() const noexcept { return on_ && std::chrono::steady_clock::now() >= next_; }
  void show(const std::string& text);
  // Erases the line (before printing results).
  void clear();

private:
  bool on_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point next_;
};

}  // namespace optcast
