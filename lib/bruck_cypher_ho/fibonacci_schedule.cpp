// Bruck, Cypher and Ho, Section 4: the broadcast on d extended Fibonacci treetops.
#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "bruck_cypher_ho/fibonacci.hpp"

namespace optcast::fibonacci {

namespace {

int mod(std::int64_t a, int d) { return static_cast<int>(((a % d) + d) % d); }

// Every processor's label and parent in each extended tree \hat T_j (Definition 4.2, with
// 4.3's inserted processors); processor 0 is the broadcaster, v the array's head.
struct labeling {
  int d = 1, v = -1;  // v: the head's id (when the layout has an array)
  int count = 0;      // processors labelled: 1 + d s + inserted, plus v
  std::vector<std::vector<std::int64_t>> label;  // [tree][processor]
  std::vector<std::vector<int>> parent;
};

// The leaves of T in the order they are used: the first (the smallest label, so that v
// and the array behind it start early) takes R_j; the next `beta` take the inserted
// processors, whose one-round delay then falls far from the deepest leaves; with
// beta = every leaf, R_j's set is the last to take them.
void order_leaves(const tree& T, std::vector<int>& leaves, int beta) {
  std::stable_sort(leaves.begin(), leaves.end(), [&](int a, int b) { return T.label(a) < T.label(b); });
  if (beta > static_cast<int>(leaves.size())) throw std::logic_error("fibonacci: more inserted processors than leaves");
}

labeling label(const layout& lay) {
  const int d = lay.d, s = lay.s;
  labeling out;
  out.d = d;
  const int body = 1 + d * s + lay.inserted;
  out.v = lay.array > 0 ? body : -1;
  out.count = body + (lay.array > 0 ? 1 : 0);
  out.label.assign(static_cast<std::size_t>(d), std::vector<std::int64_t>(static_cast<std::size_t>(body + 1), -1));
  out.parent.assign(static_cast<std::size_t>(d), std::vector<int>(static_cast<std::size_t>(body + 1), -1));
  const auto set = [&](int j, int p, std::int64_t l, int par) {
    out.label[static_cast<std::size_t>(j)][static_cast<std::size_t>(p)] = l;
    out.parent[static_cast<std::size_t>(j)][static_cast<std::size_t>(p)] = par;
  };
  const auto lab = [&](int j, int p) { return out.label[static_cast<std::size_t>(j)][static_cast<std::size_t>(p)]; };
  // The smallest label above `above` that is `want` mod d.
  const auto next = [&](std::int64_t above, int want) { return above + mod(want - above - 1, d) + 1; };

  if (d == 1) {  // the path 0 -> 1 -> ... : T_0 is FT_1, a path, and v has no one to follow
    for (int p = 1; p < body; ++p) set(0, p, p - 1, p - 1);
    if (out.v >= 0) set(0, out.v, body - 1, body - 1);
    return out;
  }

  const tree T(d, f(d, s), 0, s);
  const auto proc = [&](int h, int u) { return 1 + h * s + u; };
  std::vector<int> leaves, internals;
  for (int u = 0; u < T.size(); ++u) (T.leaf(u) ? leaves : internals).push_back(u);
  const int beta = lay.inserted / d;
  order_leaves(T, leaves, beta);

  for (int h = 0; h < d; ++h)  // T_h itself, base-h labelled; its root hangs off the broadcaster
    for (int u = 0; u < T.size(); ++u) set(h, proc(h, u), T.label(u) + h, u == 0 ? 0 : proc(h, T.parent(u)));

  for (int j = 0; j < d; ++j) {
    // The leaves of T_j but the first take the sibling sets of the other trees, in
    // order (the pairing is free: a full sibling set's labels in \hat T_j are the d
    // rounds after its new parent's, whichever it is).
    std::size_t next_set = 0;
    for (std::size_t idx = 1; idx < leaves.size(); ++idx, ++next_set) {
      const int h = (j + 1 + static_cast<int>(next_set / internals.size())) % d;
      const int w = internals[next_set % internals.size()];
      const int x = proc(j, leaves[idx]);
      const std::int64_t lx = lab(j, x);
      for (int c : T.children(w)) {
        const int p = proc(h, c);
        const int want = mod(lab(h, p) + h - j, d);  // Definition 4.2: l_j(p) + j = l_h(p) + h
        if (static_cast<int>(idx) <= beta) {  // (idx 0, R_j's leaf, is never inserted below here)
          // 4.3: the inserted processor of slot k (1..d) takes label lx + k and passes
          // on to the member whose label is one more.
          int k = mod(want - lx - 1, d);
          if (k == 0) k = d;
          const int a = 1 + d * s + (static_cast<int>(idx) - 1) * d + (k - 1);
          set(j, a, lx + k, x);
          set(j, p, lx + k + 1, a);
        } else {
          set(j, p, next(lx, want), x);
        }
      }
    }
    // The first leaf takes R_j: the other roots and v (a slot even when v is virtual);
    // its set takes inserted processors too once every other leaf has them.
    const int xr = proc(j, leaves[0]);
    const std::int64_t lr = lab(j, xr);
    const bool shifted = beta == static_cast<int>(leaves.size());
    for (int h = 0; h <= d; ++h) {
      if (h == j) continue;
      const int p = h < d ? proc(h, 0) : body;
      const int want = h < d ? mod(2 * h - j, d) : j;
      if (!shifted) {
        set(j, p, next(lr, want), xr);
        continue;
      }
      int k = mod(want - lr - 1, d);
      if (k == 0) k = d;
      const int a = 1 + d * s + (beta - 1) * d + (k - 1);
      set(j, a, lr + k, xr);
      set(j, p, lr + k + 1, a);
    }
  }
  return out;
}

void check_layout(const layout& lay) {
  if (lay.d < 1 || (lay.d > 1 && (lay.d % 2 == 0 || lay.d < 3)) || lay.s < 0 || lay.inserted < 0 || lay.array < 0 ||
      (lay.d > 1 && (lay.s < 1 || lay.s % lay.d != 1 % lay.d || lay.inserted % lay.d != 0)))
    throw std::invalid_argument("fibonacci: invalid layout (d " + std::to_string(lay.d) + ", s " + std::to_string(lay.s) + ")");
}

}  // namespace

std::vector<layout> layouts(int n, int d) {
  if (n < 1) throw std::invalid_argument("fibonacci::layouts: need n >= 1");
  if (d == 1) return {layout{1, n - 1, 0, 0}};
  if (d < 3 || d % 2 == 0) throw std::invalid_argument("fibonacci::layouts: d must be 1 or odd >= 3");
  std::vector<layout> out;
  const int N = n - 1;
  // Groups as large as fit (Section 4.3's n' and beta, 4.4's alpha), then smaller ones
  // while the array stays short enough to be worth a look.
  for (int s = N / d - (N / d - 1 + d) % d; s >= 1 && out.size() < 8; s -= d) {
    const int leaves = (s - 1) / d * (d - 1) + 1;  // of each T_j (Lemma 3.2)
    const int beta = std::min(leaves, (N - d * s) / d);
    layout lay{d, s, beta * d, N - d * (s + beta)};
    if (!out.empty() && lay.array >= 2 * d + out.front().array) break;
    out.push_back(lay);
  }
  return out;
}

namespace {

// rounds(lay, m) - m for every m >= 1: the deepest position, which m does not change.
int depth_of(const layout& lay) {
  const int d = lay.d;
  // Packet i of tree j reaches p in round l_j(p) + i - j, and l_j(p) - j depends on the
  // position only: under a leaf x of T (base-0 label l) its set takes the d rounds after
  // l, one later with inserted processors; v, under R_j's leaf r, takes the first round
  // after r that is 0 mod d counted from r's tree. So the last round is m - 1 plus the
  // deepest position.
  const tree T(d, f(d, lay.s), 0, lay.s);
  std::vector<int> leaves;
  for (int u = 0; u < T.size(); ++u)
    if (T.leaf(u)) leaves.push_back(u);
  const int beta = lay.inserted / d;
  order_leaves(T, leaves, beta);
  std::int64_t deepest = 0;
  for (std::size_t i = 1; i < leaves.size(); ++i)
    deepest = std::max(deepest, T.label(leaves[i]) + d + (static_cast<int>(i) <= beta ? 1 : 0));
  const bool shifted = beta == static_cast<int>(leaves.size());
  const std::int64_t r = T.label(leaves[0]) + (shifted ? 1 : 0);
  const std::int64_t v = r + mod(-r - 1, d) + 1;
  // R_j's set spans the d rounds after r; a virtual v in the last of them leaves it unused.
  deepest = std::max(deepest, lay.array == 0 && v == r + d ? r + d - 1 : r + d);
  if (lay.array > 0) deepest = std::max(deepest, v + lay.array - 1);
  return static_cast<int>(deepest);
}

// Remembered: choose() finds the best layout's depth, and the automatic choice's
// prediction then asks rounds() of the same layout (at n = 10^5 each build of T took a
// third of a simulated broadcast's set-up).
int depth(const layout& lay) {
  if (lay.d == 1) return lay.processors() - 2;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int>, int> known;
  const auto key = std::tuple{lay.d, lay.s, lay.inserted, lay.array};
  {
    std::lock_guard lock(mu);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  const int r = depth_of(lay);
  std::lock_guard lock(mu);
  if (known.size() >= 1024) known.clear();
  known.emplace(key, r);
  return r;
}

}  // namespace

int rounds(const layout& lay, int m) {
  check_layout(lay);
  if (m == 0 || lay.processors() == 1) return 0;
  return depth(lay) + m;
}

// depth() counts every leaf of T but the first d rounds past its label, and T (s nodes,
// closed under parents, inside FT_d(f_d(s))) has a leaf labelled at least the smallest
// l for which FT_d(f_d(s)) has s nodes labelled <= l: those counts take O(d log s).
// And T is its root and whole sibling sets (build() removes d leaves at a time), so if
// its largest label is M, every internal node of T is labelled <= M - d: s <= 1 + d x
// (FT's internal nodes labelled <= M - d), and M is a leaf's label, at least d - 1
// rounds deep even as the first leaf. That second bound is the tighter one for d >= 5
// (n = 10^5: 3 rounds nearer), where the first alone let choose() build 8 trees for
// nothing.
int rounds_at_least(const layout& lay, int m) {
  check_layout(lay);
  if (m == 0 || lay.processors() == 1) return 0;
  if (lay.d == 1 || lay.s < 2) return m;
  const int d = lay.d, t = f(d, lay.s);
  // upto[l][o]: the nodes of FT_d(o) labelled <= l (a node of order o >= d has children
  // of orders o - 1 .. o - d, labelled 1 .. d more), capped at s; inner[l][o] the same
  // for its internal nodes (order >= d).
  std::vector<std::vector<std::int64_t>> upto, inner;
  int by_count = -1, by_sets = -1;
  for (int l = 0; by_count < 0 || by_sets < 0; ++l) {
    auto& row = upto.emplace_back(static_cast<std::size_t>(t + 1), 1);
    auto& in = inner.emplace_back(static_cast<std::size_t>(t + 1), 0);
    for (int o = d; o <= t; ++o) {
      in[static_cast<std::size_t>(o)] = 1;
      for (int i = 1; i <= d && i <= l; ++i) {
        row[static_cast<std::size_t>(o)] =
            std::min<std::int64_t>(lay.s, row[static_cast<std::size_t>(o)] + upto[static_cast<std::size_t>(l - i)][static_cast<std::size_t>(o - i)]);
        in[static_cast<std::size_t>(o)] =
            std::min<std::int64_t>(lay.s, in[static_cast<std::size_t>(o)] + inner[static_cast<std::size_t>(l - i)][static_cast<std::size_t>(o - i)]);
      }
    }
    if (by_count < 0 && row[static_cast<std::size_t>(t)] >= lay.s) by_count = l + d;
    // M - d = l: the first l whose internal nodes can hold T's (s - 1) / d sibling sets.
    if (by_sets < 0 && 1 + d * in[static_cast<std::size_t>(t)] >= lay.s) by_sets = l + d + d - 1;
  }
  return std::max(by_count, by_sets) + m;
}

int lemma_4_8(int n, int m, int d) { return m + f(d, (n - 1 + d - 1) / d) + 2 * d - 2; }

layout choose(int n, int m) {
  layout best = layouts(n, 1).front();
  if (m == 0 || best.processors() == 1) return best;  // every layout takes 0 rounds
  // Every layout takes its depth + m rounds, so the best one is the same for every m >= 1:
  // found once per n (each depth builds a tree of about n / d nodes, and every rank of an
  // in-process world, for every block count the automatic choice weighs, asks).
  static std::mutex mu;
  static std::map<int, layout> best_for;
  {
    std::lock_guard lock(mu);
    if (auto it = best_for.find(n); it != best_for.end()) return it->second;
  }
  int fewest = depth(best);
  // Up to d = 15: the best d grows like log log n (Theorem 4.9), 5 or 7 for any n an
  // int holds; below the paper's range a large d with s = 1 can still win (n = 12).
  for (int d = 3; d <= 15 && d + 1 <= n; d += 2)
    for (const auto& lay : layouts(n, d)) {
      check_layout(lay);
      // Only a strictly better layout replaces the best: one that cannot be is not built.
      if (rounds_at_least(lay, 1) - 1 >= fewest) continue;
      if (const int r = depth(lay); r < fewest) {
        fewest = r;
        best = lay;
      }
    }
  std::lock_guard lock(mu);
  if (best_for.size() >= 1024) best_for.clear();
  best_for.emplace(n, best);
  return best;
}

packets::schedule schedule(const layout& lay, int m) {
  check_layout(lay);
  packets::schedule out("fibonacci d=" + std::to_string(lay.d), lay.processors(), m, 1);
  const auto L = label(lay);
  for (int i = 0; i < m; ++i) {
    const int j = i % lay.d;
    const std::int64_t o = i - j;
    const auto& lab = L.label[static_cast<std::size_t>(j)];
    const auto& par = L.parent[static_cast<std::size_t>(j)];
    for (int p = 1; p < L.count; ++p)
      out.add(static_cast<int>(lab[static_cast<std::size_t>(p)] + o), par[static_cast<std::size_t>(p)], p, i);
    for (int t = 1; t < lay.array; ++t)  // 4.4: the array passes each packet on a round later
      out.add(static_cast<int>(lab[static_cast<std::size_t>(L.v)] + o + t), L.v + t - 1, L.v + t, i);
  }
  out.finish();
  return out;
}

std::shared_ptr<const packets::schedule> schedule_for(int n, int m) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::weak_ptr<const packets::schedule>> cache;
  static std::shared_ptr<const packets::schedule> recent;  // the last one outlives its callers
  std::lock_guard lock(mu);
  auto& slot = cache[{n, m}];
  if (auto p = slot.lock()) return p;
  auto p = std::make_shared<const packets::schedule>(schedule(choose(n, m), m));
  slot = p;
  recent = p;
  return p;
}

}  // namespace optcast::fibonacci
