// Karp et al. Section 5: optimal summation of n operands, the reversed broadcast tree.
#include "karp/plans.hpp"

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

params summation_params(params m) {
  check(m);
  const double L = std::ceil(m.L), o = std::ceil(m.o), g = std::ceil(m.g);
  return {L, o, std::max(g, o + 1)};
}

// Operands the first `used` nodes of tree `tr` sum by time t (Lemma 5.1's count).
std::int64_t capacity_of(const broadcast_tree& tr, int used, double t, double o) {
  std::int64_t n = 0;
  for (int v = 0; v < used; ++v) {
    int k = 0;
    for (int c : tr.children(v)) k += c < used;
    n += static_cast<std::int64_t>(t - tr.label(v)) - k * static_cast<std::int64_t>(o + 1) + 1;
  }
  return n;
}

// The nodes worth using by time t: labels below t - o.
int useful(const broadcast_tree& tr, double t, double o) {
  int used = 0;
  while (used < tr.size() && tr.label(used) < t - o) ++used;
  return std::max(used, 1);
}

}  // namespace

std::int64_t summation_capacity(double t, int P, params m) {
  if (P < 1 || t < 0) return 0;
  const params q = summation_params(m);
  const params tree_m{q.L + 1, q.o, q.g};
  const auto tr = tree_for(P, tree_m);
  t = std::floor(t);
  return capacity_of(*tr, useful(*tr, t, q.o), t, q.o);
}

summation_plan summation_schedule(std::int64_t n, int P, params m) {
  if (n < 1 || P < 1) throw std::invalid_argument("optcast::logp::summation_schedule: need n >= 1 operands and P >= 1");
  summation_plan plan;
  plan.n = n;
  plan.P = P;
  plan.m = summation_params(m);
  const double o = plan.m.o, g = plan.m.g;
  const auto tr = tree_for(P, {plan.m.L + 1, o, g});
  // The least t with N(t) >= n; N(t) >= t + 1 (the root alone), so t <= n - 1.
  std::int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    const auto t = static_cast<double>(mid);
    if (capacity_of(*tr, useful(*tr, t, o), t, o) >= n)
      hi = mid;
    else
      lo = mid + 1;
  }
  const auto t = static_cast<double>(lo);
  const int used = useful(*tr, t, o);
  plan.t = t;
  plan.capacity = capacity_of(*tr, used, t, o);
  plan.nodes.resize(static_cast<std::size_t>(used));
  const auto step = static_cast<std::int64_t>(g - o - 1);  // local operands between receptions
  for (int v = 0; v < used; ++v) {
    auto& nd = plan.nodes[static_cast<std::size_t>(v)];
    nd.parent = v == 0 ? -1 : tr->parent(v);
    for (int c : tr->children(v))
      if (c < used) nd.children.push_back(c);
    std::reverse(nd.children.begin(), nd.children.end());  // the broadcast's last child arrives first
    nd.send = t - tr->label(v);
    const auto k = static_cast<std::int64_t>(nd.children.size());
    const auto S = static_cast<std::int64_t>(nd.send);
    // Before the first reception, at S - (o + 1) - (k - 1) g: that many additions.
    const std::int64_t first = k ? S - static_cast<std::int64_t>(o + 1) - (k - 1) * static_cast<std::int64_t>(g) : S;
    nd.work.push_back(static_cast<double>(first));
    nd.local.push_back({0, first + 1});
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t chain = i + 1 < k ? step : 0;
      nd.work.push_back(static_cast<double>(chain));
      nd.local.push_back({0, chain});
    }
  }
  // Spare slots, from the last nodes' chains first; a leaf keeps one operand.
  std::int64_t spare = plan.capacity - n;
  for (int v = used - 1; v >= 0 && spare > 0; --v) {
    auto& nd = plan.nodes[static_cast<std::size_t>(v)];
    for (auto& seg : nd.local) {
      const std::int64_t keep = nd.children.empty() ? 1 : 0;
      const std::int64_t take = std::min(spare, seg.count - keep);
      if (take <= 0) continue;
      seg.count -= take;
      spare -= take;
    }
  }
  if (spare > 0) throw std::logic_error("optcast::logp::summation_schedule: spare operand slots left over");
  // Subtree totals (children have larger numbers than their parents), then numbering.
  for (int v = used - 1; v >= 0; --v) {
    auto& nd = plan.nodes[static_cast<std::size_t>(v)];
    for (const auto& seg : nd.local) nd.total += seg.count;
    for (int c : nd.children) nd.total += plan.nodes[static_cast<std::size_t>(c)].total;
  }
  std::vector<std::int64_t> start(static_cast<std::size_t>(used), 0);
  for (int v = 0; v < used; ++v) {  // parents before children
    auto& nd = plan.nodes[static_cast<std::size_t>(v)];
    std::int64_t pos = start[static_cast<std::size_t>(v)];
    for (std::size_t i = 0; i < nd.local.size(); ++i) {
      if (i > 0) {
        const int c = nd.children[i - 1];
        start[static_cast<std::size_t>(c)] = pos;
        pos += plan.nodes[static_cast<std::size_t>(c)].total;
      }
      nd.local[i].first = pos;
      pos += nd.local[i].count;
    }
  }
  return plan;
}

}  // namespace optcast::logp
