#include "optcast/logp.hpp"

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

// A chain with w_T == P, T fixed: limited discrepancy search around "the largest window
// that still fits", allowing d other choices (a smaller window, or none) along the way
// for d = 0, 1, 2, ... within the node budget. Few deviations from the largest windows
// suffice when a chain exists (the largest windows are what reach P by T at all).
struct chain_search {
  std::int64_t P;
  int L, T;
  std::int64_t budget;
  std::int64_t visited = 0;
  std::vector<std::int64_t> w{1};
  std::vector<int> from{-1};

  bool run(int d) {
    const auto j = static_cast<int>(w.size());
    if (w.back() == P) return true;
    if (j > T || ++visited > budget) return false;
    if (most_by(w, L, T, P) < P) return false;
    int choice = 0;
    std::int64_t last = -1;
    for (int t = std::max(j - L, -1); t >= -1 && choice <= d; --t) {
      const std::int64_t v = t >= 0 ? w[static_cast<std::size_t>(t)] : 0;  // t = -1: no message
      if (v == last || w.back() + v > P) continue;
      last = v;
      const int cost = choice++ > 0 ? 1 : 0;
      w.push_back(w.back() + v);
      from.push_back(t);
      if (run(d - cost)) return true;
      w.pop_back();
      from.pop_back();
      if (visited > budget) return false;
    }
    return false;
  }

