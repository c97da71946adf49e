// The lifecycle of a fabric with one process per rank (job_fabric.hpp).
#include "job_fabric.hpp"

#include "cores.hpp"

#include <stdexcept>
#include <thread>

#include "inquiry.hpp"
#include "optcast/log.hpp"
#include "on_strand.hpp"

namespace optcast::detail {

job_fabric::job_fabric(asio::io_context& io)
    : io_(io),
      deadlines_(
          ex_, [this](std::uint32_t seq) { expire(seq); },
          [this](std::uint32_t seq) {
            if (!failure()) stall_.deadline_near(job_.get(), seq, rank_text());
          },
          &detail::stall_watch::lead) {}

void job_fabric::run_until(stop_predicate done) {
  if (borrowed_loop())  // run() waits for the owner's threads instead
    throw std::logic_error("optcast: a fabric on the caller's io_context does not run it (run_until)");
  if (!poller_) {
    poller_.emplace(io_, job_settings().poll, job_settings().poll_limit,
                    [](void* self) { return static_cast<job_fabric*>(self)->check_network(); }, this,
                    [](void* self, bool polling) { static_cast<job_fabric*>(self)->loop_polls(polling); });
    const bool first = network_first();
    const bool elsewhere = ranks_on_my_host() < size();
    // A core for each of the job's ranks on this machine: an empty poll spins on. More
    // ranks than cores, and it yields to the one it waits for.
    const int shared = sharers();
    poller_->yield_when_idle(shared > 1, shared);
    poller_->check_first(first, elsewhere);
    log(log_level::debug, rank_text() + ": its loop looks " +
                              (!first            ? std::string("at its reactor every turn")
                               : elsewhere && shared > 1 ? std::string("at the network first, its reactor every few turns and before each yield")
                                                         : std::string("at the network first, its reactor every few turns")));
    log(log_level::debug, rank_text() + ": " + std::to_string(ranks_sharing_cores()) + " ranks of the job on this machine, " +
                              std::to_string(shared) + " to a core: an empty poll " + (shared > 1 ? "yields" : "spins"));
  }
  poller_->run_until(done);
}

int job_fabric::ranks_sharing_cores() const noexcept {
  const topology* t = layout();
  if (!t || t->host_of.empty()) return 1;
  const int machine = ranks_on_this_machine();
  return machine > 0 ? machine : ranks_on_my_host();
}

int job_fabric::ranks_on_my_host() const {
  const topology* t = layout();
  if (!t || t->host_of.empty()) return 1;
  return static_cast<int>(t->ranks_on(t->host_of[static_cast<std::size_t>(job_settings().rank)]).size());
}

int job_fabric::sharers() const noexcept {
  const int here = ranks_sharing_cores();
  const int cores = std::max(usable_cores(), 1);
  return (here + cores - 1) / cores;
}

void job_fabric::join_job() {
  job_ = std::make_unique<job_session>(ex_, job_settings());
  if (const auto& c = job_settings(); !c.host_store || c.kv || c.pmix) stall_.store_apart();
  job_->answer_inquiries([this, alive = alive_](std::uint32_t seq) { return *alive ? wire_bytes(call_made(seq)) : std::string(); });
  job_->on_failure(
      [this, alive = alive_](int r) {
        if (*alive && !closing_)
          lose_peer(r, make_error_code(errc::peer_lost), "rank " + std::to_string(r) + " died (its store connection closed without goodbye)");
      },
      [this, alive = alive_](std::string why) {
        if (*alive && !closing_) told(make_error_code(errc::peer_lost), why);
      },
      [this, alive = alive_](std::uint64_t code, int r, std::string why) {
        if (!*alive || closing_) return;
        // A rank named: that one failed (or stopped answering), the others may go on.
        if (r >= 0 && r < size() && r != rank()) return lose_peer(r, told_error(code), why);
        told(told_error(code), why);
      },
      [this, alive = alive_](int r) {
        if (!*alive || closing_ || failure() || !takes_replacements() || r < 0 || r >= size() || r == rank()) return;
        // The store said r died before this (one connection, in order); a rank that
        // missed it takes r for dead now, so that nothing of the old process stays.
        if (peer_alive(r)) lose_peer(r, make_error_code(errc::peer_lost), "rank " + std::to_string(r) + " was replaced");
        if (*alive && !failure()) reset_peer(r);
      });
}

void job_fabric::flush_control(std::chrono::milliseconds most) noexcept {
  // Not from inside the loop's own handlers: nothing would run meanwhile.
  if (const auto* s = ex_.target<asio::strand<asio::io_context::executor_type>>(); s && s->running_in_this_thread()) return;
  const auto until = std::chrono::steady_clock::now() + most;
  try {
    if (owns_loop_) {
      asio::steady_timer wake(ex_);
      bool woke = false;
      wake.expires_at(until);
      wake.async_wait([&](std::error_code) { woke = true; });
      auto sent = [&] { return closing_ || control_in_flight() == 0 || woke; };
      run_until(sent);
      wake.cancel();
      auto waited = [&] { return woke; };
      run_until(waited);  // the wait's handler refers to this frame
      return;
    }
    for (;;) {  // the caller's threads run the loop
      std::size_t left = 0;
      on_strand(*this, [&] { left = closing_ ? 0 : control_in_flight(); });
      if (left == 0 || std::chrono::steady_clock::now() >= until) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  } catch (const std::exception&) {  // a stopped loop: nothing more to send by
  }
}

void job_fabric::close(std::chrono::milliseconds wait) noexcept {
  // A revocation this rank passes on may still be queued behind a frame being written:
  // a rank that closes right after its failure still tells the others why.
  flush_control(std::chrono::milliseconds(200));
  bool first = false;
  std::error_code own;
  std::string own_detail;
  last_call last;
  on_strand(*this, [&] {
    if (closing_) return;
    first = true;
    own = failure();
    own_detail = failure_detail();
    last = {newest_finished().first, wire_bytes(newest_finished().second)};
    closing_ = true;
    on_closing(static_cast<bool>(own));
    abort(make_error_code(errc::cancelled), "the communicator was closed");
    on_closed();
  });
  if (!first) return;
  result<void> out;
  if (job_) out = job_->leave(wait, static_cast<bool>(own), std::move(last));
  on_left(wait);
  on_strand(*this, [&] {
    if (job_) outcome_ = settle_outcome(out, job_->outcome_detail(), own, own_detail);
    *alive_ = false;
  });
  job_.reset();
}

result<void> job_fabric::leave() {
  close(job_settings().timeout);
  return outcome_;
}

void job_fabric::told(std::error_code ec, const std::string& why) noexcept {
  spread_ = true;
  note_cause(ec, why);
  abort(ec, why);
}

void job_fabric::spread_failure() noexcept {
  // This rank's own failure: every other rank is told at once (directly where the
  // transport can, and through the store, which reaches them all), so that none waits
  // for its deadline or returns from a job that failed.
  if (closing_ || spread_) return;
  spread_ = true;
  tell_peers(failure_detail());
  if (job_) job_->report_failure(failure().value(), rank_text() + " failed: " + failure_detail());
}

void job_fabric::start_loss_grace(const std::string& why) {
  // Most often the other end failed and closed its links; its report or the store's
  // word says why within a round trip (abort() then ends the operations with the cause).
  if (loss_pending_) return;
  loss_pending_ = true;
  loss_timer_.expires_after(loss_grace);
  loss_timer_.async_wait([this, alive = alive_, why](std::error_code ec) {
    if (ec || !*alive || !loss_pending_) return;
    loss_pending_ = false;
    if (!failure()) grace_over(why);
  });
}

void job_fabric::cancel_loss_grace() noexcept {
  loss_pending_ = false;
  loss_timer_.cancel();
}

void job_fabric::lose_broken(const std::vector<int>& broken, const std::string& why, std::string_view before,
                             std::string_view after) noexcept {
  auto alive = alive_;
  for (int p : broken) {
    if (!*alive) return;
    const std::string name = "rank " + std::to_string(p);
    const bool named = why.find(name + " ") != std::string::npos || why.ends_with(name);
    lose_peer(p, make_error_code(errc::peer_lost),
              named ? why : std::string(before) + name + std::string(after) + ", and no word of why came within " +
                                std::to_string(loss_grace.count()) + " ms");
  }
}

void job_fabric::expire(std::uint32_t seq) {
  // Waiting on a peer: the store is asked for the root cause first (common/stall.hpp).
  if (!failure()) stall_.deadline_passed(job_.get(), seq, rank_text());
}

}  // namespace optcast::detail
