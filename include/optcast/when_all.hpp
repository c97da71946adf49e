// Waiting for several fabric operations at once: the send||recv round primitive of the
// papers (when_all(send, recv)) and the k-port round (k sends || k receives).
//
// The group lives in the awaiting coroutine's frame. It finishes when every member has
// finished; the first failure cancels the members still running (so a lost peer on the
// send side does not leave the receive waiting for the deadline) and is the result.
#pragma once

#include <array>
#include <cassert>
#include <coroutine>
#include <cstddef>
#include <span>
#include <utility>

#include "optcast/fabric.hpp"
#include "optcast/task.hpp"

namespace optcast {

namespace detail {

class op_group {
public:
  // Starts every operation; returns false when all finished at once (no suspension).
  bool start(std::span<operation> ops, std::coroutine_handle<> h) noexcept;
  result<void> outcome() const noexcept {
    if (first_error_) return fail(first_error_);
    return {};
  }

private:
  static void on_one(operation& op) noexcept;
  void failed(std::error_code ec) noexcept;
  void release() noexcept {
    if (--pending_ == 0 && waiting_) waiting_.resume();
  }

  std::span<operation> ops_;
  std::coroutine_handle<> waiting_;
  int pending_ = 0;
  std::error_code first_error_;
};

}  // namespace detail

// A fixed-capacity set of operations built up conditionally and awaited together:
//   op_batch<2> round;
//   if (sending) round.add(f.send(to, t, block));
//   if (receiving) round.add(f.recv(from, t, block));
//   if (auto r = co_await round; !r) co_return r;
template <std::size_t N>
class op_batch {
public:
  void add(operation op) noexcept {
    assert(count_ < N);
    ops_[count_++] = op;
  }
  std::size_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  std::span<operation> ops() noexcept { return {ops_.data(), count_}; }

  bool await_ready() const noexcept { return count_ == 0; }
  bool await_suspend(std::coroutine_handle<> h) noexcept { return group_.start(ops(), h); }
  result<void> await_resume() const noexcept { return group_.outcome(); }

private:
  std::array<operation, N> ops_{};
  std::size_t count_ = 0;
  detail::op_group group_;
};

// Awaits operations the caller owns (k-port rounds with a runtime k).
class op_span_awaiter {
public:
  explicit op_span_awaiter(std::span<operation> ops) noexcept : ops_(ops) {}
  bool await_ready() const noexcept { return ops_.empty(); }
  bool await_suspend(std::coroutine_handle<> h) noexcept { return group_.start(ops_, h); }
  result<void> await_resume() const noexcept { return group_.outcome(); }

private:
  std::span<operation> ops_;
  detail::op_group group_;
};

// An operation started now and awaited later: a receive posted steps ahead of the step
// that combines it, so that a sender whose fabric waits for the matching receive
// (libfabric rendezvous) finds it. Must not move while started; a started one that is
// never awaited is cancelled when it goes away.
class posted_op {
public:
  posted_op() = default;
  posted_op(const posted_op&) = delete;
  posted_op& operator=(const posted_op&) = delete;
  ~posted_op() {
    if (started_ && !op_.finished) op_.owner->cancel(op_, make_error_code(errc::cancelled));
  }

  // Starts `op`; the previous one must have finished (been awaited).
  void start(operation op) noexcept {
    assert(!started_ || op_.finished);
    op_ = op;
    op_.on_complete = &on_done;
    op_.context = this;
    waiter_ = {};
    started_ = true;
    op_.owner->post(op_);  // finished at once or later; op_.finished tells
  }
  bool started() const noexcept { return started_; }
  // Asks a started, unfinished operation to finish with errc::cancelled; await
  // finished() before its memory goes (see settle).
  void cancel() noexcept {
    if (started_ && !op_.finished) op_.owner->cancel(op_, make_error_code(errc::cancelled));
  }

  // co_await p.finished(): the operation's outcome.
  struct awaiter {
    posted_op* self;
    bool await_ready() const noexcept { return !self->started_ || self->op_.finished; }
    void await_suspend(std::coroutine_handle<> h) noexcept { self->waiter_ = h; }
    result<std::size_t> await_resume() const noexcept {
      self->started_ = false;
      if (self->op_.ec) return fail(self->op_.ec);
      return self->op_.size;
    }
  };
  awaiter finished() noexcept { return awaiter{this}; }

private:
  static void on_done(operation& op) noexcept {
    auto* self = static_cast<posted_op*>(op.context);
    if (auto h = std::exchange(self->waiter_, {})) h.resume();
  }

  operation op_;
  std::coroutine_handle<> waiter_;
  bool started_ = false;
};

// Cancels every started, unfinished operation of `ops` and waits until its fabric has let
// go of each. A fabric may finish a cancelled operation later (libfabric reports it from
// its completion queue, through the context kept inside the operation), so a loop that
// posts receives ahead settles them before it returns from a failure; the destructor's
// cancel is a last resort for a coroutine destroyed mid-way.
inline task<void> settle(std::span<posted_op> ops) {
  for (auto& p : ops) p.cancel();
  for (auto& p : ops) (void)co_await p.finished();
}

// A failure's way out of a loop that posts receives ahead:
//   co_return co_await settled(ops, r.error());
// settles `ops` (whose memory goes with the loop's frame) before the failure is returned.
inline task<result<void>> settled(std::span<posted_op> ops, std::error_code ec) {
  co_await settle(ops);
  co_return fail(ec);
}

template <class... Ops>
op_batch<sizeof...(Ops)> when_all(Ops... ops) noexcept {
  op_batch<sizeof...(Ops)> b;
  (b.add(ops), ...);
  return b;
}

inline op_span_awaiter when_all(std::span<operation> ops) noexcept { return op_span_awaiter(ops); }

// The one-port round primitive of the papers: send to one rank || receive from another.
inline op_batch<2> exchange(fabric& f, int to, std::span<const std::byte> out, int from,
                            std::span<std::byte> in, tag t) noexcept {
  return when_all(f.send(to, t, out), f.recv(from, t, in));
}

}  // namespace optcast
