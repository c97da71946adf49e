// Allgather by recursive doubling (Open MPI's for small blocks on a power of two): in step
// k every rank swaps everything it holds with the rank 2^k away, so a pair's traffic goes
// both ways on one connection; log2 p rounds, the circulant allgather's bytes and rounds
// with one block. What a rank holds after k steps is its group of 2^k adjacent places,
// and a group of places is a range of ranks (a folded pair's two included), so each
// exchange is one message of consecutive segments.
#include <algorithm>

#include "round_loops.hpp"
#include "fold.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

task<result<void>> allgather_recursive_doubling(fabric& f, std::uint32_t seq, std::span<std::byte> out, const segment_layout& lay,
                                                std::span<const std::byte> own) {
  const int p = f.size(), r = f.rank();
  if (p == 1) co_return result<void>{};
  // Segments a .. b - 1, one after another as every allgather's layout has them.
  auto segments = [&](int a, int b) {
    const auto at = [&](int j) { return lay.offset[static_cast<std::size_t>(j)] * lay.elem; };
    return out.subspan(at(a), at(b) - at(a));
  };
  std::uint32_t step = 0;
  folded k = fold_shape(p, r);
  if (k.rem > 0) {
    const auto got = co_await fold(f, seq, step, segments(r, r + 1), out, segments(std::min(r + 1, p - 1), std::min(r + 2, p)), nullptr);
    if (!got) co_return fail(got.error());
    k = *got;
  }
  if (k.v < 0) co_return result<void>{};
  // The ranks of places [u, w): from real(u), a folded pair's place holding both of its ranks' segments.
  const auto end = [&](int w) { return w <= k.rem ? 2 * w : w + k.rem; };
  for (int mask = 1; mask < k.pof2; mask <<= 1, ++step) {
    const int mine = k.v & ~(mask - 1), theirs = mine ^ mask;
    const int partner = k.real(k.v ^ mask);
    // The first step of an unfolded rank sends its own segment alone.
    const auto held = segments(k.real(mine), end(mine + mask));
    const auto sent = mask == 1 && k.rem == 0 ? lay.own_source(out, r, held, own) : held;
    if (auto res = co_await exchange(f, partner, sent, partner,
                                     segments(k.real(theirs), end(theirs + mask)), {seq, step});
        !res)
      co_return res;
  }
  if (k.rem > 0) co_return co_await unfold(f, seq, k, out);
  co_return result<void>{};
}

}  // namespace optcast::algorithms
