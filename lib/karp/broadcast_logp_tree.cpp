#include "round_loops.hpp"

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
  // One co_await for the receive and the sends: GCC gives each co_await expression's
  // operation (about 200 B) a slot of its own in the frame, which every rank of a
  // simulated world keeps while it waits.
  const auto children = tree->children(v);
  for (int i = v != 0 ? -1 : 0; i < static_cast<int>(children.size()); ++i) {
    const bool from_parent = i < 0;
    const int peer = ranks.real(from_parent ? tree->parent(v) : children[static_cast<std::size_t>(i)]);
    if (auto r = co_await operation(f, from_parent ? op_kind::recv : op_kind::send, peer, {seq, 0}, buf.data(), buf.size()); !r)
      co_return fail(r.error());
  }
  co_return result<void>{};
}

}  // namespace optcast::algorithms
