// Karp et al. Section 2: the universal optimal broadcast tree B(P; L, o, g), P(t), and
// the postal steps of a LogP model.
#include "karp/plans.hpp"
#include "runtime/plan_cache.hpp"

#include "logp_check.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace optcast::logp {

namespace {

// A child the tree could grow next: the i-th child of `parent`, with its label.
struct candidate {
  double label;
  int parent;
  int index;
  bool operator>(const candidate& o) const noexcept {
    return std::tie(label, parent, index) > std::tie(o.label, o.parent, o.index);
  }
};

// The P smallest labels of the infinite tree, by taking the least candidate P - 1 times.
// A node's first child and a child's next sibling are each made in the order the nodes
// are taken, and both add a constant to the label, so each kind of candidate is made in
// increasing order: two queues merged give the heap's order without its log P a step
// (a tenth of a 10^5-rank simulation's set-up). Should rounding ever make a sibling
// queue's new candidate compare below its last (labels nearer than an ulp of their sum),
// the heap decides, so the tree never depends on which way it was built.
bool grow_by_queues(std::size_t n, params m, detail::huge_vector<double>& label, detail::huge_vector<int>& parent) {
  detail::huge_vector<candidate> first, sibling;  // each in increasing order; read from *_at
  first.reserve(n);
  sibling.reserve(n);
  std::size_t first_at = 0, sibling_at = 0;
  first.push_back({m.hop(), 0, 0});
  while (label.size() < n) {
    const bool from_first = sibling_at == sibling.size() || (first_at < first.size() && !(first[first_at] > sibling[sibling_at]));
    const candidate c = from_first ? first[first_at++] : sibling[sibling_at++];
    const int v = static_cast<int>(label.size());
    label.push_back(c.label);
    parent.push_back(c.parent);
    const candidate next_sibling{c.label + m.gap(), c.parent, c.index + 1};
    if (sibling.size() > sibling_at && sibling.back() > next_sibling) return false;
    sibling.push_back(next_sibling);
    first.push_back({c.label + m.hop(), v, 0});
  }
  return true;
}

void grow_by_heap(std::size_t n, params m, detail::huge_vector<double>& label, detail::huge_vector<int>& parent) {
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> next;
  next.push({m.hop(), 0, 0});
  while (label.size() < n) {
    const candidate c = next.top();
    next.pop();
    const int v = static_cast<int>(label.size());
    label.push_back(c.label);
    parent.push_back(c.parent);
    next.push({c.label + m.gap(), c.parent, c.index + 1});  // the parent's next child
    next.push({c.label + m.hop(), v, 0});                   // v's first child
  }
}

}  // namespace

broadcast_tree::broadcast_tree(int P, params m) {
  check(m);
  if (P < 1) throw std::invalid_argument("optcast::logp::broadcast_tree: need P >= 1");
  const auto n = static_cast<std::size_t>(P);
  label_.reserve(n);
  parent_.reserve(n);
  label_.push_back(0);
  parent_.push_back(-1);
  // Labels grow along every path and along every sibling list, so taking the smallest
  // candidate P - 1 times gives the P smallest labels of the infinite tree.
  if (!grow_by_queues(n, m, label_, parent_)) {
    label_.resize(1);
    parent_.resize(1);
    grow_by_heap(n, m, label_, parent_);
  }
  // Children lists (CSR): a parent's children were made in label order, which is also
  // the order of their numbers, so counting then placing by v keeps each list in order
  // (no list per node: a tree may have a million).
  first_.assign(n + 1, 0);
  for (std::size_t v = 1; v < n; ++v) ++first_[static_cast<std::size_t>(parent_[v]) + 1];
  for (std::size_t v = 0; v < n; ++v) first_[v + 1] += first_[v];
  child_.resize(n - 1);
  detail::huge_vector<std::size_t> at(first_.begin(), first_.end() - 1);
  for (std::size_t v = 1; v < n; ++v) child_[at[static_cast<std::size_t>(parent_[v])]++] = static_cast<int>(v);
}

// The tree the algorithm runs is the one whose finish this is: built once, shared.
double B(int P, params m) { return tree_for(P, m)->finish(); }

std::int64_t P_of(double t, params m, std::int64_t cap) {
  check(m);
  if (t < 0) return 0;
  // N(t) = 1 + sum over i >= 0 of N(t - hop - i gap): the root, and the subtrees of its
  // children. The arguments are t - a hop - b gap, polynomially many; memoised, and
  // saturated at cap (the count itself grows exponentially).
  std::map<double, std::int64_t> memo;
  auto count = [&](auto& self, double u) -> std::int64_t {
    if (u < 0) return 0;
    if (auto it = memo.find(u); it != memo.end()) return it->second;
    std::int64_t n = 1;
    for (double c = u - m.hop(); c >= 0 && n < cap; c -= m.gap()) n = std::min(cap, n + self(self, c));
    memo.emplace(u, n);
    return n;
  };
  return count(count, t);
}

std::shared_ptr<const broadcast_tree> tree_for(int P, params m) {
  static detail::plan_cache<std::tuple<int, double, double, double>, broadcast_tree> cache;
  return cache.get({P, m.L, m.o, m.g}, [&] { return broadcast_tree(P, m); });
}

int postal_steps(params m) {
  check(m);
  return std::max(1, static_cast<int>(std::ceil(m.hop() / m.gap() - 1e-9)));
}

}  // namespace optcast::logp
