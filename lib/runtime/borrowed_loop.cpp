// run() on a fabric whose io_context belongs to the caller (communicator.hpp): the call
// is handed to the loop's threads and this thread waits. The loop is never run, restarted
// or stopped from here. (The fabrics' own counterpart, on_strand, is net/common's.)
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/any_io_executor.hpp>
#include <asio/strand.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "optcast/communicator.hpp"
#include "optcast/log.hpp"

namespace optcast::detail {

bool block_on_loop(fabric& f, const std::function<void(std::function<void()> finished)>& start,
                   std::chrono::milliseconds deadline, std::string* why) {
  asio::io_context& io = *f.borrowed_loop();
  if (io.get_executor().running_in_this_thread())
    throw std::logic_error(
        "optcast::run() on a thread that runs the communicator's io_context: it would wait for "
        "the loop it blocks. co_await the task in a coroutine, or use optcast/asio.hpp's async forms");
  if (io.stopped())
    throw std::logic_error(
        "optcast::run(): the communicator's io_context is stopped, and optcast does not restart "
        "an io_context it does not own (restart and run it, or join() with a loop of optcast's own)");
  struct state {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool heard = true;      // the loop ran the latest probe
    bool started = false;   // the loop took the call
    bool abandoned = false;  // this thread gave up first: the call must never start
  };
  auto st = std::make_shared<state>();
  asio::post(*f.executor(), [st, start] {
    {
      std::lock_guard lock(st->mu);
      if (st->abandoned) return;  // start refers to the frame of a run() that has returned
      st->started = true;
    }
    start([st] {
      std::lock_guard lock(st->mu);
      st->done = true;
      st->cv.notify_all();
    });
  });
  // Waiting long is normal (a collective may take minutes); waiting on a loop that runs
  // nothing at all is a mistake worth a word: a probe posted every few seconds tells. A
  // call the loop has not even taken by its deadline never starts: the fabric's deadline
  // timers run on that loop too, so nothing else would end the wait.
  constexpr auto probe_every = std::chrono::milliseconds(5000);
  const auto begun = std::chrono::steady_clock::now(), until = begun + deadline;
  bool warned = false;
  std::unique_lock lock(st->mu);
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (!st->started && now >= until) {
      st->abandoned = true;
      if (why)
        *why = "optcast::run(): nothing ran the communicator's io_context within the call's deadline (" +
               std::to_string(deadline.count()) + " ms), so the call never started" +
               (io.stopped() ? " (the io_context is stopped)" : "") +
               ": run it on a thread of its own (std::thread([&] { io.run(); })) before calling run(), co_await the "
               "task on it, or join() without an io_context to let optcast run a loop of its own";
      return false;
    }
    const auto step = st->started ? probe_every : std::min<std::chrono::steady_clock::duration>(probe_every, until - now);
    if (st->cv.wait_for(lock, step, [&] { return st->done; })) return true;
    if (!st->heard && !warned) {
      warned = true;
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - begun);
      log(log_level::warn, std::string("optcast::run() has waited ") + std::to_string(waited.count()) +
                               " s for the communicator's io_context to run anything" +
                               (io.stopped() ? " (it is stopped)" : " (does a thread run it?)"));
    }
    if (st->heard) {
      st->heard = false;
      asio::post(io, [st] {
        std::lock_guard l(st->mu);
        st->heard = true;
      });
    }
  }
}

}  // namespace optcast::detail
