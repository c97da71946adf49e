#include <vector>

#include "round_loops.hpp"
#include "fold.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// The dissemination barrier (Hensgen, Finkel and Manber 1988), on k ports: in round i,
// with d = (k+1)^i, rank r sends an empty message to r + j d and receives one from
// r - j d (mod p) for j = 1..k (those with j d < p). After round i a rank has heard,
// directly or through the ranks it heard from, from the (k+1)^(i+1) - 1 ranks before it:
// ceil(log_{k+1} p) rounds, which no barrier beats (a rank hears from at most k ranks a
// round, and what it learns can grow at most (k+1)-fold). No rank leaves before every
// rank has entered.
task<result<void>> barrier_dissemination(fabric& f, std::uint32_t seq) {
  const int p = f.size(), r = f.rank(), k = f.ports();
  std::vector<operation> ops;
  ops.reserve(2 * static_cast<std::size_t>(k));
  std::uint32_t step = 0;
  for (long long d = 1; d < p; d *= k + 1, ++step) {
    ops.clear();
    for (int j = 1; j <= k && j * d < p; ++j) {
      const int off = static_cast<int>(j * d);
      ops.push_back(f.send((r + off) % p, {seq, step}, {}));
      ops.push_back(f.recv((r - off % p + p) % p, {seq, step}, {}));
    }
    if (auto res = co_await when_all(std::span(ops)); !res) co_return res;
  }
  co_return result<void>{};
}

// The recursive-doubling barrier (pairwise exchange, what Open MPI runs for a power of
// two): in round i rank r swaps an empty message with r XOR 2^i, so each rank hears in
// every round from the rank it signals. log2 p rounds for p a power of two, as many as
// dissemination on one port; otherwise the first 2 (p - 2^m) ranks fold in pairs (the odd
// one signals the even one and waits for its release at the end) and the others idle
// that round: m + 2 rounds. On emulated hosts it beat the dissemination pattern where
// both take the same rounds (8 hosts, Open MPI: 706 against 965 us; the registry row).
task<result<void>> barrier_recursive_doubling(fabric& f, std::uint32_t seq) {
  if (f.size() == 1) co_return result<void>{};
  std::uint32_t step = 0;
  folded k = fold_shape(f.size(), f.rank());
  if (k.rem > 0) {
    const auto got = co_await fold(f, seq, step, {}, {}, {}, nullptr);
    if (!got) co_return fail(got.error());
    k = *got;
  }
  if (k.v < 0) co_return result<void>{};
  for (int mask = 1; mask < k.pof2; mask <<= 1, ++step) {
    const int partner = k.real(k.v ^ mask);
    if (auto res = co_await exchange(f, partner, std::span<const std::byte>(), partner, std::span<std::byte>(), {seq, step}); !res)
      co_return res;
  }
  if (k.rem > 0) co_return co_await unfold(f, seq, k, {});
  co_return result<void>{};
}

// The rounds it takes: ceil(log_{k+1} p).
int dissemination_rounds(int p, int k) {
  int rounds = 0;
  for (long long d = 1; d < p; d *= k + 1) ++rounds;
  return rounds;
}

}  // namespace optcast::algorithms
