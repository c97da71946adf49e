#include "round_loops.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// The rank-ordered binomial tree (any associative operator): rank v combines
// [v, v + mask) with [v + mask, v + 2 mask) in that order, so the result at rank 0 is
// in_0 (+) ... (+) in_{p-1}; a root other than 0 gets it in one more step.
task<result<void>> reduce_ordered(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                  int root, const erased_reduction& op) {
  const int p = f.size(), v = f.rank();
  const std::size_t count = work.size() / op.elem;
  scratch_pool::lease right_lease;
  std::span<std::byte> right;
  // Rank v sends in round log2(its lowest set bit), after its receives; where its
  // partner v + mask does not exist, an idle round keeps it to that round (the rounds
  // model would otherwise see it send while its parent still receives).
  for (int mask = 1; mask < p; mask <<= 1) {
    if (v & mask) {
      if (auto r = co_await f.send(v - mask, {seq, 0}, work); !r) co_return fail(r.error());
      break;
    }
    if (v + mask < p) {
      if (right.empty() && !work.empty()) {
        right_lease = f.scratch().take(work.size());
        right = right_lease.span();
      }
      if (auto r = co_await f.recv(v + mask, {seq, 0}, right); !r) co_return fail(r.error());
      op(work.data(), right.data(), work.data(), count);  // [v, v+mask) before [v+mask, v+2mask)
    } else if (auto r = co_await f.idle_round(); !r) {
      co_return fail(r.error());
    }
  }
  if (root != 0) {
    if (v == 0)
      if (auto r = co_await f.send(root, {seq, 1}, work); !r) co_return fail(r.error());
    if (v == root)
      if (auto r = co_await f.recv(0, {seq, 1}, work); !r) co_return fail(r.error());
  }
  co_return result<void>{};
}

}  // namespace optcast::algorithms
