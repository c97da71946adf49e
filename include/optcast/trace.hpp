// A timeline of one rank: every collective call (what, which algorithm, how many bytes,
// root, blocks, sequence number, when it started and ended) and every send and receive
// (peer, tag, size, when posted and when completed). Where the time of a real run goes
// (a round waiting for its slowest message, a receive posted after its data arrived, a
// forward that starts late) shows in it.
//
//   OPTCAST_TRACE=/tmp/run optcast-bench coll --np 8 ...   -> /tmp/run/rank<r>.json
//   optcast trace merge /tmp/run -o trace.json             -> one file, clocks aligned
//   fabric.set_trace(std::make_shared<optcast::trace_log>());  // in a program
//
// The files are Chrome trace-event JSON (chrome://tracing, https://ui.perfetto.dev): a
// process per rank, a thread (lane) for its collectives and lanes for its sends and its
// receives, each operation a slice inside its collective's, a flow arrow from each send
// to the receive that took it, and for a message that arrived before its receive was
// posted (an unexpected message, held by the fabric), a slice for that wait. Times are CLOCK_MONOTONIC (one host's processes and
// network namespaces share it); with OPTCAST_TRACE, the job measures at start-up each
// rank's offset from rank 0's clock (measure_clock_offset), and `optcast trace merge`
// applies them. On the simulator: its virtual time (a model unit drawn as a second).
// Tracing costs two clock reads per operation; off, one pointer test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "optcast/algorithm.hpp"
#include "optcast/fabric.hpp"
#include "optcast/task.hpp"

namespace optcast {

class communicator;

struct trace_event {
  op_kind kind;
  int peer;
  tag tg;
  std::size_t bytes;
  double posted;  // when the operation was handed to the fabric
  double done;    // when it completed (< posted: it never did)
  int error;      // its error code's value, 0 for success
  // A receive whose message was already there when it was posted (an unexpected
  // message): when it arrived; -1 otherwise.
  double arrived = -1;
};

// One collective call on this rank.
struct trace_call {
  collective coll = collective::broadcast;
  algorithm alg = algorithm::automatic;  // what ran (automatic: refused before choosing)
  std::uint32_t seq = 0;
  std::uint64_t bytes = 0;
  int root = -1;    // rooted collectives
  int blocks = 0;
  int ranks = 0;    // the communicator's size and this rank in it (sub-communicators)
  int rank = 0;
  double start = 0, end = -1;  // end < start: it never finished
  int error = 0;
};

// This rank's clock against rank 0's: t(rank 0) = t(here) + offset, within +- error
// (half the best round trip of the exchanges).
struct clock_offset {
  double offset = 0;
  double error = 0;
};

class trace_log {
public:
  // Keeps the first `capacity` operations and calls (later ones are counted, not kept).
  // With a path, writes the log there (chrome_json) when it is destroyed (with the
  // fabric); throws std::invalid_argument when another live log of this process has
  // that path.
  explicit trace_log(std::size_t capacity = 1 << 20, std::string path = {});
  ~trace_log();
  trace_log(const trace_log&) = delete;
  trace_log& operator=(const trace_log&) = delete;

  const std::vector<trace_event>& events() const noexcept { return events_; }
  const std::vector<trace_call>& calls() const noexcept { return calls_; }
  std::size_t dropped() const noexcept { return dropped_; }

  void set_clock_offset(clock_offset c) noexcept { clock_ = c; }
  const std::optional<clock_offset>& offset() const noexcept { return clock_; }

  // A collective starts on `f` (its events follow); the index to end it with, + 1 (0:
  // not kept).
  std::uint32_t begin_call(const fabric& f, const trace_call& c);
  void end_call(const fabric& f, std::uint32_t id, int error) noexcept;

  // Chrome trace-event JSON: {"traceEvents": [...], "displayTimeUnit": "ns", "optcast":
  // {"rank", "clock": "monotonic"|"model", "clock_offset_s", "clock_error_s" (null when
  // not measured), "dropped", "calls", "events"}}. Timestamps are this rank's clock in
  // microseconds. Each operation slice's args: peer, seq, step, bytes (and error); each
  // message's flow id is the same on both ends: (sender, receiver, seq, step, how many
  // such messages came before it).
  std::string chrome_json() const;

private:
  friend class fabric;
  friend void trace_unexpected(const fabric& f, const operation& op, double arrived) noexcept;
  // The event index + 1 an operation carries while in flight, 0 when not kept.
  std::uint32_t begin(const fabric& f, const operation& op);
  void end(const fabric& f, const operation& op) noexcept;

  std::vector<trace_event> events_;
  std::vector<trace_call> calls_;
  std::size_t capacity_;
  std::size_t dropped_ = 0;
  std::string path_;
  int rank_ = -1;
  bool model_clock_ = false;
  std::optional<clock_offset> clock_;
};

// The clock a fabric's trace uses: its virtual time, else CLOCK_MONOTONIC seconds.
double trace_clock(const fabric& f) noexcept;
// For fabrics: the traced receive `op` takes a message that arrived at `arrived`
// (trace_clock), before the receive was posted. Nothing when untraced.
void trace_unexpected(const fabric& f, const operation& op, double arrived) noexcept;

// Every rank of `c` exchanges a few time stamps with rank 0 (eight round trips each, the
// fastest kept) and gets its clock's offset from rank 0's; rank 0 gets {0, 0}. A
// collective: every rank calls it, in the same order as its other collectives. Fails
// with the fabric's error (errc::timeout after `timeout`).
task<result<clock_offset>> measure_clock_offset(communicator& c, std::chrono::milliseconds timeout);

}  // namespace optcast
