// detail::on_strand (on_strand.hpp).
#include "on_strand.hpp"

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/any_io_executor.hpp>
#include <asio/strand.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "optcast/log.hpp"

namespace optcast::detail {

namespace {

struct state {
  std::atomic<bool> claimed{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool heard = true;
};

// The last loop found unrun, and the probe it has not answered. A later call for the same
// loop whose probe is still unanswered knows at once that nothing has run the loop since:
// it does not wait its two seconds again (a communicator closed on such a loop makes
// several calls). The probe lives while its handler waits in the loop's queue, so an
// expired one means the loop was destroyed (or ran it); its address may be reused.
struct unrun_loop {
  std::mutex mu;
  const asio::io_context* io = nullptr;
  std::weak_ptr<state> probe;
};
unrun_loop& unrun() {
  static unrun_loop u;
  return u;
}
bool known_unrun(const asio::io_context* io) {
  auto& u = unrun();
  std::shared_ptr<state> probe;
  {
    std::lock_guard l(u.mu);
    if (u.io != io) return false;
    probe = u.probe.lock();
  }
  if (!probe) return false;
  std::lock_guard l(probe->mu);
  return !probe->heard;
}
void remember_unrun(const asio::io_context* io, const std::shared_ptr<state>& probe) {
  auto& u = unrun();
  std::lock_guard l(u.mu);
  u.io = io;
  u.probe = probe;
}

}  // namespace

void on_strand(fabric& f, const std::function<void()>& fn) noexcept {
  asio::io_context* io = f.borrowed_loop();
  using strand_t = asio::strand<asio::io_context::executor_type>;
  const auto* strand = f.executor() ? f.executor()->target<strand_t>() : nullptr;
  // The fabric's own loop runs on the caller's thread only; on the strand already; on a
  // stopped loop nobody else runs a handler of the fabric's (io.stop() first, then leave,
  // is the plain way out of a service).
  if (!io || !strand || strand->running_in_this_thread() || io->stopped()) return fn();
  auto st = std::make_shared<state>();
  auto finish = [st] {
    std::lock_guard l(st->mu);
    st->done = true;
    st->cv.notify_all();
  };
  // Whoever claims it runs fn: the strand, or this thread once nothing runs the loop.
  asio::post(*strand, [st, &fn, finish] {
    if (st->claimed.exchange(true)) return;
    fn();
    finish();
  });
  auto claim_here = [&] {
    if (st->claimed.exchange(true)) return false;
    fn();
    return true;
  };
  if (io->get_executor().running_in_this_thread()) {
    // A thread of the loop (a service's handler): it takes its turn running the loop. With
    // a bound: another of the loop's threads may run fn, and then nothing need wake this one.
    while (!st->claimed && !io->stopped()) io->run_one_for(std::chrono::milliseconds(10));
    if (!claim_here()) {
      std::unique_lock lock(st->mu);
      st->cv.wait(lock, [&] { return st->done; });
    }
    return;
  }
  // Another thread: wait for the loop; if a probe posted to the loop goes unanswered for
  // a second, or the loop stops, nothing runs it and this thread does the work.
  const auto unrun_warning = "optcast: nothing ran the communicator's io_context for a second; it is closed from this thread";
  if (known_unrun(io) && claim_here()) {
    log(log_level::warn, unrun_warning);
    return;
  }
  std::unique_lock lock(st->mu);
  while (!st->cv.wait_for(lock, std::chrono::seconds(1), [&] { return st->done; })) {
    if (io->stopped() || !st->heard) {
      lock.unlock();
      if (claim_here()) {
        if (!io->stopped()) {
          remember_unrun(io, st);
          log(log_level::warn, unrun_warning);
        }
        return;
      }
      lock.lock();
      continue;
    }
    st->heard = false;
    asio::post(*io, [st] {
      std::lock_guard l(st->mu);
      st->heard = true;
    });
  }
}

}  // namespace optcast::detail
