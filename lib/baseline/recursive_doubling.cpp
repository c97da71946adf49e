#include "algorithms.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// Allreduce by recursive doubling (the small-message allreduce of MPI libraries): in step
// k every rank swaps its whole partial result with the rank 2^k away and combines, the
// lower half's partial on the left, so both of a pair compute the same value from the
// same operands and every rank ends with the same bits, in rank order. For p not a power
// of two, the first 2 (p - 2^m) ranks fold in pairs first (the odd one hands its operand
// to the even one and gets the result at the end): m rounds, m + 2 then. The ranks that
// do not fold idle the first round, so that no rank receives twice in one round.
task<result<void>> allreduce_recursive_doubling(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                                const detail::erased_reduction& op) {
  const int p = f.size(), r = f.rank();
  if (p == 1) co_return result<void>{};
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  const int rem = p - pof2;
  const std::size_t count = work.size() / op.elem;
  const auto in_lease = f.scratch().take(work.size());
  const std::span<std::byte> in = in_lease.span().first(work.size());
  std::uint32_t step = 0;
  auto combine = [&](bool mine_first) {
    if (mine_first) op(work.data(), in.data(), work.data(), count);
    else op(in.data(), work.data(), work.data(), count);
  };

  int v = r - rem;  // this rank's place among the 2^m that double
  if (rem > 0) {
    if (r < 2 * rem) {
      if (r % 2 == 1) {  // folds into r - 1, which sends the result back after the last step
        if (auto res = co_await f.send(r - 1, {seq, step}, work); !res) co_return fail(res.error());
        if (auto res = co_await f.recv(r - 1, {seq, 0x7fffffffu}, work); !res) co_return fail(res.error());
        co_return result<void>{};
      }
      if (auto res = co_await f.recv(r + 1, {seq, step}, in); !res) co_return fail(res.error());
      combine(true);
      v = r / 2;
    } else if (auto res = co_await f.idle_round(); !res) {
      co_return fail(res.error());
    }
    ++step;
  }
  auto real = [&](int u) { return u < rem ? 2 * u : u + rem; };
  for (int mask = 1; mask < pof2; mask <<= 1, ++step) {
    const int partner = real(v ^ mask);
    if (auto res = co_await exchange(f, partner, work, partner, in, {seq, step}); !res) co_return res;
    combine((v & mask) == 0);
  }
  if (r < 2 * rem)
    if (auto res = co_await f.send(r + 1, {seq, 0x7fffffffu}, work); !res) co_return fail(res.error());
  co_return result<void>{};
}

}  // namespace optcast::algorithms
