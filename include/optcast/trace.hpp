// A timeline of one rank's fabric operations: when each send and receive was posted and
// when it completed, with its peer, tag (collective and step) and size. Where the time of
// a real run goes (a round waiting for its slowest message, a receive posted after its
// data arrived, a forward that starts late) shows in it.
//
//   OPTCAST_TRACE=/tmp/run optcast-bench coll --np 8 ...   -> /tmp/run.rank<r>.json
//   fabric.set_trace(std::make_shared<optcast::trace_log>());  // in a program
//
// Times are CLOCK_MONOTONIC seconds, shared by the processes (and network namespaces) of
// one host; on the simulator, its virtual time. Tracing costs two clock reads per
// operation; off, one pointer test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "optcast/fabric.hpp"

namespace optcast {

struct trace_event {
  op_kind kind;
  int peer;
  tag tg;
  std::size_t bytes;
  double posted;  // when the operation was handed to the fabric
  double done;    // when it completed (< posted: it never did)
  int error;      // its error code's value, 0 for success
};

class trace_log {
public:
  // Keeps the first `capacity` operations (later ones are counted, not kept). With a
  // path, writes the log there as JSON when it is destroyed (with the fabric).
  explicit trace_log(std::size_t capacity = 1 << 20, std::string path = {});
  ~trace_log();
  trace_log(const trace_log&) = delete;
  trace_log& operator=(const trace_log&) = delete;

  const std::vector<trace_event>& events() const noexcept { return events_; }
  std::size_t dropped() const noexcept { return dropped_; }
  // {"rank": r, "clock": "monotonic"|"model", "dropped": n, "events": [[kind, peer, seq,
  // step, bytes, posted, done, error], ...]} with kind 0 send, 1 recv, 2 idle, 3 compute.
  std::string json() const;

private:
  friend class fabric;
  // The event index + 1 an operation carries while in flight, 0 when not kept.
  std::uint32_t begin(const fabric& f, const operation& op);
  void end(const fabric& f, const operation& op) noexcept;

  std::vector<trace_event> events_;
  std::size_t capacity_;
  std::size_t dropped_ = 0;
  std::string path_;
  int rank_ = -1;
  bool model_clock_ = false;
};

}  // namespace optcast
