#include <cstring>
#include <memory>
#include <vector>

#include "round_loops.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// Karp et al., Section 5 (logp.hpp, summation_plan): node v sums its first chain,
// then combines each child's partial sum as it arrives, each followed by a chain of its
// own operands, and sends the result to its parent at S_v. The simulator is charged
// the plan's times (one unit per application); real fabrics just do the work.
task<result<void>> summation_tree(fabric& f, std::uint32_t seq, const logp::summation_plan& plan, int root,
                                  std::span<std::byte> acc, const erased_reduction& op,
                                  const operand_loader& load) {
  const int P = f.size();
  const detail::rooted ranks{P, root};
  const int v = ranks.virt(f.rank());
  if (v >= static_cast<int>(plan.nodes.size())) co_return result<void>{};  // not worth a message
  const auto& nd = plan.nodes[static_cast<std::size_t>(v)];
  const std::size_t elem = acc.size();
  const std::size_t k = nd.children.size();

  // All receptions posted at once: their senders never wait on this rank otherwise.
  std::vector<std::byte> got(k * elem), x(elem);
  const auto pending = std::make_unique<posted_op[]>(k);
  const std::span<posted_op> all(pending.get(), k);
  for (std::size_t m = 0; m < k; ++m) {
    const int c = nd.children[m];
    pending[m].start(f.recv(ranks.real(c), {seq, static_cast<std::uint32_t>(c)}, std::span(got).subspan(m * elem, elem)));
  }
  bool have = false;
  const auto fold = [&](const std::byte* in) {
    if (have) {
      op(acc.data(), in, acc.data(), 1);  // everything so far, then what comes next
    } else {
      std::memcpy(acc.data(), in, elem);
      have = true;
    }
  };
  const auto chain = [&](const logp::summation_plan::segment& s) {
    for (std::int64_t i = s.first; i < s.first + s.count; ++i) {
      load(i, x.data());
      fold(x.data());
    }
  };
  chain(nd.local[0]);
  if (auto r = co_await f.compute(nd.work[0]); !r) co_return co_await settled(all, r.error());
  for (std::size_t m = 0; m < k; ++m) {
    if (auto r = co_await pending[m].finished(); !r) co_return co_await settled(all, r.error());
    if (auto r = co_await f.compute(1); !r) co_return co_await settled(all, r.error());
    fold(got.data() + m * elem);
    chain(nd.local[m + 1]);
    if (auto r = co_await f.compute(nd.work[m + 1]); !r) co_return co_await settled(all, r.error());
  }
  if (v == 0) co_return result<void>{};
  auto r = co_await f.send(ranks.real(nd.parent), {seq, static_cast<std::uint32_t>(v)}, acc);
  if (!r) co_return co_await settled(all, r.error());
  co_return result<void>{};
}

}  // namespace optcast::algorithms
