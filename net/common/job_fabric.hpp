// The lifecycle every fabric with one process per rank shares (TCP, libfabric): its event
// loop (owned, or borrowed from the caller), its place in the job (the store, which tells
// it of other ranks' failures and finds a stall's root cause), its deadlines, the grace a
// broken link gets for its cause to arrive, spreading its own failure, and closing:
// goodbye, the job's outcome, and the end. A transport derives from it and keeps only
// moving bytes: start, cancel, abort of its own operations, and the hooks below.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <asio/any_io_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include "deadlines.hpp"
#include "core/frame_arena.hpp"
#include "poller.hpp"
#include "stall.hpp"
#include "optcast/fabric_base.hpp"
#include "../bootstrap/job_session.hpp"

namespace optcast::detail {

class job_fabric : public fabric_base {
public:
  job_fabric(asio::io_context& io);
  // A transport's destructor calls close() itself: close() calls its hooks.
  ~job_fabric() override {
    if (arena_) arena_->release();
  }

  int rank() const noexcept override { return job_settings().rank; }
  int size() const noexcept override { return job_settings().size; }
  int ports() const noexcept override { return job_settings().ports; }

  std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds t) override { return deadlines_.arm(seq, t); }
  void disarm_deadline(std::uint64_t token) noexcept override { deadlines_.disarm(token); }

  void run_until(stop_predicate done) override;
  asio::io_context* borrowed_loop() const noexcept override { return owns_loop_ ? nullptr : &io_; }
  // connect() without a caller's io_context: the loop is the fabric's (owned_loop.hpp).
  // With `arena`, as one thread runs a loop of the fabric's own, its collectives'
  // coroutine frames come from an arena, reused call after call (seven a small allreduce,
  // each a malloc and a free). libfabric's keeps the heap: a rehearsal crashed inside the
  // provider with the arena (bench_chaos_grow_ofi; once on the heap too, so not shown to
  // be the cause), and the heap at least does not hand a frame out again at once.
  void own_loop(bool arena = true) noexcept {
    owns_loop_ = true;
    deadlines_.keep_idle_timer();
    if (!arena) return;
    try {
      arena_ = frame_arena::create();  // null under the sanitizers: the heap
    } catch (const std::bad_alloc&) {
      arena_ = nullptr;
    }
  }
  frame_arena* frames() const noexcept override { return arena_; }
  const asio::any_io_executor* executor() const noexcept override { return &ex_; }

  // Closes the fabric and leaves the job, waiting up to `wait` for its outcome (the
  // destructor does not wait: leave() does). The fabric's state is changed on its strand
  // (other threads may run a caller's loop); the wait for the outcome is off it, so that
  // the loop runs on meanwhile.
  void close(std::chrono::milliseconds wait = {}) noexcept;
  result<void> leave() override;
  // Another rank failed (its own report, the store's word): fail with it, and do not pass
  // it on.
  void told(std::error_code ec, const std::string& why) noexcept;
  void excuse(std::vector<int> gone) override {
    if (job_ && !gone.empty()) job_->excuse(gone);
  }
  // Job rank r failed or died (`ec`, `why`): a transport that survives it cuts r off and
  // fails what waits on it (peer_died); the default fails this rank with it (told).
  virtual void lose_peer(int r, std::error_code ec, const std::string& why) noexcept {
    (void)r;
    told(ec, why);
  }

