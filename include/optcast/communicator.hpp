// A communicator: a fabric plus what collectives share on it (sequence numbers, the
// defaults every call may override).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "optcast/algorithm.hpp"
#include "optcast/fabric.hpp"
#include "optcast/task.hpp"

namespace optcast {

// The linear cost of one message, alpha + beta * bytes, used to pick the block count
// until measured parameters take over (LogGP calibration).
struct linear_cost {
  double alpha_s = 25e-6;          // per-message latency, seconds
  double beta_s_per_byte = 1 / 1.5e9;  // inverse bandwidth, seconds per byte
  bool operator==(const linear_cost&) const = default;
};

struct communicator_options {
  // k of the k-port model the collectives may use: 0 means the fabric's (fabric::ports()),
  // a smaller k holds them to fewer; more than the fabric has is refused.
  int ports = 0;
  // Deadline of every collective unless the call gives its own. OPTCAST_TIMEOUT
  // (seconds) overrides the default when a communicator is made from the environment.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  algorithm broadcast_algorithm = algorithm::automatic;
  linear_cost cost{};
  std::size_t min_block_bytes = 8192;  // the automatic block count never goes below this
  // LogP(GP) parameters, seconds, for algorithms shaped by them when neither the call
  // nor the fabric gives any: defaults until calibration measures them (docs/DESIGN.md,
  // "The default model", says where each comes from). The second link is between ranks
  // of one host, where the fabric's layout has several on one.
  loggp_params model{20e-6, 2e-6, 4e-6, 1 / 1.5e9, 1 / 1e9, 0.35, loggp_link{20e-6, 2e-6, 4e-6, 1 / 6e9}};
  // Before each collective, every rank compares its call's signature with its ring
  // neighbour's (one 32-byte message per rank), so a call made differently fails with
  // call_mismatch on every rank at its start, whatever its messages would have shown.
  // For debugging; OPTCAST_CHECK=1 sets it for a communicator made from the environment.
  bool check = false;
};

namespace detail {
struct comm_space;   // lib/runtime/comm_access.hpp
struct comm_access;  // the collectives' and split's view of a communicator's numbering
}  // namespace detail

// Move-only: a copy would number its collectives apart from the original on the same
// fabric, and the ranks' calls would no longer match up.
class communicator {
public:
  explicit communicator(std::shared_ptr<fabric> f, communicator_options o = {})
      : fabric_(std::move(f)), options_(o) {}
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&& o) noexcept = default;
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      release();
      fabric_ = std::move(o.fabric_);
      options_ = o.options_;
      next_seq_ = o.next_seq_;
      last_error_ = std::move(o.last_error_);
      space_ = std::move(o.space_);
      id_ = o.id_;
      agreements_ = o.agreements_;
    }
    return *this;
  }
  ~communicator() { release(); }

  int rank() const noexcept { return fabric_->rank(); }
  int size() const noexcept { return fabric_->size(); }
  // The ports collectives use: options().ports if set, else the fabric's.
  int ports() const noexcept { return options_.ports > 0 ? options_.ports : fabric_->ports(); }
  fabric& get_fabric() noexcept { return *fabric_; }
  const std::shared_ptr<fabric>& shared_fabric() const noexcept { return fabric_; }
  const fabric& get_fabric() const noexcept { return *fabric_; }

  const communicator_options& options() const noexcept { return options_; }
  communicator_options& options() noexcept { return options_; }

  // 0 for a job's communicator; a sub-communicator's id (seq_layout).
  std::uint32_t id() const noexcept { return id_; }

  // Broken after any failed collective, or revoked (optcast/survive.hpp); every later
  // collective fails with errc::broken.
  bool broken() const noexcept { return static_cast<bool>(failure()); }
  // The fabric's failure, else the cause of this communicator's revocation.
  std::error_code failure() const noexcept {
    if (auto ec = fabric_->failure()) return ec;
    const auto* s = fabric_->survival();
    return s ? s->revoked(id_) : std::error_code();
  }
  // What is known about the failure (which peer, which sizes) for error messages.
  std::string failure_detail() const {
    if (fabric_->failure()) return fabric_->failure_detail();
    const auto* s = fabric_->survival();
    return s ? s->revocation(id_) : std::string();
  }

  // Ends this rank's part in the job and returns the job's outcome: success only if
  // every rank finished without failure; otherwise the first failure anywhere, with
  // failure_detail() naming the rank and why. On TCP and libfabric it waits (up to the
  // deadline) for the other ranks. A program should exit non-zero unless it succeeds.
  // The communicator is closed afterwards.
  result<void> leave() { return fabric_->leave(); }

  // Why the last collective refused its arguments (errc::invalid_argument), e.g.
  // "allgatherv: counts[2] = -1 is negative". Collectives set it.
  const std::string& last_error() const noexcept { return last_error_; }

