// A loop's waits, polled or slept (poller.hpp).
#include "poller.hpp"

#include <sched.h>

namespace optcast::detail {

namespace {
// A sched_yield that returns later than this gave the core to another process: polling
// then takes the core from a rank that has work, so stop.
constexpr auto contended = std::chrono::microseconds(20);
}  // namespace

bool poller::poll_for_a_while() {
  const auto start = clock::now();
  for (;;) {
    if (io_.stopped()) io_.restart();
    if (io_.poll_one() != 0) return true;
    const auto before = clock::now();
    if (mode_ == job_config::poll_mode::adaptive && before - start >= limit_) return false;
    ::sched_yield();
    if (mode_ == job_config::poll_mode::adaptive && clock::now() - before > contended) return false;
  }
}

void poller::run_until(stop_predicate done) {
  while (!done()) {
    if (io_.stopped()) io_.restart();
    if (mode_ == job_config::poll_mode::block) {
      io_.run_one();
      continue;
    }
    const auto start = clock::now();
    if ((mode_ == job_config::poll_mode::spin || hits_ >= 0.5) && poll_for_a_while()) {
      record(true);
      continue;
    }
    if (io_.stopped()) io_.restart();
    io_.run_one();
    record(clock::now() - start <= limit_);
  }
}

}  // namespace optcast::detail