  // A replacement (optcast::grow): job_config::rejoin; admitted, the store hears.
  bool replacement() const noexcept override { return job_settings().rejoin; }
  void admitted() noexcept override {
    if (job_) job_->admitted();
  }

protected:
  // A replacement for dead job rank r is ready (the store's word): a transport that takes
  // one in (takes_replacements) gives r fresh connections here and calls peer_replaced.
  virtual void reset_peer(int r) noexcept { (void)r; }
  // The transport's configuration (at least the job's).
  virtual const job_config& job_settings() const noexcept = 0;
  // On the strand as close() begins, before the operations are cancelled; `failed`: this
  // rank has failed. A transport says goodbye to its peers here, if it can.
  virtual void on_closing(bool failed) noexcept { (void)failed; }
  // On the strand after the operations are cancelled: stop accepting, stop waiting.
  virtual void on_closed() noexcept {}
  // Off the strand, once the job's outcome is known (or not waited for, `wait` 0).
  virtual void on_left(std::chrono::milliseconds wait) noexcept { (void)wait; }
  // "; receive from rank 2 (collective 5, step 1); ..." for each operation of collective
  // seq still waiting, empty when none is.
  virtual std::string waiting_for(std::uint32_t seq) const = 0;
  // This rank failed: a transport that can reach its peers directly tells them here
  // (best effort, without blocking), before the store tells everyone.
  virtual void tell_peers(const std::string& why) noexcept { (void)why; }
  // While the loop polls (poller.hpp), between its turns: a transport whose completions
  // can be read without the loop reads them here; true if any operation completed.
  virtual bool check_network() { return false; }
  // The loop now polls (true), calling check_network between its turns, or is about to
  // sleep in epoll (false): a transport whose peers must be asked to wake it says so here.
  virtual void loop_polls(bool polling) { (void)polling; }
  // Whether the poller may look at the network (check_network) before the loop's queued
  // handlers (poller::check_first).
  virtual bool network_first() const noexcept { return false; }

  // The job's ranks on this machine per core they may use, rounded up (1: a core each, or
  // no layout known yet).
  int sharers() const noexcept;
  // The job's ranks whose processes share this one's cores: those of its host, and of
  // other hosts emulated on the same machine (network namespaces of one kernel), which a
  // transport that knows the machines says (0: the host's, from the layout).
  virtual int ranks_on_this_machine() const noexcept { return 0; }
  // That number, or the host's where the transport does not say (1 without a layout).
  int ranks_sharing_cores() const noexcept;
  // The job's ranks on this rank's host, itself included (1 without a layout).
  int ranks_on_my_host() const;

  // Joins the job (its store connection, or kv store, or PMIx) and listens to it.
  void join_job();
  // From abort(): this rank's own failure goes to every other rank, once.
  void spread_failure() noexcept;
  // A link to a peer broke: the operations on it wait up to loss_grace for the cause
  // (another rank's report, the store's word) before failing with peer_lost and `why`.
  void start_loss_grace(const std::string& why);
  void cancel_loss_grace() noexcept;
  // The grace passed with no word of the cause: a transport that survives a peer's loss
  // takes the peers whose links broke for dead; the default fails this rank.
  virtual void grace_over(const std::string& why) noexcept { abort(make_error_code(errc::peer_lost), why); }
  // For grace_over in a transport that survives: takes each of `broken` (the likeliest
  // cause first) for dead, with `why` where it names that peer, else "<before>rank P<after>,
  // and no word of why came within loss_grace".
  void lose_broken(const std::vector<int>& broken, const std::string& why, std::string_view before, std::string_view after) noexcept;
  // What the stall watch sees waiting in collective `seq`: the transport's operations, and
  // for control_seq the agreements waiting on a peer.
  std::string stalled_in(std::uint32_t seq) const {
    return seq == seq_layout::control_seq ? waiting_for(seq) + agreements_waiting() : waiting_for(seq);
  }
  // Collective seq's deadline passed: the store is asked for the root cause first.
  void expire(std::uint32_t seq);
  std::string rank_text() const { return "rank " + std::to_string(job_settings().rank); }

  asio::io_context& io_;
  // Everything of the fabric's runs here, one handler at a time, however many threads
  // run io_.
  asio::any_io_executor ex_{asio::make_strand(io_)};
  std::unique_ptr<job_session> job_;
  bool closing_ = false;
  bool spread_ = false;       // every rank was told of this rank's failure, or it was told of theirs
  bool loss_pending_ = false;  // a link broke and its operations wait for the cause
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  detail::stall_watch stall_{ex_, [this](std::uint32_t seq) { return stalled_in(seq); },
                             [this](const std::string& why) { abort(make_error_code(errc::timeout), why); }};

private:
  // Runs the loop (or waits for the caller's threads to) until the control messages
  // posted have gone, for at most `most`.
  void flush_control(std::chrono::milliseconds most) noexcept;

  bool owns_loop_ = false;
  frame_arena* arena_ = nullptr;  // own_loop's
  result<void> outcome_;  // the job's, once closed
  asio::steady_timer loss_timer_{ex_};
  detail::deadline_table deadlines_;
  std::optional<poller> poller_;  // made at the first wait: the settings are the transport's
};

}  // namespace optcast::detail