  bool run() {
    for (int d = 0; d <= T && visited <= budget; ++d)
      if (run(d)) return true;
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

namespace {

// Section 3.2/3.4's block-cyclic assignment on the optimal tree for N = P - 1 nodes:
// an internal node with r children gets a block of r consecutive processors (from 1,
// in node order), the j-th of which plays it for the items i = j (mod r). Its r sends
// of item i then end before its next item i + r arrives.
struct block_cyclic {
  std::shared_ptr<const broadcast_tree> tr;
  std::vector<int> block;  // first processor of an internal node's block; -1 for a leaf
  std::vector<int> leaves;  // in node order, which is label order

  block_cyclic(int N, int L) : tr(tree_for(N, {static_cast<double>(L), 0, 1})), block(static_cast<std::size_t>(N), -1) {
    int next = 1;
    for (int v = 0; v < N; ++v) {
      if (const auto r = static_cast<int>(tr->children(v).size())) {
        block[static_cast<std::size_t>(v)] = next;
        next += r;
      } else {
        leaves.push_back(v);
      }
    }
  }
  bool internal(int v) const { return block[static_cast<std::size_t>(v)] >= 0; }
  // The processor playing internal node v for item i.
  int proc(int v, int i) const {
    return block[static_cast<std::size_t>(v)] + i % static_cast<int>(tr->children(v).size());
  }
  std::int64_t label(int v) const { return static_cast<std::int64_t>(tr->label(v)); }
};

// An empty plan for (P, L, k), the arguments checked.
kitem_plan empty_plan(const char* who, int P, int L, int k) {
  if (P < 1 || L < 1 || k < 1) throw std::invalid_argument(std::string("optcast::logp::") + who + ": need P, L, k >= 1");
  kitem_plan plan;
  plan.P = P;
  plan.L = L;
  plan.k = k;
  plan.sends.resize(static_cast<std::size_t>(P));
  plan.receives.resize(static_cast<std::size_t>(P));
  return plan;
}

}  // namespace

kitem_plan kitem_buffered(int P, int L, int k) {
  auto plan = empty_plan("kitem_buffered", P, L, k);
  const int N = P - 1;
  if (N == 0) return plan;
  const block_cyclic bc(N, L);
  const auto& tr = bc.tr;
  const auto d = [&](int v) { return bc.label(v); };
  const auto& leaves = bc.leaves;
  struct arrival {
    std::int64_t time;
    int item;
    bool active;
    int from;
  };
  std::vector<std::vector<arrival>> in(static_cast<std::size_t>(P));
  std::vector<int> proc(static_cast<std::size_t>(N));
  std::vector<char> busy(static_cast<std::size_t>(P));
  for (int i = 0; i < k; ++i) {
    std::fill(busy.begin(), busy.end(), 0);
    for (int v = 0; v < N; ++v)
      if (bc.internal(v)) {
        proc[static_cast<std::size_t>(v)] = bc.proc(v, i);
        busy[static_cast<std::size_t>(bc.proc(v, i))] = 1;
      }
    int q = 1;
    for (int v : leaves) {
      while (busy[static_cast<std::size_t>(q)]) ++q;
      proc[static_cast<std::size_t>(v)] = q++;
    }
    const auto root = static_cast<std::size_t>(proc[0]);
    plan.sends[0].push_back({i, proc[0], i});
    in[root].push_back({i + L, i, N > 1 && bc.internal(0), 0});
    for (int v = 0; v < N; ++v) {
      const auto kids = tr->children(v);
      const int from = proc[static_cast<std::size_t>(v)];
      for (std::size_t j = 0; j < kids.size(); ++j) {
        const int c = kids[j];
        const int to = proc[static_cast<std::size_t>(c)];
        const std::int64_t t = i + L + d(v) + static_cast<std::int64_t>(j);
        plan.sends[static_cast<std::size_t>(from)].push_back({i, to, t});
        in[static_cast<std::size_t>(to)].push_back({t + L, i, bc.internal(c), from});
      }
    }
  }
  for (auto& s : plan.sends)
    std::stable_sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
  // Each processor: what it is internal for as it arrives, otherwise the oldest waiting.
  for (int p = 1; p < P; ++p) {
    auto& a = in[static_cast<std::size_t>(p)];
    std::sort(a.begin(), a.end(), [](const arrival& x, const arrival& y) {
      return std::tie(x.time, x.item) < std::tie(y.time, y.item);
    });
    using waiting = std::tuple<std::int64_t, int, int>;  // arrival, item, from
    std::priority_queue<waiting, std::vector<waiting>, std::greater<>> buf;
    std::size_t idx = 0;
    auto& out = plan.receives[static_cast<std::size_t>(p)];
    for (std::int64_t t = a.empty() ? 0 : a.front().time; idx < a.size() || !buf.empty(); ++t) {
      const arrival* act = nullptr;
      for (; idx < a.size() && a[idx].time <= t; ++idx) {
        if (a[idx].active && a[idx].time == t)
          act = &a[idx];
        else
          buf.emplace(a[idx].time, a[idx].item, a[idx].from);
      }
      if (act) {
        out.push_back({act->item, act->from, t});
      } else if (!buf.empty()) {
        const auto [at, item, from] = buf.top();
        buf.pop();
        out.push_back({item, from, t});
      } else {
        continue;
      }
      plan.finish = std::max(plan.finish, t);
    }
  }
  return plan;
}

kitem_plan kitem_single(int P, int L, int k) {
  auto plan = empty_plan("kitem_single", P, L, k);
  const int N = P - 1;
  if (N == 0) return plan;
  const block_cyclic bc(N, L);
  constexpr std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const auto K = static_cast<std::size_t>(k);
  std::vector<std::int64_t> got(static_cast<std::size_t>(P) * K, none);  // [q * k + i]: step q has item i
  const auto has = [&](int q, int i) -> std::int64_t& { return got[static_cast<std::size_t>(q) * K + static_cast<std::size_t>(i)]; };
  // Busy steps of each processor's port, in and out.
  std::vector<std::vector<char>> in_busy(static_cast<std::size_t>(P)), out_busy(static_cast<std::size_t>(P));
  const auto at = [](std::vector<char>& v, std::int64_t t) -> char& {
    if (static_cast<std::size_t>(t) >= v.size()) v.resize(static_cast<std::size_t>(t) + 64, 0);
    return v[static_cast<std::size_t>(t)];
  };
  std::vector<std::vector<std::pair<int, int>>> arriving;  // [step]: (processor, item) received then
  const auto transfer = [&](int from, int to, int i, std::int64_t t) {
    plan.sends[static_cast<std::size_t>(from)].push_back({i, to, t});
    plan.receives[static_cast<std::size_t>(to)].push_back({i, from, t + L});
    at(out_busy[static_cast<std::size_t>(from)], t) = 1;
    at(in_busy[static_cast<std::size_t>(to)], t + L) = 1;
    has(to, i) = t + L;
    if (static_cast<std::size_t>(t + L) >= arriving.size()) arriving.resize(static_cast<std::size_t>(t + L) + 64);
    arriving[static_cast<std::size_t>(t + L)].emplace_back(to, i);
    plan.finish = std::max(plan.finish, t + L);
  };
  // The optimal broadcast phase: the source sends item i at step i to its root, and the
  // internal nodes get it on the optimal tree's schedule. The block-cyclic assignment
  // keeps these transfers from meeting at a port.
  std::vector<std::set<int>> need(static_cast<std::size_t>(P));  // items still to reach q
  std::int64_t remaining = 0;
  std::vector<char> active(static_cast<std::size_t>(P));
  for (int i = 0; i < k; ++i) {
    std::fill(active.begin(), active.end(), 0);
    const int root = bc.internal(0) ? bc.proc(0, i) : 1;
    transfer(0, root, i, i);
    active[static_cast<std::size_t>(root)] = 1;
    for (int v = 0; v < N; ++v) {
      if (!bc.internal(v)) continue;
      const auto kids = bc.tr->children(v);
      for (std::size_t j = 0; j < kids.size(); ++j)
        if (bc.internal(kids[j])) {
          transfer(bc.proc(v, i), bc.proc(kids[j], i), i, i + L + bc.label(v) + static_cast<std::int64_t>(j));
          active[static_cast<std::size_t>(bc.proc(kids[j], i))] = 1;
        }
    }
    for (int q = 1; q < P; ++q)
      if (!active[static_cast<std::size_t>(q)]) {
        need[static_cast<std::size_t>(q)].insert(i);
        ++remaining;
      }
  }
  // The end game, step by step: every free sending port may give any item it holds to
  // a processor whose receiving port is free on arrival. Each step is a maximum
  // matching (augmenting paths) that serves the processors missing the oldest items
  // first, each from the sender that can give it the oldest of them. Sets of
  // processors are bit masks: who holds an item, who can send, who was visited.
  const auto W = (static_cast<std::size_t>(P) + 63) / 64;
  std::vector<std::uint64_t> holders(K * W), can_send(W), seen(W), taken(W);
  const auto set = [](std::vector<std::uint64_t>& m, std::size_t off, int q) {
    m[off + static_cast<std::size_t>(q >> 6)] |= std::uint64_t{1} << (q & 63);
  };
  const auto is_set = [](const std::vector<std::uint64_t>& m, int q) {
    return (m[static_cast<std::size_t>(q >> 6)] >> (q & 63)) & 1;
  };
  std::vector<int> receivers, owner(static_cast<std::size_t>(P));
  const auto best = [&](int s, int q, std::int64_t t) {
    for (int i : need[static_cast<std::size_t>(q)])
      if (has(s, i) <= t) return i;
      else if (i + L > t) break;
    return -1;
  };
  std::int64_t t = 0;
  // For q's oldest missing item first: a free sender holding it, else one whose
  // receiver can be moved to another sender; then the next item.
  const std::function<bool(int)> augment = [&](int q) -> bool {
    for (int i : need[static_cast<std::size_t>(q)]) {
      if (i + L > t) break;  // nobody holds item i before its root does, at i + L
      const std::uint64_t* h = holders.data() + static_cast<std::size_t>(i) * W;
      for (std::size_t w = 0; w < W; ++w)
        if (const auto x = h[w] & can_send[w] & ~seen[w] & ~taken[w]) {
          const int s = static_cast<int>(w * 64) + std::countr_zero(x);
          set(seen, 0, s);
          set(taken, 0, s);
          owner[static_cast<std::size_t>(s)] = q;
          return true;
        }
      for (std::size_t w = 0; w < W; ++w)
        for (auto x = h[w] & can_send[w] & ~seen[w]; x; x &= x - 1) {
          const int s = static_cast<int>(w * 64) + std::countr_zero(x);
          if (is_set(seen, s)) continue;  // visited by a deeper search meanwhile
          set(seen, 0, s);
          if (augment(owner[static_cast<std::size_t>(s)])) {
            owner[static_cast<std::size_t>(s)] = q;
            return true;
          }
        }
    }
    return false;
  };
  const std::int64_t limit = plan.finish + 4 * (static_cast<std::int64_t>(k) + bc.label(N - 1) + 2 * L) + 64;
  for (; remaining > 0; ++t) {
    if (t > limit) throw std::logic_error("optcast::logp::kitem_single: the end game does not finish");
    if (static_cast<std::size_t>(t) < arriving.size())
      for (const auto& [q, i] : arriving[static_cast<std::size_t>(t)]) set(holders, static_cast<std::size_t>(i) * W, q);
    std::fill(can_send.begin(), can_send.end(), 0);
    receivers.clear();
    for (int q = 1; q < P; ++q) {
      if (!at(out_busy[static_cast<std::size_t>(q)], t)) set(can_send, 0, q);
      if (!need[static_cast<std::size_t>(q)].empty() && !at(in_busy[static_cast<std::size_t>(q)], t + L)) receivers.push_back(q);
    }
    std::stable_sort(receivers.begin(), receivers.end(), [&](int a, int b) {
      return *need[static_cast<std::size_t>(a)].begin() < *need[static_cast<std::size_t>(b)].begin();
    });
    std::fill(taken.begin(), taken.end(), 0);
    // What a failed search visited cannot reach a free sender until a search succeeds
    // (Kuhn): keeping those marks changes no outcome and saves the repeated searches.
    std::fill(seen.begin(), seen.end(), 0);
    for (int q : receivers)
      if (augment(q)) std::fill(seen.begin(), seen.end(), 0);
    for (int s = 1; s < P; ++s)
      if (is_set(taken, s)) {
        const int q = owner[static_cast<std::size_t>(s)];
        const int i = best(s, q, t);
        transfer(s, q, i, t);
        need[static_cast<std::size_t>(q)].erase(i);
        --remaining;
      }
  }
  for (auto* v : {&plan.sends, &plan.receives})
    for (auto& x : *v)
      std::stable_sort(x.begin(), x.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
  return plan;
}

namespace {

template <class Make>
std::shared_ptr<const kitem_plan> cached(Make make, int P, int L, int k) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, std::weak_ptr<const kitem_plan>> cache;
  static std::shared_ptr<const kitem_plan> recent;  // keeps the last one alive between calls
  std::lock_guard lock(mu);
  auto& slot = cache[{P, L, k}];
  if (auto p = slot.lock()) return p;
  auto p = std::make_shared<const kitem_plan>(make(P, L, k));
  slot = p;
  recent = p;
  return p;
}

}  // namespace

std::shared_ptr<const kitem_plan> kitem_buffered_for(int P, int L, int k) {
  return cached([](int p, int l, int n) { return kitem_buffered(p, l, n); }, P, L, k);
}

std::shared_ptr<const kitem_plan> kitem_single_for(int P, int L, int k) {
  return cached([](int p, int l, int n) { return kitem_single(p, l, n); }, P, L, k);
}

}  // namespace optcast::logp
