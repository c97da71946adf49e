// run() on a fabric whose io_context belongs to the caller (communicator.hpp): the call
// is handed to the loop's threads and this thread waits. The loop is never run, restarted
// or stopped from here.
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/any_io_executor.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "optcast/communicator.hpp"
#include "optcast/log.hpp"

namespace optcast::detail {

void block_on_loop(fabric& f, const std::function<void(std::function<void()> finished)>& start) {
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
    bool heard = true;  // the loop ran the latest probe
  };
  auto st = std::make_shared<state>();
  asio::post(*f.executor(), [st, start] {
    start([st] {
      std::lock_guard lock(st->mu);
      st->done = true;
      st->cv.notify_all();
    });
  });
  // Waiting long is normal (a collective may take minutes); waiting on a loop that runs
  // nothing at all is a mistake worth a word: a probe posted every few seconds tells.
  constexpr auto probe_every = std::chrono::seconds(5);
  bool warned = false;
  std::unique_lock lock(st->mu);
  while (!st->cv.wait_for(lock, probe_every, [&] { return st->done; })) {
    if (!st->heard && !warned) {
      warned = true;
      log(log_level::warn, std::string("optcast::run() has waited ") + std::to_string(probe_every.count()) +
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
