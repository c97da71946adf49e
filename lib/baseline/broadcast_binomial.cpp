#include "round_loops.hpp"

namespace optcast::algorithms {

// The classic binomial tree: in round j every rank that has the data sends it to the
// rank 2^j further on (virtual ranks, root renumbered to 0). Rank v receives from v
// minus its lowest set bit, then sends to v + 2^j for the lower bits it does not have.
task<result<void>> broadcast_binomial(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                      int root) {
  const int p = f.size();
  const detail::rooted ranks{p, root};
  const int v = ranks.virt(f.rank());

  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      if (auto res = co_await f.recv(ranks.real(v - mask), {seq, 0}, buf); !res)
        co_return fail(res.error());
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p)
      if (auto res = co_await f.send(ranks.real(v + mask), {seq, 0}, buf); !res)
        co_return fail(res.error());
  co_return result<void>{};
}

}  // namespace optcast::algorithms
