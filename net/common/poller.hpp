// How a fabric that owns its loop waits for the network while a call is pending
// (job_config::poll_mode). A wake-up from epoll_wait costs tens of microseconds on a
// virtual machine, and a collective of log p rounds pays it log p times: polling the
// sockets without sleeping answers within a microsecond or two, at the price of the core.
// `adaptive` pays that price only where it buys something: it polls while most recent
// waits ended within the limit, and not when the kernel shows other threads want the core
// (a yield that gave it away, a poll preempted), backing off longer each time.
#pragma once

#include <algorithm>
#include <chrono>

#include <asio/io_context.hpp>

#include "optcast/fabric.hpp"
#include "optcast/net/job.hpp"

namespace optcast::detail {

class poller {
public:
  // `check`, where given, looks at the network itself without the loop (libfabric's
  // completion queue, read directly rather than through its descriptor and epoll): true
  // if it completed something.
  using check_fn = bool (*)(void* context);
  // `turn`, where given, hears whether the loop now polls (true) or is about to sleep in
  // epoll (false): a transport whose peers wake it only when it says it sleeps (shared
  // memory) says so there.
  using turn_fn = void (*)(void* context, bool polling);
  poller(asio::io_context& io, job_config::poll_mode mode, std::chrono::microseconds limit, check_fn check = nullptr,
         void* context = nullptr, turn_fn on_turn = nullptr) noexcept
      : io_(io), mode_(mode), limit_(limit), check_(check), turn_(on_turn), context_(context) {}

  // Runs the loop's handlers until done() holds.
  void run_until(stop_predicate done);
  // Whether an empty poll yields its core (sched_yield, as Open MPI's ranks do when the
  // host is oversubscribed) or spins on it: spinning answers sooner, yielding lets a rank
  // that shares the core run. `sharers`: the job's ranks per usable core of this host;
  // more than one, and it yields. Yields (one sharer) unless told otherwise.
  //
  // Where a core is shared by the job's own ranks, a yield comes back only once the
  // others have had their turn, and the message awaited often takes longer than the
  // limit: that is the host's shape, not foreign load, so the limit and the time a yield
  // may take before the core counts as contended grow with the sharers. (Sleeping
  // instead, every message is a doorbell and a wake-up: 64 ranks on 2 cores took an
  // 8-byte allreduce 2.4 times as long.)
  void yield_when_idle(bool yield, int sharers = 1) noexcept {
    yield_ = yield;
    sharers_ = yield ? std::max(sharers, 1) : 1;
  }
  // Whether check runs before the loop's handlers, and the reactor only every 16th turn:
  // for a transport whose check completes everything it has in order (shared memory's
  // hub). libfabric's does not: a failure's handling queued on the loop must run before
  // its next completions start operations on an endpoint the failure changed.
  //
  // `elsewhere`: the reactor carries messages too (peers on other hosts, over sockets).
  // Then a turn that yields looks at it as well: the yield costs far more than the system
  // call, and a core shared with the job's other ranks makes each turn a round of theirs
  // (every 16th turn held each message from another host for hundreds of microseconds:
  // 4 emulated hosts x 4 ranks on 2 cores, docs/GUIDE.md's hosts4-ppn4 table).
  void check_first(bool first, bool elsewhere = false) noexcept {
    check_first_ = first && check_;
    reactor_each_yield_ = check_first_ && elsewhere;
  }
  // Waits that polled (or began by polling) so far: what the policy decided, for tests.
  long polls() const noexcept { return polls_; }

private:
  using clock = std::chrono::steady_clock;
  // Polls without sleeping, up to the limit (or for good, spinning): got once a handler
  // ran; lost if (adaptive) the poll lost its core for longer than a yield may take.
  struct poll_outcome {
    bool got = false, lost = false;
  };
  poll_outcome poll_for_a_while();
  void record(bool within_limit) noexcept { hits_ = 0.875 * hits_ + (within_limit ? 0.125 : 0.0); }

  asio::io_context& io_;
  job_config::poll_mode mode_;
  std::chrono::microseconds limit_;
  // What a wait may take and still count as polled: the limit, stretched by the sharers.
  std::chrono::microseconds limit() const noexcept { return limit_ * sharers_; }
  // Tells turn_ of a change only.
  void turn(bool polling) {
    if (turn_ && polling != polling_) turn_(context_, polling);
    polling_ = polling;
  }
  void sleep_one(const stop_predicate& done) {
    // The transport's last look before the loop sleeps may finish what is awaited (a
    // polling hub runs what it finds in place): then there is nothing to sleep for.
    turn(false);
    if (done()) return;
    if (io_.stopped()) io_.restart();
    io_.run_one();
  }

  check_fn check_;
  turn_fn turn_;
  void* context_;
  bool polling_ = false;
  bool yield_ = true;
  int sharers_ = 1;
  bool check_first_ = false;
  bool reactor_each_yield_ = false;
  unsigned turns_ = 0;  // of the transport's check, for the reactor's every so often
  std::chrono::steady_clock::time_point reactor_at_{};  // a yielding poll's last look at it
  double hits_ = 1.0;  // start by polling: a job's first calls come close together
  double contention_ = 0.0;  // recent polls' share that lost their core (moving average)
  int backoff_ = 0;    // waits to sleep through when a poll is next preempted
  int skip_ = 0;       // waits still to sleep through without polling
  long polls_ = 0;
};

}  // namespace optcast::detail
