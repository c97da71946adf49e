#include <vector>

#include "round_loops.hpp"
#include "traff/circulant.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// Träff, Observation 1.3: the broadcast's rounds from last to first with every message
// reversed. In the broadcast a rank receives each block exactly once (Theorem 1: the
// only index past n - 1 it receives is b + n - 1, capped to n - 1) and forwards it only
// in later rounds; backwards, it has reduced the partial results of everyone it
// forwarded a block to before it sends that block's partial on, exactly once.
task<result<void>> reduce_circulant(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                    int root, int n, const erased_reduction& op) {
  const int p = f.size();
  if (p == 1) co_return result<void>{};
  const detail::rooted ranks{p, root};
  const int v = ranks.virt(f.rank());

  const circulant::skips s(p);
  const circulant::broadcast_plan plan(s, v, n);
  const block_partition parts(work.size() / op.elem, static_cast<std::size_t>(n));
  auto block = [&](int b) {
    return work.subspan(parts.offset(static_cast<std::size_t>(b)) * op.elem,
                        parts.size(static_cast<std::size_t>(b)) * op.elem);
  };
  const auto incoming_lease = f.scratch().take(parts.size(0) * op.elem);
  const std::span<std::byte> incoming = incoming_lease.span();

  for (int i = plan.end_round() - 1; i >= plan.first_round(); --i) {
    const auto st = plan.at(i);
    const tag t{seq, static_cast<std::uint32_t>(i)};
    op_batch<2> round;
    std::span<std::byte> in;
    if (st.send_block >= 0) {
      in = incoming.first(block(st.send_block).size());
      round.add(f.recv(ranks.real(st.to), t, in));
    }
    if (st.recv_block >= 0) round.add(f.send(ranks.real(st.from), t, block(st.recv_block)));
    if (round.empty()) round.add(f.idle_round());
    if (auto res = co_await round; !res) co_return res;
    if (st.send_block >= 0) {
      auto mine = block(st.send_block);
      op(in.data(), mine.data(), mine.data(), mine.size() / op.elem);
    }
  }
  co_return result<void>{};
}

}  // namespace optcast::algorithms
