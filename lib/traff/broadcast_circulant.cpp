#include "round_loops.hpp"
#include "blocks.hpp"
#include "traff/circulant.hpp"
#include "optcast/when_all.hpp"
#include <memory>
#include <vector>

namespace optcast::algorithms {

// Träff, Algorithm 1: the round-optimal n-block broadcast on the circulant graph. Every
// rank runs the same loop; its plan (O(log p) to compute, no communication) says which
// block goes to whom and which comes from whom in each round.
//
// The rounds are kept for the sends only: round i's send goes out when round i - 1's
// send has completed and its block has arrived, not when round i - 1's receive has. Every
// receive is posted before the first send, straight into its block (no block arrives
// twice, so none is overwritten while it is forwarded). In the rounds model this is the
// same schedule (a block sent in round i arrived in an earlier round, and an idle round
// still takes one round); on a real network a rank does not wait for a message it only
// forwards later, so one late link delays what depends on it, not the whole next round.
//
// That holds when every rank starts the broadcast at once. Where the ranks come to it at
// different times (after a phase that ends unevenly), a rank's rounds must follow its
// upstream's: `lockstep` makes round i also wait for round i - 1's receive, the paper's
// rounds exactly (receives still posted ahead).
namespace {

using step = circulant::broadcast_plan::step;

task<result<void>> circulant_rounds(fabric& f, std::span<const step> steps, std::span<posted_op> rx, std::span<const int> arrives,
                                    const detail::rooted& ranks, const block_partition& blocks, std::span<std::byte> buf,
                                    tag t0, bool lockstep) {
  auto block = [&](int b) { return blocks.block(buf, static_cast<std::size_t>(b)); };
  auto tag_of = [&](std::size_t k) { return tag{t0.seq, t0.step + static_cast<std::uint32_t>(k)}; };
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const auto& st = steps[k];
    if (st.recv_block >= 0) rx[k].start(f.recv(ranks.real(st.from), tag_of(k), block(st.recv_block)));
  }
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const auto& st = steps[k];
    if (lockstep && k > 0)
      if (auto res = co_await rx[k - 1].finished(); !res) co_return fail(res.error());
    if (st.send_block < 0) {
      if (auto res = co_await f.idle_round(); !res) co_return fail(res.error());
      continue;
    }
    if (const int a = arrives[static_cast<std::size_t>(st.send_block)]; a >= 0)
      if (auto res = co_await rx[static_cast<std::size_t>(a)].finished(); !res) co_return fail(res.error());
    if (auto res = co_await f.send(ranks.real(st.to), tag_of(k), block(st.send_block)); !res) co_return fail(res.error());
  }
  for (std::size_t k = 0; k < steps.size(); ++k)
    if (auto res = co_await rx[k].finished(); !res) co_return fail(res.error());
  co_return result<void>{};
}

}  // namespace

task<result<void>> broadcast_circulant(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                       int root, int n, std::uint32_t step0, bool lockstep) {
  const int p = f.size();
  if (p == 1) co_return result<void>{};
  const detail::rooted ranks{p, root};
  const int r = ranks.virt(f.rank());

  const circulant::skips s(p);
  circulant::broadcast_plan plan(s, r, n);
  const block_partition blocks(buf.size(), static_cast<std::size_t>(n));

  const int first = plan.first_round();
  const auto rounds = static_cast<std::size_t>(plan.end_round() - first);
  std::vector<step> steps(rounds);
  std::vector<int> arrives(static_cast<std::size_t>(n), -1);  // the round whose receive brings block b
  for (std::size_t k = 0; k < rounds; ++k) {
    steps[k] = plan.round(first + static_cast<int>(k));
    if (steps[k].recv_block >= 0) arrives[static_cast<std::size_t>(steps[k].recv_block)] = static_cast<int>(k);
  }
  const auto rx = std::make_unique<posted_op[]>(rounds);
  const std::span<posted_op> posted(rx.get(), rounds);
  auto res = co_await circulant_rounds(f, steps, posted, arrives, ranks, blocks, buf,
                                       tag{seq, step0 + static_cast<std::uint32_t>(first)}, lockstep);
  co_await settle(posted);
  co_return res;
}

}  // namespace optcast::algorithms
