// A call's algorithm, as the automatic choice gives it, remembered: a service calling the
// same small collective all day would otherwise weigh every candidate row on every call
// (their refusals, predictions and block counts: a third of the library's own CPU time
// per 8-byte call, measured with callgrind on two ranks of one host). The answer depends
// on nothing but the arguments compared below, so a remembered one is the one
// resolve_for would give again, and every rank still computes its own.
#include <array>

#include "collective_common.hpp"
#include "registry.hpp"
#include "traff_hunold/lanes.hpp"

namespace optcast::detail {

namespace {

struct choice_key {
  int p = 0, ports = 0;
  std::size_t min_block_bytes = 0;
  linear_cost cost{};
  collective coll{};
  algorithm alg{};
  int blocks = 0;
  call_traits traits{};
  loggp_params model{};
  call_shape shape{};
  // What predict_lanes reads of a lane_shape (multi_lane_runners.cpp); 0 hosts: none.
  std::array<int, 4> lanes{};
  // Every field: one added above is compared without a line of its own here.
  bool operator==(const choice_key&) const = default;
};

// A few recent choices per thread: a program alternates between a handful of calls (a
// barrier, an allreduce of a counter, a broadcast of its configuration).
constexpr std::size_t remembered = 16;
struct choice_memo {
  std::array<choice_key, remembered> keys{};
  std::array<resolved, remembered> answers{};
  std::size_t filled = 0, next = 0, last = 0;
};

}  // namespace

bool has_lanes(const communicator& c) {
  // Every call asks: the common answer (no layout, or a host per rank on one rail) without
  // looking at the shape.
  const topology* t = c.get_fabric().layout();
  if (!t) return false;
  // Lanes run between hosts: one host (the first thing a user tries) has none.
  const int hosts = t->hosts();
  if (hosts <= 1 || (t->rails <= 1 && hosts == t->size())) return false;
  const lane_shape* s = lane_shape::cached(t, c.rank());
  return s && s->worth_it();
}

resolved resolve(const communicator& c, collective coll, const collective_options& o, const call_traits& t,
                 const loggp_params& m, const call_shape& shape) {
  const lane_shape* lanes = t.lanes ? lane_shape::cached(c.get_fabric().layout(), c.rank()) : nullptr;
  if (lanes && !lanes->worth_it()) lanes = nullptr;
  choice_key key;
  key.p = c.size();
  key.ports = c.ports();
  key.min_block_bytes = c.options().min_block_bytes;
  key.cost = c.options().cost;
  key.coll = coll;
  key.alg = o.alg;
  key.blocks = o.blocks;
  key.traits = t;
  key.model = m;
  key.shape = shape;
  if (lanes) key.lanes = {lanes->hosts, lanes->per_host, lanes->rails, lanes->sub};
  thread_local choice_memo memo;
  // From the last one found: a loop of one call finds it at the first comparison.
  for (std::size_t k = 0; k < memo.filled; ++k) {
    const std::size_t i = (memo.last + k) % memo.filled;
    if (memo.keys[i] == key) {
      memo.last = i;
      return memo.answers[i];
    }
  }
  const resolved r = resolve_for(key.p, key.ports, c.options(), coll, o, t, m, shape, lanes);
  memo.last = memo.next;
  memo.keys[memo.next] = key;
  memo.answers[memo.next] = r;
  memo.next = (memo.next + 1) % remembered;
  if (memo.filled < remembered) ++memo.filled;
  return r;
}

}  // namespace optcast::detail
