// Timing a collective across processes of one host: a barrier, then the time from the
// root's start to the last rank's finish. steady_clock is CLOCK_MONOTONIC, shared by all
// processes of a host (and of network namespaces on it), so times of different ranks
// compare directly. Across hosts this would need clock synchronisation.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "optcast/collectives.hpp"

namespace optcast::measure {

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs `op` (a blocking call returning result<void>) on every rank once and returns, on
// rank 0, seconds from the root's start to the last rank's end (0 elsewhere).
template <class Op>
result<double> timed(communicator& c, int root, Op op, std::uint32_t tag = 0xfff10u) {
  if (auto b = run(c, optcast::barrier(c)); !b) return fail(b.error());
  const std::int64_t t0 = now_ns();
  if (auto r = op(); !r) return fail(r.error());
  std::array<std::int64_t, 2> mine{c.rank() == root ? t0 : 0, now_ns()};
  if (c.rank() != 0) {
    if (auto r = run(c, send(c, 0, tag, std::as_bytes(std::span(mine)))); !r) return fail(r.error());
    return 0.0;
  }
  std::int64_t start = mine[0], end = mine[1];
  std::array<std::int64_t, 2> theirs{};
  for (int r = 1; r < c.size(); ++r) {
    if (auto x = run(c, recv(c, r, tag, std::as_writable_bytes(std::span(theirs)))); !x) return fail(x.error());
    if (r == root) start = theirs[0];
    end = std::max(end, theirs[1]);
  }
  return static_cast<double>(end - start) / 1e9;
}

}  // namespace optcast::measure
