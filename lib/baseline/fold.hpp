// The pairwise-exchange algorithms (recursive doubling and halving, the barrier) for any
// p: the largest power of two 2^m <= p exchange; before that the first 2 (p - 2^m) ranks
// fold in pairs (the odd one hands its operand to the even one, which takes part for
// both and hands the result back at the end), and the others idle that round, so that no
// rank receives twice in one round.
#pragma once

#include <cstdint>
#include <span>

#include "optcast/fabric.hpp"
#include "optcast/reduction.hpp"
#include "optcast/task.hpp"

namespace optcast::algorithms {

struct folded {
  int pof2 = 1, rem = 0;
  int v = -1;  // this rank's place among the 2^m; -1 for one that folded (it has the result)
  // The rank of place u.
  int real(int u) const noexcept { return u < rem ? 2 * u : u + rem; }
};

// Who folds with whom among p ranks, and rank r's place: no messages. Where p is a power
// of two nobody folds (rem 0), and the callers skip fold() and unfold() (two coroutine
// frames a call) altogether.
folded fold_shape(int p, int r) noexcept;
// Folds the pairs, step {seq, step} (step advanced where p is not a power of two): the
// even rank receives its partner's `mine` into `in` and, with an operator, combines it
// into its own `mine` on the right; the odd one sends `mine` and receives the even one's
// `result` into its own at the end (a reduction: both the vector; an allgather: its
// segment, then every segment).
task<result<folded>> fold(fabric& f, std::uint32_t seq, std::uint32_t& step, std::span<std::byte> mine,
                          std::span<std::byte> result, std::span<std::byte> in, const erased_reduction* op);
// After the last exchange: the even rank of a folded pair hands the result back.
task<result<void>> unfold(fabric& f, std::uint32_t seq, const folded& k, std::span<const std::byte> work);

}  // namespace optcast::algorithms
