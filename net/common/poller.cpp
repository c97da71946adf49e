// A loop's waits, polled or slept (poller.hpp).
#include "poller.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <optional>

namespace optcast::detail {

namespace {
// A poll that lost its core (a yield that returned, or a preemption that let it run again)
// this much later shared the core with a thread that has work for a time slice: polling
// on would take the core from it, and the message awaited would wait for the slice. On
// an otherwise idle machine a yield takes a few microseconds and at worst tens (a
// thread just woken beside its waker); under load, slices of 0.5-5 ms (measured here).
constexpr auto contended = std::chrono::microseconds(200);
// After the core was found contended, this many waits at most sleep without polling.
constexpr int most_backoff = 4096;
// How long a poll runs before the thread's CPU clock is read (poll_for_a_while).
constexpr auto unclocked = std::chrono::microseconds(50);
// Of a poll's turns, those that also poll the loop's reactor when the transport has a
// check of its own: a turn of the check is tens of nanoseconds, the reactor's a system
// call (0.3-1 us here), so the loop's other work (timers, the store) waits a few
// microseconds at most.
constexpr unsigned reactor_every = 16;
// And a yielding poll looks at it once this long has passed since its last look, whatever
// the turns: on a loaded core a yield takes a time slice, and 16 of them held the store's
// word of a dead rank past the 200 ms its survivors wait for it (torch_elastic and
// bench_chaos_shrink beside two spinning threads: 1 run in 12 failed).
constexpr auto reactor_within = std::chrono::microseconds(100);
// Of a spinning poll's empty turns, those that read the clock.
constexpr unsigned clock_every = 8;

// A spinning core's pause: the sibling hyperthread and the memory bus get the slot.
inline void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// This thread's CPU time: set beside the wall clock over a poll, what the poll lost to
// other threads. A count of involuntary switches would not do: a yield that lets
// ksoftirqd or a kworker run (often to deliver the very message awaited) counts as one,
// and an otherwise idle machine looked contended.
std::chrono::nanoseconds thread_cpu() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::chrono::nanoseconds(std::chrono::seconds(t.tv_sec)) + std::chrono::nanoseconds(t.tv_nsec);
}
}  // namespace

poller::poll_outcome poller::poll_for_a_while() {
  ++polls_;
  turn(true);
  const bool adaptive = mode_ == job_config::poll_mode::adaptive;
  // The clock is read from the first empty turn on (a wait that its first look ends reads
  // none), and then, where empty turns spin, every `clock_every`th: a read is tens of
  // nanoseconds here, a turn of the rings about as much, and the limits are hundreds of
  // microseconds.
  bool started = false;
  clock::time_point start, last;
  // A yielding turn's clock after its yield, which the next turn takes as its own start:
  // the look between is tens of nanoseconds, a read of the clock about as much.
  std::optional<clock::time_point> yielded;
  unsigned empty = 0;
  // The thread's CPU clock is a system call here (0.87 us, against a poll's ~1 us), and
  // nearly every poll ends within a few microseconds: it is read only once a poll has
  // run `unclocked`, which hides at most that much of a lost core from the judgement.
  bool clocked = false;
  clock::time_point wall_mark;
  std::chrono::nanoseconds cpu_mark{};
  const auto lost_since_mark = [&] { return clocked && (clock::now() - wall_mark) - (thread_cpu() - cpu_mark) > contended; };
  for (;;) {
    // The loop's reactor is a system call (epoll_wait): where the transport asks for it
    // (check_first), it looks at the network without it first and at the reactor only
    // every so often, counted across waits (a collective's next wait begins as soon as
    // its last ended: a reactor's turn at the start of each would lie on every message's
    // path). io_context::stopped() takes the loop's lock, so it too is asked only every
    // so often (a loop that ran out of work is stopped, and polls nothing until restarted).
    const bool reactor_turn = ++turns_ % reactor_every == 0 || (yield_ && reactor_each_yield_) ||
                              (yielded && *yielded - reactor_at_ >= reactor_within);
    if (reactor_turn && yielded) reactor_at_ = *yielded;
    if (reactor_turn && io_.stopped()) io_.restart();
    if (check_first_) {
      if (check_(context_)) return {true, lost_since_mark()};
      if (reactor_turn && io_.poll_one() != 0) return {true, lost_since_mark()};
    } else {
      // The loop's handlers first (a failure's handling among them), then the transport.
      if (io_.poll_one() != 0) return {true, lost_since_mark()};
      if (check_ && check_(context_)) return {true, lost_since_mark()};
    }
    if (!yield_ && started && ++empty % clock_every != 0) {
      relax();
      continue;
    }
    const auto before = yielded ? *yielded : clock::now();
    if (!started) {
      started = true;
      start = last = before;
    }
    if (adaptive) {
      if (before - start >= limit()) return {false, lost_since_mark()};
      if (!clocked && before - start >= unclocked) {
        clocked = true;
        wall_mark = before;
        cpu_mark = thread_cpu();
      }
    }
    if (yield_) {
      ::sched_yield();
      yielded = clock::now();
      if (adaptive && *yielded - before > contended * sharers_) return {false, true};
    } else {
      relax();
      if (adaptive && before - last > contended) return {false, true};  // preempted between two looks
      last = before;
    }
  }
}

void poller::run_until(stop_predicate done) {
  while (!done()) {
    if (mode_ == job_config::poll_mode::block) {
      sleep_one(done);
      continue;
    }
    if (mode_ == job_config::poll_mode::spin) {
      poll_for_a_while();
      continue;
    }
    bool polled_out = false;  // a poll ran to the limit without its message: a miss
    if (skip_ > 0) {
      --skip_;
    } else if (hits_ >= 0.5) {
      // A polling thread that loses its core waits a whole time slice (milliseconds) for
      // it, where a sleeping one woken by its message is run at once: on a contended
      // core polling costs far more than it saves. So when polls keep losing the core for
      // longer than a yield may take, sleep through the next waits, twice as many each
      // time it happens again. One lost poll is not enough: a thread just woken often
      // finds its core briefly shared (the waker, a kworker) on an otherwise idle machine.
      const auto [got, lost] = poll_for_a_while();
      contention_ = 0.75 * contention_ + (lost ? 0.25 : 0.0);
      if (lost && contention_ >= 0.5) {
        backoff_ = std::min(std::max(2 * backoff_, 1), most_backoff);
        skip_ = backoff_;
      } else {
        backoff_ /= 2;
      }
      if (got) {
        record(true);
        continue;
      }
      polled_out = !lost;
    }
    const auto start = clock::now();
    sleep_one(done);
    record(!polled_out && clock::now() - start <= limit());
  }
  // The transport stays as it is: the loop sleeps only in run_until (sleep_one turns
  // it), and between calls nothing runs it at all, so nothing needs waking.
}

}  // namespace optcast::detail
