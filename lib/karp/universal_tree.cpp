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

}  // namespace

broadcast_tree::broadcast_tree(int P, params m) {
  check(m);
  if (P < 1) throw std::invalid_argument("optcast::logp::broadcast_tree: need P >= 1");
  const auto n = static_cast<std::size_t>(P);
  label_.reserve(n);
  parent_.reserve(n);
  label_.push_back(0);
  parent_.push_back(-1);
  std::vector<std::vector<int>> kids(n);
  // Labels grow along every path and along every sibling list, so taking the smallest
  // candidate P - 1 times gives the P smallest labels of the infinite tree.
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> next;
  next.push({m.hop(), 0, 0});
  while (label_.size() < n) {
    const candidate c = next.top();
    next.pop();
    const int v = static_cast<int>(label_.size());
    label_.push_back(c.label);
    parent_.push_back(c.parent);
    kids[static_cast<std::size_t>(c.parent)].push_back(v);
    next.push({c.label + m.gap(), c.parent, c.index + 1});  // the parent's next child
    next.push({c.label + m.hop(), v, 0});                   // v's first child
  }
  first_.reserve(n + 1);
  child_.reserve(n - 1);
  for (const auto& k : kids) {
    first_.push_back(child_.size());
    child_.insert(child_.end(), k.begin(), k.end());
  }
  first_.push_back(child_.size());
}

double B(int P, params m) { return broadcast_tree(P, m).finish(); }

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
