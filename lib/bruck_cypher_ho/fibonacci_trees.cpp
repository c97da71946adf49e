#include "bruck_cypher_ho/fibonacci.hpp"

#include <algorithm>
#include <queue>
#include <stdexcept>
#include <string>
#include <tuple>

namespace optcast::fibonacci {

namespace {

void check_d(int d) {
  if (d < 2) throw std::invalid_argument("optcast::fibonacci: need d >= 2, got " + std::to_string(d));
}

constexpr std::int64_t max_nodes = std::int64_t{1} << 24;

}  // namespace

std::int64_t F(int d, int t, std::int64_t cap) {
  check_d(d);
  if (t < 0) throw std::invalid_argument("optcast::fibonacci::F: need t >= 0");
  std::vector<std::int64_t> v(static_cast<std::size_t>(t) + 1);
  for (int s = 0; s <= t; ++s) {
    if (s < d) {
      v[static_cast<std::size_t>(s)] = std::min<std::int64_t>(1, cap);
      continue;
    }
    std::int64_t sum = 1;
    for (int i = 1; i <= d && sum < cap; ++i) sum = std::min(cap, sum + v[static_cast<std::size_t>(s - i)]);
    v[static_cast<std::size_t>(s)] = sum;
  }
  return v.back();
}

int f(int d, std::int64_t n) {
  check_d(d);
  if (n < 1) throw std::invalid_argument("optcast::fibonacci::f: need n >= 1");
  // F_d grows at least like 1.5^(t - d) (Theorem 3.7), so this ends quickly.
  std::vector<std::int64_t> v;
  for (int t = 0;; ++t) {
    std::int64_t x = 1;
    if (t >= d)
      for (int i = 1; i <= d && x < n; ++i) x = std::min(n, x + v[static_cast<std::size_t>(t - i)]);
    v.push_back(x);
    if (x >= n) return t;
  }
}

tree::tree(int d, int t, std::int64_t x) : d_(d), t_(t) {
  check_d(d);
  if (t < 0) throw std::invalid_argument("optcast::fibonacci::tree: need t >= 0");
  build(x, F(d, t, max_nodes + 1));
}

tree::tree(int d, int t, std::int64_t x, std::int64_t s) : d_(d), t_(t) {
  check_d(d);
  if (t < 0) throw std::invalid_argument("optcast::fibonacci::tree: need t >= 0");
  const auto full = F(d, t, max_nodes + 1);
  if (s < 1 || s > full || (s - 1) % d != 0)
    throw std::invalid_argument("optcast::fibonacci::tree: the treetop size must be 1 mod d and at most F_d(t) = " +
                                std::to_string(full) + ", got " + std::to_string(s));
  build(x, s);
}

void tree::build(std::int64_t x, std::int64_t keep) {
  const auto full = F(d_, t_, max_nodes + 1);
  if (full > max_nodes) throw std::invalid_argument("optcast::fibonacci::tree: FT_d(t) has more than 2^24 nodes");
  // FT_d(t) in breadth-first order: a node of order o >= d has children of orders
  // o - 1, ..., o - d, labelled one more each.
  // Sized once: FT_d(t) has `full` nodes, and growing by doubling copied and faulted
  // in each array again (a tenth of a 10^5-rank simulation's set-up).
  detail::huge_vector<int> order, parent, first;
  detail::huge_vector<std::int64_t> label;
  for (auto* v : {&order, &parent, &first}) v->reserve(static_cast<std::size_t>(full));
  label.reserve(static_cast<std::size_t>(full));
  order.push_back(t_);
  label.push_back(x);
  parent.push_back(-1);
  first.push_back(-1);
  for (std::size_t v = 0; v < order.size(); ++v) {
    if (order[v] < d_) continue;
    first[v] = static_cast<int>(order.size());
    for (int i = 1; i <= d_; ++i) {
      order.push_back(order[v] - i);
      label.push_back(label[v] + i);
      parent.push_back(static_cast<int>(v));
      first.push_back(-1);
    }
  }
  // Remove leaf sibling sets, the largest labels first, until `keep` nodes remain.
  detail::huge_vector<char> gone(order.size()), internal(order.size());
  for (std::size_t v = 0; v < order.size(); ++v) internal[v] = first[v] >= 0;
  const auto all_leaves = [&](int v) {
    for (int i = 0; i < d_; ++i)
      if (internal[static_cast<std::size_t>(first[static_cast<std::size_t>(v)] + i)]) return false;
    return true;
  };
  std::priority_queue<std::pair<std::int64_t, int>> ready;  // (largest child label, node)
  for (std::size_t v = 0; v < order.size(); ++v)
    if (internal[v] && all_leaves(static_cast<int>(v))) ready.emplace(label[v] + d_, static_cast<int>(v));
  auto size = static_cast<std::int64_t>(order.size());
  while (size > keep) {
    const int v = ready.top().second;
    ready.pop();
    for (int i = 0; i < d_; ++i) gone[static_cast<std::size_t>(first[static_cast<std::size_t>(v)] + i)] = 1;
    internal[static_cast<std::size_t>(v)] = 0;
    size -= d_;
    if (const int u = parent[static_cast<std::size_t>(v)]; u >= 0 && all_leaves(u)) ready.emplace(label[static_cast<std::size_t>(u)] + d_, u);
  }
  // Renumber what is left, breadth-first (the old order restricted to it).
  detail::huge_vector<int> id(order.size(), -1);
  label_.reserve(static_cast<std::size_t>(size));
  parent_.reserve(static_cast<std::size_t>(size));
  for (std::size_t v = 0; v < order.size(); ++v)
    if (!gone[v]) {
      id[v] = static_cast<int>(label_.size());
      label_.push_back(label[v]);
      parent_.push_back(parent[v] < 0 ? -1 : id[static_cast<std::size_t>(parent[v])]);
    }
  ids_.resize(label_.size());
  for (std::size_t v = 0; v < ids_.size(); ++v) ids_[v] = static_cast<int>(v);
  first_.assign(label_.size(), -1);
  for (std::size_t v = 0; v < order.size(); ++v)
    if (!gone[v] && internal[v]) first_[static_cast<std::size_t>(id[v])] = id[static_cast<std::size_t>(first[v])];
}

std::span<const int> tree::children(int v) const noexcept {
  const int c = first_[static_cast<std::size_t>(v)];
  if (c < 0) return {};
  // Breadth-first numbering keeps siblings consecutive: they are ids c .. c + d - 1.
  return {ids_.data() + c, static_cast<std::size_t>(d_)};
}

std::int64_t tree::max_label() const noexcept { return label_.empty() ? 0 : *std::max_element(label_.begin(), label_.end()); }

}  // namespace optcast::fibonacci
