#include "algorithms.hpp"
#include "blocks.hpp"
#include "traff/circulant.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// Träff, Algorithm 1: the round-optimal n-block broadcast on the circulant graph. Every
// rank runs the same loop; its plan (O(log p) to compute, no communication) says which
// block goes to whom and which comes from whom in each round.
task<result<void>> broadcast_circulant(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                       int root, int n, std::uint32_t step0) {
  const int p = f.size();
  if (p == 1) co_return result<void>{};
  const detail::rooted ranks{p, root};
  const int r = ranks.virt(f.rank());

  const circulant::skips s(p);
  circulant::broadcast_plan plan(s, r, n);
  const block_partition blocks(buf.size(), static_cast<std::size_t>(n));
  auto block = [&](int b) { return blocks.block(buf, static_cast<std::size_t>(b)); };

  for (int i = plan.first_round(); i < plan.end_round(); ++i) {
    const auto st = plan.round(i);
    const tag t{seq, step0 + static_cast<std::uint32_t>(i)};
    op_batch<2> round;  // Send(buf[sendblock[k]], t) || Recv(buf[recvblock[k]], f)
    if (st.send_block >= 0) round.add(f.send(ranks.real(st.to), t, block(st.send_block)));
    if (st.recv_block >= 0) round.add(f.recv(ranks.real(st.from), t, block(st.recv_block)));
    if (round.empty()) round.add(f.idle_round());
    if (auto res = co_await round; !res) co_return res;
  }
  co_return result<void>{};
}

}  // namespace optcast::algorithms
