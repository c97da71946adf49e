// One send or receive (or an idle round, or model time passing) as a fabric sees it: what
// a round loop awaits, and what a fabric queues and completes (optcast/fabric.hpp).
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>

#include "optcast/error.hpp"
#include "optcast/tags.hpp"

namespace optcast {

class fabric;

// idle: a round in which the rank neither sends nor receives (its size: how many such
// rounds in a row). Only the simulator's rounds model gives it a duration (the rest of
// the round, and every further round whole); everywhere else it finishes at once.
// Round loops await it for an empty round, so that under the rounds model a rank does
// not run ahead into the next round's sends.
// compute: local work that the cost model charges (Karp et al.'s unit-time additions),
// or a wait an algorithm's schedule asks for. The simulator lets that much virtual time
// pass for the rank; real fabrics finish it at once, the work itself having been done
// on the CPU already.
enum class op_kind : std::uint8_t { send, recv, idle, compute };

// A receive's peer that means any peer (MPI's MPI_ANY_SOURCE): it takes the first
// message with its tag from whichever peer, and its peer is the sender's once it has
// finished. Among messages that have arrived, the earliest; messages from one peer with
// equal tags still match in order. Only fabrics whose receives_from_any() says so take
// it; the others refuse it (errc::invalid_argument).
inline constexpr int any_peer = -2;

// One send or receive. It lives in the frame of the coroutine that awaits it (no heap
// allocation per message); while started it is linked into the fabric's queues, so it
// must not move until it has finished. Awaiting it starts it and yields the byte count.
class operation {
public:
  using completion_fn = void (*)(operation&) noexcept;

  operation() = default;
  operation(fabric& f, op_kind k, int to_or_from, tag t, std::byte* buf, std::size_t bytes) noexcept
      : owner(&f), kind(k), peer(to_or_from), tg(t), data(buf), size(bytes) {}

  fabric* owner = nullptr;
  op_kind kind = op_kind::send;
  int peer = -1;
  tag tg{};
  std::byte* data = nullptr;
  std::size_t size = 0;

  // Filled in by the fabric.
  std::error_code ec;
  bool finished = false;

  // Who is told of the completion; set by the awaiter (a coroutine, or when_all).
  completion_fn on_complete = nullptr;
  void* context = nullptr;

  // The fabric's own while the operation is started, which nothing else reads: links for
  // its queues, one word of state, and three words of a transport's own (TCP: its post
  // order, token and cancel mark; libfabric: its ticket, which holds the fi_context2, and
  // registered memory; the simulator: its message and post order). Three, not the ten an
  // fi_context2 in place took: every round loop's frame holds an operation while it waits.
  struct transport_part {
    operation* next = nullptr;
    operation* prev = nullptr;
    std::uintptr_t state = 0;
    void* ctx[3] = {};
  } transport;
  std::uint32_t trace_id = 0;  // its event in the owner's trace (trace.hpp), + 1; 0: none
  // Which rail carries it to another host (lane mod the fabric's rails; topology), 0 on
  // fabrics of one rail and between ranks of one host. Messages of one tag between two
  // ranks keep one lane: their order holds only within a rail.
  std::uint8_t lane = 0;

  // For fabrics: finish from the event loop and notify the awaiter.
  void complete(std::error_code e) noexcept;
  // For fabrics: finish inside start(), which then returns true.
  bool finish_now(std::error_code e) noexcept {
    ec = e;
    finished = true;
    return true;
  }

  // Awaiting one operation.
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) noexcept;
  result<std::size_t> await_resume() const noexcept {
    if (ec) return fail(ec);
    return size;
  }
};

// "send 4096 B to rank 3, tag 7/2" for error details.
std::string describe_op(const operation& op);

}  // namespace optcast
