// The fabric contract: P ranks, fully connected, one-port or k-port send||recv.
//
// What a program sees of a fabric, and what the collectives are written against. The
// machinery a fabric's writer uses (checking calls' signatures, the job's outcome) is
// optcast/fabric_base.hpp's. What the contract speaks of has a header each: one send or
// receive (operation.hpp), a message's tag and the numbering of calls in it (tags.hpp),
// a call's signature (call_signature.hpp), the cost models (cost_model.hpp).
//
// A fabric moves tagged messages between ranks. Collectives are written against this
// interface only, so the same round loop runs over TCP, libfabric, the in-process
// fabric and the virtual-time simulator.
//
// Contract (every fabric, tested by tests/fabric_conformance_test.cpp):
//  - send(peer, tag, bytes) finishes when `bytes` may be reused. It never waits for the
//    matching receive to be posted: a fabric buffers a message that arrives before its
//    receive ("unexpected message") and hands it over when the receive is posted.
//  - recv(peer, tag, bytes) finishes when exactly bytes.size() bytes are in place. A
//    message of another size is errc::size_mismatch, never an overflow or a truncation.
//  - Messages match on (peer, tag); between one pair of ranks, messages with equal tags
//    match in the order they were sent. Tags carry the collective's sequence number, so
//    several collectives in flight on one communicator never cross-match.
//  - A fabric is driven by one thread at a time. Completions run from its event loop,
//    never from inside start(): a start() that finishes at once says so by returning true.
//  - Failure: abort() finishes every pending operation with the given error, and every
//    later start() fails with that same error (the cause, not a generic "broken"; the
//    collectives layer refuses new collectives with errc::broken). A collective's
//    deadline finishes its operations with errc::timeout. A fabric that survives a
//    peer's loss (survival(), optcast/survivable.hpp) fails only what waits on that peer
//    and the communicators it is in (revoke), and stays usable for the rest.
#pragma once

#include <bit>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "optcast/call_signature.hpp"
#include "optcast/cost_model.hpp"
#include "optcast/error.hpp"
#include "optcast/operation.hpp"
#include "optcast/scratch.hpp"
#include "optcast/survivable.hpp"
#include "optcast/tags.hpp"
#include "optcast/topology.hpp"

namespace asio {
class any_io_executor;
class io_context;
}

namespace optcast {

namespace detail {
class frame_arena;  // lib/core/frame_arena.hpp: see fabric::frames()
}

class fabric;
class trace_log;

// A minimal non-owning callable reference for run_until (no allocation).
class stop_predicate {
public:
  template <class F>
  stop_predicate(F& f) noexcept  // NOLINT(google-explicit-constructor)
      : obj_(&f), call_([](void* o) { return static_cast<bool>((*static_cast<F*>(o))()); }) {}
  bool operator()() const { return call_(obj_); }

private:
  void* obj_;
  bool (*call_)(void*);
};

class fabric {
public:
  virtual ~fabric() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // k of the k-port model: sends (and receives) a rank may have in flight per round.
  virtual int ports() const noexcept { return 1; }
  virtual std::string_view name() const noexcept = 0;
  // The cost model the fabric knows it follows (the simulator's), if any; algorithms
  // shaped by L, o, g use it unless the caller gives parameters.
  virtual std::optional<loggp_params> cost_model() const noexcept { return std::nullopt; }
  // The fabric's virtual clock (the simulator's time), if it has one. A schedule that
  // fixes the step of every transfer (Karp et al.'s single-sending k-item broadcast,
  // where nothing may arrive early) waits for it with compute(); real fabrics have no
  // global steps, and there data moves as soon as it can.
  virtual std::optional<double> model_time() const noexcept { return std::nullopt; }
  // Which host each rank runs on and the rails between hosts; null: every rank a host
  // of its own, with one rail.
  virtual const topology* layout() const noexcept { return nullptr; }

  // Whether messages carry their bytes. The simulator timing only (move_payload off)
  // does not: nothing that arrives is read, so an algorithm may skip its own packing
  // and combining and work out only how many bytes each message has. The peers, tags,
  // sizes and order of its messages must stay exactly what they are otherwise.
  virtual bool carries_data() const noexcept { return true; }

