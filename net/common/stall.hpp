// What a rank does when a collective nears its deadline while waiting on a peer. Failing
// at the deadline naming the rank it waits on would often blame the wrong rank: that one
// may itself wait on another, stopped, one. So a little before the deadline (lead()) the
// rank asks the job's store which rank does not answer (net/bootstrap/store_protocol.hpp);
// the store names it to every rank within its inquiry_window, before the deadline. The
// rank fails on its own word, at the deadline, when the store found every rank answering,
// or did not answer, or there is no store.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include "../bootstrap/store_protocol.hpp"
#include "../bootstrap/job_session.hpp"

namespace optcast::detail {

class stall_watch {
public:
  using clock = std::chrono::steady_clock;
  // How long a rank gives the store for its verdict: its inquiry window and some slack
  // for a busy machine.
  static constexpr clock::duration verdict_wait = store::proto::inquiry_window + std::chrono::milliseconds(100);

  // How long before a deadline of `timeout` the store is asked: verdict_wait, so that its
  // answer is in by the deadline, but never more than a quarter of a short deadline (a
  // rank is not suspected before its peers have waited most of theirs; the verdict then
  // comes after the deadline).
  static clock::duration lead(clock::duration timeout) { return std::min(verdict_wait, timeout / 4); }

  // `waiting_for(seq)`: "; receive from rank 2 (collective 5, step 1); ..." for each
  // operation of collective seq still waiting, empty once none is (it may finish while the
  // store is asked); `fail(text)`: fail this rank with errc::timeout and the text.
  stall_watch(const asio::any_io_executor& ex, std::function<std::string(std::uint32_t)> waiting_for, std::function<void(const std::string&)> fail)
      : timer_(ex), waiting_for_(std::move(waiting_for)), fail_(std::move(fail)) {}
  ~stall_watch() { *alive_ = false; }
  stall_watch(const stall_watch&) = delete;
  stall_watch& operator=(const stall_watch&) = delete;

  // Collective seq is lead() from its deadline on `who` (its rank's name), a member of job
  // j (none: no store to ask). If it waits on a peer, the store is asked now.
  void deadline_near(job_session* j, std::uint32_t seq, const std::string& who) {
    if (!j) return;
    const std::string waiting = waiting_for_(seq);
    if (waiting.empty()) return;
    ask(*j, seq, "collective " + std::to_string(seq) + " near its deadline on " + who + ", waiting for" + waiting.substr(1));
  }

  // A connection that collective seq needs broke (`why`): the store is asked at once, so
  // that a cause it can find (calls that differ, with a peer that has left in good
  // order) comes within the loss grace, before the loss itself is taken for the cause.
  void connection_lost(job_session* j, std::uint32_t seq, const std::string& why) {
    if (j && !waiting_for_(seq).empty()) ask(*j, seq, why);
  }

  // Collective seq's deadline passed on `who`.
  void deadline_passed(job_session* j, std::uint32_t seq, const std::string& who) {
    std::string text = "deadline of collective " + std::to_string(seq) + " passed on " + who;
    const std::string waiting = waiting_for_(seq);
    if (waiting.empty()) return fail_(text);  // waiting on nobody: nothing to ask
    text += " waiting for" + waiting.substr(1);
    if (!j) return fail_(text);
    if (!question_ || std::find(question_->seqs.begin(), question_->seqs.end(), seq) == question_->seqs.end())
      ask(*j, seq, text);  // not asked before (short deadline, or it waited on nobody then)
    if (question_->answered) return fail_(text);  // nobody stuck: just too slow
    pending_.push_back({seq, text});
    if (clock::now() - question_->asked >= verdict_wait) settle(store_silent());
  }

  // The store runs in a process of its own (optcast store) or is not optcast's (a kv
  // store): its silence then says nothing of rank 0.
  void store_apart() noexcept { store_apart_ = true; }

  // The rank failed otherwise (told the root cause, or its own error): nothing to add.
  void clear() noexcept {
    pending_.clear();
    question_.reset();
    timer_.cancel();
  }

private:
  // One question to the store at a time: a later collective's near deadline joins the one
  // outstanding, whose answer (who does not respond) covers it as well. One the store left
  // unanswered past verdict_wait is asked again.
  struct question {
    clock::time_point asked;
    std::vector<std::uint32_t> seqs;
    bool answered = false;
  };

  void ask(job_session& j, std::uint32_t seq, const std::string& text) {
    if (question_ && !question_->answered && clock::now() - question_->asked < verdict_wait) {
      question_->seqs.push_back(seq);
      return;
    }
    question_ = question{clock::now(), {seq}, false};
    j.report_stall(seq, text, [this, alive = alive_] {
      if (!*alive || !question_) return;
      question_->answered = true;
      timer_.cancel();
      settle({});
    });
    timer_.expires_after(verdict_wait);
    timer_.async_wait([this, alive = alive_](std::error_code ec) {
      if (*alive && !ec) settle(store_silent());
    });
  }

  // The store runs on its own thread of rank 0 (unless apart) and answers within its
  // window unless that whole process stands still: that is then the likeliest root cause.
  std::string store_silent() const {
    const auto ms = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(verdict_wait).count());
    return store_apart_ ? "; no verdict from the store within " + ms + " ms either"
                        : "; the store on rank 0 did not answer within " + ms + " ms either (rank 0 stopped?)";
  }

  // Fails with the first deadline passed whose collective still waits.
  void settle(const std::string& addendum) {
    auto waits = std::move(pending_);
    pending_.clear();
    for (const auto& w : waits)
      if (!waiting_for_(w.seq).empty()) return fail_(w.text + addendum);
  }

  struct wait {
    std::uint32_t seq;
    std::string text;
  };
  asio::steady_timer timer_;
  std::function<std::string(std::uint32_t)> waiting_for_;
  std::function<void(const std::string&)> fail_;
  std::optional<question> question_;
  std::vector<wait> pending_;  // deadlines passed, waiting for the store's verdict
  bool store_apart_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace optcast::detail
