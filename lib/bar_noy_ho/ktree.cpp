// Bar-Noy and Ho, Section 3: the k-tree algorithm.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "bar_noy_ho/multiport.hpp"

namespace optcast::multiport {

int ceil_log(int base, std::int64_t x) {
  if (base < 2 || x < 1) throw std::invalid_argument("multiport::ceil_log: base >= 2 and x >= 1");
  int e = 0;
  for (std::int64_t p = 1; p < x; p *= base) ++e;
  return e;
}

namespace {

void check(int n, int m, int k, const char* what) {
  if (n < 1 || m < 0 || k < 1)
    throw std::invalid_argument(std::string("multiport::") + what + ": need n >= 1, m >= 0 and k >= 1, got n " +
                                std::to_string(n) + ", m " + std::to_string(m) + ", k " + std::to_string(k));
}

int batches(int m, int k) { return (m + k - 1) / k; }

// One spanning tree: position 0 is the broadcaster, the others have a parent position
// and a processor.
struct tree {
  std::vector<int> parent, proc, depth, first_child;
  int add(int par, int p) {
    parent.push_back(par);
    proc.push_back(p);
    depth.push_back(par < 0 ? 0 : depth[static_cast<std::size_t>(par)] + 1);
    first_child.push_back(-1);
    const int pos = static_cast<int>(parent.size()) - 1;
    if (par >= 0 && first_child[static_cast<std::size_t>(par)] < 0) first_child[static_cast<std::size_t>(par)] = pos;
    return pos;
  }
};

std::vector<tree> build(int n, int k) {
  std::vector<tree> trees(static_cast<std::size_t>(k));
  if (n == 1) {
    for (auto& t : trees) t.add(-1, 0);
    return trees;
  }
  // 3.3's trees for n0 processors (k divides n0 - 2), then alpha more (3.4, 3.5).
  const int alpha = n >= k + 2 ? (n - 2) % k : n - 2;
  const int n0 = n - alpha;
  const int q = (n0 - 2) / k;  // non-leaves of each T_k(n0 - 1), all with k children
  for (int j = 0; j < k; ++j) {
    auto& t = trees[static_cast<std::size_t>(j)];
    t.add(-1, 0);
    // T_k(n0 - 1) breadth first: node x (0-based) hangs off node (x - 1) / k; non-leaf
    // x < q is processor 1 + j q + x, the leaves take the other processors in order.
    int leaf_proc = 1;
    for (int x = 0; x < n0 - 1; ++x) {
      int p;
      if (x < q) {
        p = 1 + j * q + x;
      } else {
        while (leaf_proc >= 1 + j * q && leaf_proc < 1 + (j + 1) * q) ++leaf_proc;
        p = leaf_proc++;
      }
      t.add(x == 0 ? 0 : 1 + (x - 1) / k, p);
    }
  }
  if (alpha == 0) return trees;
  // The paper's loop: alpha new nodes per tree, hung below the first leaf (and the
  // second when the first's processor p_i is out of children); p_i = n0 + i. A counter
  // keeps every p_i at k children summed over the trees.
  const int first_leaf = 1 + q;  // breadth first, position 1 + q is T_k's node q
  int c = 0, i = 0;
  for (int j = 0; j < k; ++j) {
    auto& t = trees[static_cast<std::size_t>(j)];
    std::vector<int> fresh, spare;  // new positions; processors still to place
    std::vector<char> internal(static_cast<std::size_t>(alpha), 0);
    const auto attach = [&](int at, int count, int pi) {
      if (t.proc[static_cast<std::size_t>(at)] > 0) spare.push_back(t.proc[static_cast<std::size_t>(at)]);
      t.proc[static_cast<std::size_t>(at)] = n0 + pi;
      internal[static_cast<std::size_t>(pi)] = 1;
      for (int x = 0; x < count; ++x) fresh.push_back(t.add(at, -1));
    };
    c += alpha;
    if (c <= k) {
      attach(first_leaf, alpha, i);
      if (c == k) {
        c = 0;
        ++i;
      }
    } else {
      c -= k;
      attach(first_leaf, alpha - c, i);
      ++i;
      // The second leaf, breadth first; below k + 2 there is none, and the first leaf's
      // first child (just made) takes its part (3.5).
      const int second = n0 - 1 > q + 1 ? first_leaf + 1 : t.first_child[static_cast<std::size_t>(first_leaf)];
      attach(second, c, i);
    }
    for (int x = 0; x < alpha; ++x)
      if (!internal[static_cast<std::size_t>(x)]) spare.push_back(n0 + x);
    std::size_t next = 0;
    for (int pos : fresh)
      if (t.proc[static_cast<std::size_t>(pos)] < 0) t.proc[static_cast<std::size_t>(pos)] = spare.at(next++);
    if (next != spare.size()) throw std::logic_error("multiport::ktree: processors left over");
  }
  return trees;
}

}  // namespace

int lemma_2(int n, int m, int k) {
  check(n, m, k, "lemma_2");
  return m == 0 || n == 1 ? 0 : batches(m, k) - 1 + ceil_log(k + 1, n);
}

int lemma_3(int n, int m, int k) {
  const int base = lemma_2(n, m, k);
  if (m == 0 || n == 1) return base;
  std::int64_t np = 1;
  for (int e = 0; e < ceil_log(k + 1, n); ++e) np *= k + 1;
  const std::int64_t beta = (m - 1) % k + 1;
  return static_cast<std::int64_t>(n - 1) * beta > np - 1 ? base + 1 : base;
}

int ktree_height(int n, int k) {
  check(n, 0, k, "ktree_height");
  int h = 0;
  for (const auto& t : build(n, k))
    for (int dd : t.depth) h = std::max(h, dd);
  return h;
}

int ktree_stated(int n, int m, int k) {
  if (n < k + 2) throw std::invalid_argument("multiport::ktree_stated: the formula is for n >= k + 2");
  const std::int64_t alpha = (n - 2) % k;
  return batches(m, k) + ceil_log(k, (n - 1 - alpha + 2 * k) * (k - 1) + 1) - 1;
}

packets::schedule ktree(int n, int m, int k) {
  check(n, m, k, "ktree");
  if (k < 2) throw std::invalid_argument("multiport::ktree: the k-tree algorithm needs k >= 2 ports");
  packets::schedule out("ktree", n, m, k);
  const auto trees = build(n, k);
  for (int msg = 0; msg < m; ++msg) {
    const auto& t = trees[static_cast<std::size_t>(msg % k)];
    const int sent = msg / k;  // the broadcaster's round
    for (std::size_t pos = 1; pos < t.parent.size(); ++pos)
      out.add(sent + t.depth[pos] - 1, t.proc[static_cast<std::size_t>(t.parent[pos])], t.proc[pos], msg);
  }
  out.finish();
  return out;
}

}  // namespace optcast::multiport
