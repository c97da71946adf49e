// What a rank does when a collective's deadline passes. It could fail at once naming the
// rank it waited on, but that rank may itself be waiting on another, stopped, one: so it
// first asks the job's store which rank does not answer (net/bootstrap/store_protocol.hpp)
// and fails with that root cause when the store names one (it tells every rank). On its
// own word it fails when the store finds every rank answering, or says nothing within
// stall_wait, or there is no store.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "optcast/net/job.hpp"

namespace optcast::detail {

class stall_watch {
public:
  // How long a rank waits for the store's verdict: past the store's inquiry_window.
  static constexpr auto stall_wait = std::chrono::milliseconds(500);

  // `waiting_for(seq)`: "; receive from rank 2 (collective 5, step 1); ..." for each
  // operation of collective seq still waiting, empty once none is (it may finish while the
  // store is asked); `fail(text)`: fail this rank with errc::timeout and the text.
  stall_watch(asio::io_context& io, std::function<std::string(std::uint32_t)> waiting_for, std::function<void(const std::string&)> fail)
      : timer_(io), waiting_for_(std::move(waiting_for)), fail_(std::move(fail)) {}
  ~stall_watch() { *alive_ = false; }
  stall_watch(const stall_watch&) = delete;
  stall_watch& operator=(const stall_watch&) = delete;

  // Collective seq's deadline passed on `who` (its rank's name), a member of job j (none:
  // no store to ask).
  void deadline_passed(job* j, std::uint32_t seq, const std::string& who) {
    std::string text = "deadline of collective " + std::to_string(seq) + " passed on " + who;
    const std::string waiting = waiting_for_(seq);
    if (waiting.empty()) return fail_(text);  // waiting on nobody: nothing to ask
    pending_.push_back({seq, text + " waiting for" + waiting.substr(1)});
    if (pending_.size() > 1) return;  // one question to the store at a time
    if (!j) return settle({});
    j->report_stall(seq, pending_.front().text, [this, alive = alive_] {
      if (*alive) settle({});
    });
    timer_.expires_after(stall_wait);
    timer_.async_wait([this, alive = alive_](std::error_code ec) {
      // The store runs on its own thread of rank 0 and answers within its window unless
      // rank 0's whole process stands still: that is then the likeliest root cause.
      if (*alive && !ec)
        settle("; the store on rank 0 did not answer within " + std::to_string(stall_wait.count()) + " ms either (rank 0 stopped?)");
    });
  }

  // The rank failed otherwise (told the root cause, or its own error): nothing to add.
  void clear() noexcept {
    pending_.clear();
    timer_.cancel();
  }

private:
  void settle(const std::string& store_silent) {
    timer_.cancel();
    auto waits = std::move(pending_);
    pending_.clear();
    for (const auto& w : waits)
      if (!waiting_for_(w.seq).empty()) return fail_(w.text + store_silent);
  }

  struct wait {
    std::uint32_t seq;
    std::string text;
  };
  asio::steady_timer timer_;
  std::function<std::string(std::uint32_t)> waiting_for_;
  std::function<void(const std::string&)> fail_;
  std::vector<wait> pending_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace optcast::detail
