#include "algorithms.hpp"

namespace optcast::algorithms {

// Each rank (renumbered so the root is node 0 of B(P)) receives the item from its parent
// and then sends it to its children in order; under LogP the sends leave max(g, o)
// apart, so child i has it at label + i gap + L + 2o, its label in B(P). The tree is
// built once per process and parameters (O(P log P)) and shared.
task<result<void>> broadcast_logp_tree(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                       logp::params m) {
  const int p = f.size();
  if (p == 1) co_return result<void>{};
  const detail::rooted ranks{p, root};
  const int v = ranks.virt(f.rank());
  const auto tree = logp::tree_for(p, m);
  if (v != 0)
    if (auto r = co_await f.recv(ranks.real(tree->parent(v)), {seq, 0}, buf); !r) co_return fail(r.error());
  for (int c : tree->children(v))
    if (auto r = co_await f.send(ranks.real(c), {seq, 0}, buf); !r) co_return fail(r.error());
  co_return result<void>{};
}

}  // namespace optcast::algorithms
