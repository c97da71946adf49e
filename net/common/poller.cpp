// A loop's waits, polled or slept (poller.hpp).
#include "poller.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>

namespace optcast::detail {

namespace {
// A sched_yield that returns later than this gave the core to another process: polling
// then takes the core from a rank that has work, so stop.
constexpr auto contended = std::chrono::microseconds(20);
// After the core was found contended, this many waits at most sleep without polling.
constexpr int most_backoff = 4096;

// Times the kernel took this thread off its core while it could run: the scheduler
// preferred another thread, so the core is contended.
long involuntary_switches() noexcept {
  rusage u{};
  return ::getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_nivcsw : 0;
}
}  // namespace

bool poller::poll_for_a_while() {
  ++polls_;
  const auto start = clock::now();
  for (;;) {
    if (io_.stopped()) io_.restart();
    if (io_.poll_one() != 0) return true;
    if (check_ && check_(context_)) return true;
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
    if (mode_ == job_config::poll_mode::spin) {
      poll_for_a_while();
      continue;
    }
    const auto start = clock::now();
    if (skip_ > 0) {
      --skip_;
    } else if (hits_ >= 0.5) {
      // A polling thread that loses its core waits a whole time slice (milliseconds) for
      // it, where a sleeping one woken by its message is run at once: on a contended
      // core polling costs far more than it saves. So once the kernel preempted a poll,
      // sleep through the next waits, twice as many each time it happens again.
      const long before = involuntary_switches();
      const bool got = poll_for_a_while();
      if (involuntary_switches() != before) {
        backoff_ = std::min(std::max(2 * backoff_, 1), most_backoff);
        skip_ = backoff_;
      } else {
        backoff_ /= 2;
      }
      if (got) {
        record(true);
        continue;
      }
    }
    if (io_.stopped()) io_.restart();
    io_.run_one();
    record(clock::now() - start <= limit_);
  }
}

}  // namespace optcast::detail