  // Whether receives may name any_peer.
  virtual bool receives_from_any() const noexcept { return false; }

  // Starts `op` (peer, tag, buffer filled in). Returns true if it finished at once, with
  // op.ec telling how; otherwise the fabric calls op.complete() later, from its event
  // loop, exactly once, and does not touch `op` afterwards.
  virtual bool start(operation& op) noexcept = 0;
  // Starts an op_kind::idle or compute operation; the same rules as start().
  virtual bool start_local(operation& op) noexcept { return op.finish_now({}); }
  bool post(operation& op) noexcept {
    if (trace_) return post_traced(op);
    return op.kind == op_kind::idle || op.kind == op_kind::compute ? start_local(op) : start(op);
  }

  // Records every operation posted from now on in `log` (trace.hpp); nullptr stops.
  void set_trace(std::shared_ptr<trace_log> log) noexcept { trace_ = std::move(log); }
  const std::shared_ptr<trace_log>& trace() const noexcept { return trace_; }
  // Where this fabric's collective calls are recorded: its trace, or for a view of
  // another fabric (a sub-communicator's), the one whose operations it posts.
  virtual trace_log* call_trace() const noexcept { return trace_.get(); }
  // For operation::complete: the traced operation `op` has finished.
  void trace_end(operation& op) noexcept;

  // Asks a started operation to finish soon with `ec` (it may complete inline). No
  // effect on a finished one. Used by when_all to stop the siblings of a failed
  // operation, and by deadlines.
  virtual void cancel(operation& op, std::error_code ec) noexcept = 0;

  // Every operation tagged with collective `seq` finishes with errc::timeout once
  // `timeout` has passed (on the fabric's clock: wall time, or virtual time). Returns a
  // token for disarm_deadline; several deadlines may name the same seq.
  virtual std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds timeout) = 0;
  virtual void disarm_deadline(std::uint64_t token) noexcept = 0;

  // Runs the fabric's event loop until `done()` holds; for the blocking entry points.
  virtual void run_until(stop_predicate done) = 0;
  // The executor the fabric's work runs on (its event loop), for the asynchronous entry
  // points (optcast/asio.hpp); nullptr for a fabric without one (the simulator, whose
  // virtual time only run_until drives).
  virtual const asio::any_io_executor* executor() const noexcept { return nullptr; }
  // The caller's io_context the fabric runs on (join(io)): run() then never runs it
  // itself, it hands the call to the loop's threads and waits. Null when the fabric
  // drives a loop of its own in run_until (join(), a local world with its own loop, the
  // simulator).
  virtual asio::io_context* borrowed_loop() const noexcept { return nullptr; }
  // Where the coroutine frames of collectives started on this fabric come from while
  // its loop runs them (task.hpp's frame_scope): the simulator's world keeps an arena;
  // nullptr, the heap.
  virtual detail::frame_arena* frames() const noexcept { return nullptr; }

  // Fails every pending operation with `ec`, and every later one too.
  virtual void abort(std::error_code ec, std::string detail) noexcept = 0;

  // The first failure this fabric saw, and what it knows about it (peer, sizes, ...).
  // Virtual for a fabric that is a view of another (a sub-communicator's), which shares
  // its failure.
  virtual std::error_code failure() const noexcept { return failure_; }
  virtual const std::string& failure_detail() const noexcept { return failure_detail_; }
  // A description of the most recent failed operation.
  virtual const std::string& last_error() const noexcept { return last_error_; }

