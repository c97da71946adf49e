// Karp, Sahay, Santos and Schauser, "Optimal Broadcast and Summation in the LogP Model"
// (SPAA 1993), Section 2: the universal optimal broadcast tree.
//
// Pure computation, no I/O. A node that has the item at time t sends it to its children
// at t, t + gap, t + 2 gap, ...; child i has it at t + i gap + L + 2o (Definition 2.3).
// Definition 2.3 spaces siblings by g, which assumes g >= o (ERRATA.md): a sender is
// busy o per message, so here gap = max(g, o), which is what the LogP model allows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace optcast::logp {

struct params {
  double L = 1, o = 0, g = 1;
  double gap() const noexcept { return g > o ? g : o; }
  double hop() const noexcept { return L + 2 * o; }
};

// B(P): the P nodes of the universal tree with the smallest labels (Definition 2.4),
// ties broken by (label, parent, child index), numbered 0..P-1 in that order (0 is the
// root). Optimal for single-item broadcast (Theorem 2.1). O(P log P) to build.
class broadcast_tree {
public:
  broadcast_tree(int P, params m);

  int size() const noexcept { return static_cast<int>(label_.size()); }
  // When node v has the item (its delay).
  double label(int v) const noexcept { return label_[static_cast<std::size_t>(v)]; }
  int parent(int v) const noexcept { return parent_[static_cast<std::size_t>(v)]; }
  // v's children in the order v sends to them.
  std::span<const int> children(int v) const noexcept {
    return {child_.data() + first_[static_cast<std::size_t>(v)],
            first_[static_cast<std::size_t>(v) + 1] - first_[static_cast<std::size_t>(v)]};
  }
  double finish() const noexcept { return label_.empty() ? 0 : label_.back(); }

private:
  std::vector<double> label_;
  std::vector<int> parent_;
  std::vector<int> child_;            // children of every node, grouped by parent
  std::vector<std::size_t> first_;    // node v's children are child_[first_[v] .. first_[v+1])
};

// B(P; L, o, g) (Definition 2.1): the time of an optimal single-item broadcast.
double B(int P, params m);

// P(t; L, o, g) (Definition 2.2): how many processors a broadcast reaches by time t, up
// to `cap` (the count grows exponentially in t).
std::int64_t P_of(double t, params m, std::int64_t cap = std::int64_t{1} << 24);

// The tree for (P, m), built once per process while a caller holds it.
std::shared_ptr<const broadcast_tree> tree_for(int P, params m);

}  // namespace optcast::logp
