#include "optcast/logp.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <queue>
#include <stdexcept>
#include <tuple>

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

void check(const params& m) {
  if (!(m.L >= 0 && m.o >= 0 && m.g >= 0) || m.hop() <= 0 || m.gap() <= 0)
    throw std::invalid_argument("optcast::logp: need L, o, g >= 0 with L + 2o > 0 and max(g, o) > 0");
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
  static std::mutex mu;
  static std::map<std::tuple<int, double, double, double>, std::weak_ptr<const broadcast_tree>> cache;
  static std::shared_ptr<const broadcast_tree> recent;
  std::lock_guard lock(mu);
  auto& slot = cache[{P, m.L, m.o, m.g}];
  if (auto t = slot.lock()) return t;
  auto t = std::make_shared<const broadcast_tree>(P, m);
  slot = t;
  recent = t;
  return t;
}

std::string_view to_string(combining_plan::kind k) noexcept {
  switch (k) {
    case combining_plan::kind::fibonacci: return "fibonacci";
    case combining_plan::kind::chain: return "chain";
    case combining_plan::kind::fold: return "fold";
  }
  return "?";
}

int postal_steps(params m) {
  check(m);
  return std::max(1, static_cast<int>(std::ceil(m.hop() / m.gap() - 1e-9)));
}

namespace {

// The most operands a chain can hold at step T from the prefix w: always take the
// window arriving latest (w_k = w_{k-1} + w_{k-L}), saturating just above `P`.
std::int64_t most_by(const std::vector<std::int64_t>& w, int L, int T, std::int64_t P) {
  std::vector<std::int64_t> c(w);
  for (auto k = static_cast<int>(c.size()); k <= T; ++k)
    c.push_back(std::min(P + 1, c[static_cast<std::size_t>(k - 1)] + (k >= L ? c[static_cast<std::size_t>(k - L)] : 0)));
  return c[static_cast<std::size_t>(T)];
}

// Depth-first, larger windows first: a chain with w_T == P, T fixed.
struct chain_search {
  std::int64_t P;
  int L, T;
  std::int64_t budget;
  std::int64_t visited = 0;
  std::vector<std::int64_t> w{1};
  std::vector<int> from{-1};

  bool run() {
    const auto j = static_cast<int>(w.size());
    if (w.back() == P) return true;
    if (j > T || ++visited > budget) return false;
    if (most_by(w, L, T, P) < P) return false;
    std::int64_t last = -1;
    for (int t = j - L; t >= 0; --t) {
      const std::int64_t v = w[static_cast<std::size_t>(t)];
      if (v == last || w.back() + v > P) continue;
      last = v;
      w.push_back(w.back() + v);
      from.push_back(t);
      if (run()) return true;
      w.pop_back();
      from.pop_back();
      if (visited > budget) return false;
    }
    // No message this step (the only choice before step L).
    w.push_back(w.back());
    from.push_back(-1);
    if (run()) return true;
    w.pop_back();
    from.pop_back();
    return false;
  }
};

}  // namespace

combining_plan combining_schedule(int P, int L, std::int64_t budget) {
  if (P < 1 || L < 1) throw std::invalid_argument("optcast::logp::combining_schedule: need P >= 1 and L >= 1");
  combining_plan plan;
  plan.P = P;
  plan.L = L;
  plan.inner = P;
  if (P == 1) {
    plan.window = {1};
    plan.from = {-1};
    return plan;
  }
  // f_0 .. f_T' with f_T' <= P < f_T'+1.
  std::vector<std::int64_t> f{1};
  while (true) {
    const auto k = static_cast<int>(f.size());
    const std::int64_t next = f.back() + (k >= L ? f[static_cast<std::size_t>(k - L)] : 0);
    if (next > P) break;
    f.push_back(next);
  }
  const int Tp = static_cast<int>(f.size()) - 1;
  const auto fib = [&](int T) {
    plan.window.assign(f.begin(), f.begin() + T + 1);
    plan.from.assign(static_cast<std::size_t>(T) + 1, -1);
    for (int j = L; j <= T; ++j) plan.from[static_cast<std::size_t>(j)] = j - L;
  };
  if (f.back() == P) {
    plan.T = Tp;
    fib(Tp);
    return plan;
  }
  const int fold_T = Tp + 2 * L;
  for (int T = Tp + 1; T < fold_T; ++T) {
    chain_search s{P, L, T, budget};
    const bool found = s.run();
    plan.searched += s.visited;
    if (found) {
      plan.how = combining_plan::kind::chain;
      plan.T = static_cast<int>(s.w.size()) - 1;
      plan.window = std::move(s.w);
      plan.from = std::move(s.from);
      return plan;
    }
  }
  plan.how = combining_plan::kind::fold;
  plan.T = fold_T;
  plan.inner = static_cast<int>(f.back());
  plan.start = L;
  fib(Tp);
  return plan;
}

std::shared_ptr<const combining_plan> combining_for(int P, int L) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::shared_ptr<const combining_plan>> cache;
  std::lock_guard lock(mu);
  auto& slot = cache[{P, L}];
  if (!slot) slot = std::make_shared<const combining_plan>(combining_schedule(P, L));
  return slot;
}

}  // namespace optcast::logp
