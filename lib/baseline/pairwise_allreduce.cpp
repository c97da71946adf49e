// The pairwise-exchange allreduces: in every round a rank swaps with one partner, the
// rank 2^k places away, so a pair's traffic goes both ways on one connection (its
// acknowledgements ride on data). Both combine the lower group's partial on the left:
// groups of adjacent ranks meet in rank order, so the result is the rank-ordered one,
// and both of a pair (doubling) or the one rank that owns a part (halving) combine the
// same operands, so every rank ends with the same bits. For p not a power of two the
// pairs fold first (fold.hpp): two more rounds.
#include <array>

#include "round_loops.hpp"
#include "fold.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

namespace {

using erased = erased_reduction;

// `theirs` combined into `mine` in rank order: the lower group's partial on the left.
void combine(const erased& op, std::span<std::byte> mine, std::span<const std::byte> theirs, bool mine_lower) {
  const std::size_t n = mine.size() / op.elem;
  if (mine_lower) op(mine.data(), theirs.data(), mine.data(), n);
  else op(theirs.data(), mine.data(), mine.data(), n);
}

// Recursive doubling (the small-message allreduce of MPI libraries): in step k the whole
// partial result swapped with the rank 2^k away and combined: log2 p rounds.
task<result<void>> doubling(fabric& f, std::uint32_t seq, std::uint32_t step, std::span<std::byte> work, scratch_pool::lease held,
                            const erased& op, folded k) {
  const std::span<std::byte> in = held.span().first(work.size());
  for (int mask = 1; mask < k.pof2; mask <<= 1, ++step) {
    const int partner = k.real(k.v ^ mask);
    if (auto res = co_await exchange(f, partner, work, partner, in, {seq, step}); !res) co_return res;
    combine(op, work, in, (k.v & mask) == 0);
  }
  co_return result<void>{};
}

// Rabenseifner's (the medium-size allreduce of MPI libraries): a reduce-scatter by
// recursive halving, then an allgather by recursive doubling retracing its steps. The
// vector is cut into 2^m parts of whole elements; in step k (mask 2^k, ascending) a rank
// keeps the half of its range on its side of the mask and combines into it what its
// partner had there. The circulant pair's bytes and rounds with one block: 2 (p - 1) / p
// of the vector in 2 log2 p rounds.
task<result<void>> halving(fabric& f, std::uint32_t seq, std::uint32_t step, std::span<std::byte> work, scratch_pool::lease held,
                           const erased& op, folded k) {
  const std::span<std::byte> in = held.span().first(work.size());
  const std::size_t count = work.size() / op.elem;
  const auto parts = static_cast<std::size_t>(k.pof2);
  auto bytes = [&](int lo, int hi) {
    const std::size_t a = count * static_cast<std::size_t>(lo) / parts, b = count * static_cast<std::size_t>(hi) / parts;
    return work.subspan(a * op.elem, (b - a) * op.elem);
  };
  struct kept_half {
    int lo, hi, other_lo, other_hi;
  };
  std::array<kept_half, 31> kept{};  // one per step, log2 pof2 <= 30: no allocation per call
  std::size_t steps = 0;
  int lo = 0, hi = k.pof2;
  for (int mask = 1; mask < k.pof2; mask <<= 1, ++step) {
    const int partner = k.real(k.v ^ mask), mid = lo + (hi - lo) / 2;
    const bool lower = (k.v & mask) == 0;
    const kept_half h = lower ? kept_half{lo, mid, mid, hi} : kept_half{mid, hi, lo, mid};
    const auto mine = bytes(h.lo, h.hi);
    const auto theirs = in.first(mine.size());
    if (auto res = co_await exchange(f, partner, bytes(h.other_lo, h.other_hi), partner, theirs, {seq, step}); !res) co_return res;
    combine(op, mine, theirs, lower);
    kept[steps++] = h;
    lo = h.lo;
    hi = h.hi;
  }
  while (steps > 0) {
    const kept_half& h = kept[--steps];
    const int partner = k.real(k.v ^ (1 << steps));
    if (auto res = co_await exchange(f, partner, bytes(h.lo, h.hi), partner, bytes(h.other_lo, h.other_hi), {seq, step++}); !res)
      co_return res;
  }
  co_return result<void>{};
}

// The steps own the scratch their partner's data comes into (held in their frame).
using steps_fn = task<result<void>> (*)(fabric&, std::uint32_t, std::uint32_t, std::span<std::byte>, scratch_pool::lease,
                                        const erased&, folded);

task<result<void>> alone() { co_return result<void>{}; }

// The fold, the steps, the unfold.
task<result<void>> folded_pairwise(fabric& f, std::uint32_t seq, std::span<std::byte> work, const erased& op, steps_fn steps,
                                   scratch_pool::lease held) {
  std::uint32_t step = 0;
  const auto got = co_await fold(f, seq, step, work, work, held.span().first(work.size()), &op);
  if (!got) co_return fail(got.error());
  const folded k = *got;
  if (k.v < 0) co_return result<void>{};
  if (auto res = co_await steps(f, seq, step, work, std::move(held), op, k); !res) co_return res;
  co_return co_await unfold(f, seq, k, work);
}

// Where ranks pair off at once (p a power of two), the steps alone: no frame around them.
task<result<void>> pairwise(fabric& f, std::uint32_t seq, std::span<std::byte> work, const erased& op, steps_fn steps) {
  if (f.size() == 1) return alone();
  auto held = f.scratch().take(work.size());
  const folded k = fold_shape(f.size(), f.rank());
  if (k.rem == 0) return steps(f, seq, 0, work, std::move(held), op, k);
  return folded_pairwise(f, seq, work, op, steps, std::move(held));
}

}  // namespace

task<result<void>> allreduce_recursive_doubling(fabric& f, std::uint32_t seq, std::span<std::byte> work, const erased& op) {
  return pairwise(f, seq, work, op, doubling);
}

task<result<void>> allreduce_recursive_halving(fabric& f, std::uint32_t seq, std::span<std::byte> work, const erased& op) {
  return pairwise(f, seq, work, op, halving);
}

}  // namespace optcast::algorithms