private:
  friend struct detail::comm_access;
  template <class T>
  friend T run(communicator& c, task<T> t);

  // A sub-communicator on `view` (split.cpp), holding id `id` of `space`.
  communicator(std::shared_ptr<fabric> view, communicator_options o, std::shared_ptr<detail::comm_space> space,
               std::uint32_t id) noexcept
      : fabric_(std::move(view)), options_(o), space_(std::move(space)), id_(id) {}
  // Every collective call takes the next number on every rank; ranks must call
  // collectives in the same order (as in MPI), which lets several run at once.
  std::uint32_t next_seq() noexcept { return seq_layout::collective(id_, next_seq_++); }
  // Agreements (and shrinks) are numbered apart from the collectives: after a failure,
  // ranks may have made different numbers of calls that failed, but they agree in order.
  std::uint32_t next_agreement() noexcept { return agreements_++; }
  // The seq of point-to-point messages with `user_tag` (<= seq_layout::max_user_tag).
  std::uint32_t p2p_seq(std::uint32_t user_tag) const noexcept { return seq_layout::p2p(id_, user_tag); }
  // Made when first needed (a split): a simulated world's million communicators mostly
  // never split, and each space is a 256-byte bitset and a mutex.
  const std::shared_ptr<detail::comm_space>& space();

  void record_error(std::string why) { last_error_ = std::move(why); }
  // Gives the id back to the space (a sub-communicator's).
  void release() noexcept;

  std::shared_ptr<fabric> fabric_;
  communicator_options options_;
  std::uint32_t next_seq_ = 0;
  std::string last_error_;
  std::shared_ptr<detail::comm_space> space_;
  std::uint32_t id_ = 0;
  std::uint32_t agreements_ = 0;
};

namespace detail {
// start(finished) on the fabric's executor, this thread waiting until finished() is
// called (lib/runtime/borrowed_loop.cpp). Throws std::logic_error when this thread runs
// the loop, or the loop is stopped. Returns false, with why in *why, when nothing has run
// start within `deadline` (no thread runs the loop): start will then never run.
bool block_on_loop(fabric& f, const std::function<void(std::function<void()> finished)>& start,
                   std::chrono::milliseconds deadline, std::string* why);
}  // namespace detail

namespace detail {
template <class T>
struct is_result : std::false_type {};
template <class V>
struct is_result<result<V>> : std::true_type {};
}  // namespace detail

// The blocking entry point. On a fabric with a loop of its own (join()), drives it on
// this thread until `t` has finished; on the caller's io_context (join(io)), hands `t` to
// the threads that run it and waits, from a thread that does not (std::logic_error
// otherwise, and when the io_context is stopped). If no thread runs that io_context, the
// task never starts: after the communicator's deadline (options().timeout) a task
// returning a result fails with errc::timeout and last_error() saying why (any other
// throws std::runtime_error with it).
template <class T>
T run(communicator& c, task<T> t) {
  std::optional<T> out;
  std::exception_ptr error;
  if (c.get_fabric().borrowed_loop()) {
    auto held = std::make_shared<task<T>>(std::move(t));
    std::string why;
    const bool ran = detail::block_on_loop(
        c.get_fabric(),
        [&, held](std::function<void()> finished) {
          spawn(std::move(*held), [&, finished](std::optional<T> v, std::exception_ptr e) {
            out = std::move(v);
            error = e;
            finished();
          });
        },
        c.options().timeout, &why);
    if (!ran) {
      if constexpr (detail::is_result<T>::value) {
        c.record_error(why);
        return fail(errc::timeout);
      } else {
        throw std::runtime_error(why);
      }
    }
    if (error) std::rethrow_exception(error);
    return std::move(*out);
  }
  bool done = false;
  detail::frame_scope frames(c.get_fabric().frames());
  spawn(std::move(t), [&](std::optional<T> v, std::exception_ptr e) {
    out = std::move(v);
    error = e;
    done = true;
  });
  auto finished = [&] { return done; };
  c.get_fabric().run_until(finished);
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

// One communicator per rank of an in-process world (local, sim), in rank order.
template <class World>
std::vector<communicator> communicators_of(const World& w, communicator_options o = {}) {
  std::vector<communicator> out;
  detail::reserve_huge(out, static_cast<std::size_t>(w.size()));
  for (int r = 0; r < w.size(); ++r) out.emplace_back(w.fabric(r), o);
  return out;
}

// Runs make(comm) for every communicator at once and returns each one's result, in
// order. For fabrics whose ranks share one event loop (local, sim): driving the first
// communicator's fabric drives them all.
template <class F>
auto run_all(std::vector<communicator>& comms, F make) {
  using task_t = decltype(make(comms.front()));
  using value_t = decltype(std::declval<task_t&>().take());
  auto& loop = comms.front().get_fabric();
  detail::frame_scope frames(loop.frames());
  // One counter is every task's continuation: no coroutine per rank to await each one
  // (a simulated world may have a million ranks). Declared before the tasks, it outlives
  // them.
  std::size_t done = 0;
  auto count = detail::count_into(done);
  count.handle().resume();  // now waiting for the first task to finish
  std::vector<task_t> tasks;
  detail::reserve_huge(tasks, comms.size());
  try {
    for (auto& c : comms) {
      tasks.push_back(make(c));
      tasks.back().start(count.handle());
    }
    auto all_done = [&] { return done == comms.size(); };
    loop.run_until(all_done);
  } catch (...) {
    // The tasks started may have operations queued in the fabrics: fail those and let
    // the tasks finish before their frames go.
    for (auto& c : comms) c.get_fabric().abort(make_error_code(errc::cancelled), "run_all left early: an exception");
    auto started_done = [&] { return done == tasks.size(); };
    try {
      loop.run_until(started_done);
    } catch (...) {  // nothing left pending: what still waits awaits no fabric
    }
    throw;
  }
  // The values in order; the first exception (by rank) rethrown once all have finished.
  std::vector<value_t> values;
  detail::reserve_huge(values, tasks.size());
  std::exception_ptr error;
  for (auto& t : tasks) try {
      values.push_back(t.take());
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  if (error) std::rethrow_exception(error);
  return values;
}

}  // namespace optcast