  // Operations on this fabric, to be awaited or passed to when_all.
  operation send(int peer, tag t, std::span<const std::byte> bytes) noexcept {
    return {*this, op_kind::send, peer, t, const_cast<std::byte*>(bytes.data()), bytes.size()};
  }
  operation recv(int peer, tag t, std::span<std::byte> bytes) noexcept {
    return {*this, op_kind::recv, peer, t, bytes.data(), bytes.size()};
  }
  operation idle_round() noexcept { return idle_rounds(1); }
  // `rounds` (>= 1) idle rounds in a row as one operation: a round loop with nothing to
  // do until a later round waits once instead of once a round (in the simulator, most
  // of a large world's events were such rounds).
  operation idle_rounds(int rounds) noexcept {
    return {*this, op_kind::idle, rank(), {}, nullptr, static_cast<std::size_t>(rounds < 1 ? 1 : rounds)};
  }
  // `units` of model time (>= 0) pass for this rank; see op_kind::compute.
  operation compute(double units) noexcept {
    return {*this, op_kind::compute, rank(), {}, nullptr, std::bit_cast<std::size_t>(units)};
  }

  // This rank's scratch memory, reused from one collective to the next (scratch.hpp).
  // A fabric that views another for one call hands out the other's, so what the call
  // takes stays for the next one.
  virtual scratch_pool& scratch() noexcept { return scratch_; }

  // The signature of collective `seq` while it runs on this rank (set by the collectives
  // layer before its first message, cleared after its last), which the fabric puts on
  // every message of it and checks every arriving one against. fabric_base keeps them;
  // a fabric that wraps another forwards these three to it.
  virtual void sign(std::uint32_t seq, const call_signature& s) = 0;
  virtual void unsign(std::uint32_t seq) noexcept = 0;
  virtual call_signature signature_of(std::uint32_t seq) const noexcept = 0;
  // After collective `seq` finished its operations on this rank, before it returns: a
  // message of it still unreceived says another rank called it differently (fails the
  // fabric with errc::call_mismatch, and returns that); none otherwise. One arriving
  // later is caught by unexpected_consistent.
  virtual std::error_code leftover(std::uint32_t seq);

  // Ends this rank's part in the job and returns the job's outcome: success if every
  // rank finished without failure, else the job's first failure anywhere (failure() and
  // failure_detail() then say which rank and why), or timeout if some rank did not
  // finish within the deadline. Nothing may be started after it. Fabrics of a job (TCP,
  // libfabric) wait for the other ranks here; the in-process ones report this rank's
  // own failure.
  virtual result<void> leave();

  // ------------------------------------------------ surviving a failure (docs/DESIGN.md)
  // The fabric's face for surviving a member's death (optcast/survivable.hpp), or none:
  // then a member's loss fails the fabric as a whole (abort), and agree and shrink refuse.
  // (Const, like executor(): the face is a handle to the fabric, whose state it changes.)
  virtual survivable* survival() const noexcept { return nullptr; }

protected:
  // Records the first failure (later ones keep the first, which is the cause).
  void note_failure(std::error_code ec, std::string detail) {
    if (!failure_) {
      failure_ = ec;
      failure_detail_ = std::move(detail);
    }
  }
  void note_error(std::string what) { last_error_ = std::move(what); }
  // Another rank's report of why the job failed. It replaces a lost connection
  // (errc::peer_lost) recorded first, which is most often that rank closing its
  // connections after its failure, while the report of it was on its way.
  void note_cause(std::error_code ec, std::string detail) {
    if (failure_ == errc::peer_lost && ec != errc::peer_lost) failure_ = {};
    note_failure(ec, std::move(detail));
  }
  // Replaces the first failure (a job's outcome, learnt at the end, outranks it).
  void replace_failure(std::error_code ec, std::string detail) {
    failure_ = ec;
    failure_detail_ = std::move(detail);
  }
  // For a fabric that can start over (the simulator's reset).
  void clear_failure() noexcept {
    failure_ = {};
    failure_detail_.clear();
    last_error_.clear();
  }

private:
  bool post_traced(operation& op) noexcept;

  std::error_code failure_;
  std::string failure_detail_;
  std::string last_error_;
  scratch_pool scratch_;
  std::shared_ptr<trace_log> trace_;
};

inline void operation::complete(std::error_code e) noexcept {
  ec = e;
  finished = true;
  if (trace_id) owner->trace_end(*this);
  on_complete(*this);
}

}  // namespace optcast
