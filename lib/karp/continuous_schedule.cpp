// Karp et al., Sections 3.1-3.3: continuous broadcast on block-cyclic assignments.
//
// A word for an internal node v (label d, r children) is what each processor of v's
// block receives in the r - 1 steps between two of its active items: letter x at
// position p (1 <= p < r) is a leaf of label x, that is the item whose tree reaches that
// leaf then. A processor in the block gets item t - L - d at position 0 of every period
// and item t - L - x at position p, so two receptions of one item in a period (hence
// ever) are avoided exactly when the residues p - x (mod r), with -d for position 0, are
// all different. That is the paper's "second restriction" in one line. The first is
// that the words and the receive-only processor's letter use up the leaf labels of the
// tree, each as often as it occurs.
#include <algorithm>
#include "runtime/plan_cache.hpp"
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "karp/plans.hpp"

namespace optcast::logp {

namespace {

std::int64_t mod(std::int64_t a, std::int64_t r) { return ((a % r) + r) % r; }

// Depth-first search for words: blocks largest first, each position the most plentiful
// letter whose residue is still free. `budget` bounds the positions tried.
class word_search {
public:
  struct block {
    int r = 0;
    std::int64_t d = 0;
    std::vector<std::int64_t> word;  // letters for positions 1..r-1 (preset ones kept)
    bool preset = false;
  };

  word_search(std::vector<block> blocks, std::map<std::int64_t, int> letters, std::int64_t receive_only, long budget)
      : blocks_(std::move(blocks)), letters_(std::move(letters)), ro_(receive_only), budget_(budget) {}

  // Fills every block's word; false if the budget ran out or there is no solution.
  bool run() {
    for (const auto& b : blocks_)
      if (b.preset)
        for (auto x : b.word)
          if (--letters_[x] < 0) return false;
    if (--letters_[ro_] < 0) return false;
    order_.resize(blocks_.size());
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return blocks_[a].r > blocks_[b].r; });
    return fill(0);
  }
  const std::vector<block>& blocks() const { return blocks_; }

private:
  bool fill(std::size_t n) {
    while (n < order_.size() && blocks_[order_[n]].preset) ++n;
    if (n == order_.size()) {
      for (const auto& [x, c] : letters_)
        if (c) return false;
      return true;
    }
    auto& b = blocks_[order_[n]];
    b.word.assign(static_cast<std::size_t>(b.r - 1), 0);
    used_.assign(static_cast<std::size_t>(b.r), 0);
    used_[static_cast<std::size_t>(mod(-b.d, b.r))] = 1;
    return position(n, b, 1);
  }

  bool position(std::size_t n, block& b, int p) {
    if (--budget_ < 0) return false;
    if (p == b.r) {
      auto keep = used_;
      if (fill(n + 1)) return true;
      used_ = std::move(keep);
      return false;
    }
    std::vector<std::pair<int, std::int64_t>> choice;  // (-count, letter)
    for (const auto& [x, c] : letters_)
      if (c > 0 && !used_[static_cast<std::size_t>(mod(p - x, b.r))]) choice.emplace_back(-c, x);
    std::sort(choice.begin(), choice.end());
    for (const auto& [negc, x] : choice) {
      const auto res = static_cast<std::size_t>(mod(p - x, b.r));
      used_[res] = 1;
      --letters_[x];
      b.word[static_cast<std::size_t>(p - 1)] = x;
      if (position(n, b, p + 1)) return true;
      used_[res] = 0;
      ++letters_[x];
      if (budget_ < 0) return false;
    }
    return false;
  }

  std::vector<block> blocks_;
  std::map<std::int64_t, int> letters_;
  std::int64_t ro_;
  long budget_;
  std::vector<std::size_t> order_;
  std::vector<char> used_;
};

// Lemma 3.1's words for a block of r in the tree of P(t) nodes, whose label is then
// t - L - r + 1; lambda_j is the leaf label t - j (a, b, c, ... = t, t - 1, t - 2, ...):
// lambda_k^(L-2-k) lambda_(k+1)^* for 1 <= k <= L - 2, and a^(L-2) (ca)^m b^*.
std::vector<std::vector<std::int64_t>> lemma_words(int r, int t, int L) {
  std::vector<std::vector<std::int64_t>> out;
  const auto lam = [t](int j) { return static_cast<std::int64_t>(t - j); };
  const int len = r - 1;
  if (len == 0) return {{}};
  for (int k = 1; k <= L - 2; ++k) {
    const int head = L - 2 - k;
    if (head > len) continue;
    std::vector<std::int64_t> w(static_cast<std::size_t>(head), lam(k));
    w.insert(w.end(), static_cast<std::size_t>(len - head), lam(k + 1));
    out.push_back(std::move(w));
  }
  if (L >= 3 && len >= L - 2)
    for (int m = 0; 2 * m <= len - (L - 2); ++m) {
      std::vector<std::int64_t> w(static_cast<std::size_t>(L - 2), lam(0));
      for (int j = 0; j < m; ++j) {
        w.push_back(lam(2));
        w.push_back(lam(0));
      }
      w.insert(w.end(), static_cast<std::size_t>(len - (L - 2) - 2 * m), lam(1));
      out.push_back(std::move(w));
    }
  return out;
}

// One word per block from its candidates, the letters used up exactly: depth-first,
// blocks largest first, within `budget` choices.
bool choose_words(std::vector<std::vector<std::vector<std::int64_t>>>& cand, std::map<std::int64_t, int>& letters,
                  std::vector<std::size_t>& pick, std::size_t n, long& budget) {
  if (n == cand.size()) return std::all_of(letters.begin(), letters.end(), [](const auto& e) { return e.second == 0; });
  for (std::size_t c = 0; c < cand[n].size(); ++c) {
    if (--budget < 0) return false;
    const auto& w = cand[n][c];
    bool ok = true;
    std::size_t used = 0;
    for (; used < w.size(); ++used)
      if (--letters[w[used]] < 0) {
        ok = false;
        ++used;
        break;
      }
    if (ok) {
      pick[n] = c;
      if (choose_words(cand, letters, pick, n + 1, budget)) return true;
    }
    for (std::size_t j = 0; j < used; ++j) ++letters[w[j]];
  }
  return false;
}

// A solution for the tree of P(t) nodes, by label: (internal node label, word) entries
// and the receive-only letter. Nodes of one label have the same number of children.
struct by_label {
  std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> words;
  std::int64_t receive_only = 0;
};

constexpr long search_budget = 400000;
// The search recurses once per word position, about once per node: trees above this
// size are not searched (the induction reaches those of the paper's form).
constexpr std::int64_t search_nodes = 4000;

// A solution for the tree of P(t) nodes found by search, with the receive-only letter
// b and, if `rooted`, the root's word a^(L-2) (ca)^m b^n (a, b, c: the labels t, t - 1,
// t - 2), the two forms Section 3.3's induction needs.
std::optional<by_label> base_case(int t, int L, bool rooted) {
  const auto N = P_of(t, {static_cast<double>(L), 0, 1});
  if (N < 2 || N > search_nodes) return std::nullopt;
  const auto tr = tree_for(static_cast<int>(N), {static_cast<double>(L), 0, 1});
  const int r0 = static_cast<int>(tr->children(0).size());
  if (rooted && r0 < L - 1) return std::nullopt;
  std::map<std::int64_t, int> letters;
  std::vector<word_search::block> blocks;
  for (int v = 0; v < tr->size(); ++v) {
    const auto r = static_cast<int>(tr->children(v).size());
    if (r)
      blocks.push_back({r, static_cast<std::int64_t>(tr->label(v)), {}, false});
    else
      ++letters[static_cast<std::int64_t>(tr->label(v))];
  }
  const std::int64_t a = t, b = t - 1, c = t - 2;
  const int rest = r0 - L + 1;  // 2m + n
  {
    // First Lemma 3.1's words only, as the paper's program did; blocks largest first.
    std::vector<std::vector<std::vector<std::int64_t>>> cand;
    std::vector<std::int64_t> label;
    for (int v = 0; v < tr->size(); ++v)
      if (const auto r = static_cast<int>(tr->children(v).size())) {
        auto ws = lemma_words(r, t, L);
        if (v == 0 && rooted)  // the root: only a^(L-2) (ca)^m b^n
          ws.erase(std::remove_if(ws.begin(), ws.end(), [&](const auto& w) { return w.empty() || w[0] != a; }), ws.end());
        cand.push_back(std::move(ws));
        label.push_back(static_cast<std::int64_t>(tr->label(v)));
      }
    auto left = letters;
    --left[b];
    std::vector<std::size_t> pick(cand.size());
    long budget = search_budget;
    if (choose_words(cand, left, pick, 0, budget)) {
      by_label out;
      for (std::size_t j = 0; j < cand.size(); ++j) out.words.emplace_back(label[j], cand[j][pick[j]]);
      out.receive_only = b;
      return out;
    }
  }
  for (int m = rooted ? rest / 2 : 0; m >= 0; --m) {
    auto bl = blocks;
    if (rooted) {
      auto& root = bl[0];
      root.preset = true;
      root.word.assign(static_cast<std::size_t>(L - 2), a);
      for (int j = 0; j < m; ++j) {
        root.word.push_back(c);
        root.word.push_back(a);
      }
      root.word.insert(root.word.end(), static_cast<std::size_t>(rest - 2 * m), b);
    }
    word_search s(std::move(bl), letters, b, search_budget);
    if (!s.run()) continue;
    by_label out;
    for (const auto& x : s.blocks()) out.words.emplace_back(x.d, x.word);
    out.receive_only = b;
    return out;
  }
  return std::nullopt;
}

// Section 3.3: I(t) is I(t - 1) shifted by one step with the root's block one larger
// (its word gets the letter b), and I(t - L) shifted by L under the root's first child.
by_label induce(const by_label& prev, const by_label& far, int t, int L) {
  by_label out;
  for (const auto& [d, w] : prev.words) {
    std::vector<std::int64_t> shifted(w.size());
    std::transform(w.begin(), w.end(), shifted.begin(), [](std::int64_t x) { return x + 1; });
    if (d == 0) {
      shifted.push_back(t - 1);
      out.words.emplace_back(0, std::move(shifted));
    } else {
      out.words.emplace_back(d + 1, std::move(shifted));
    }
  }
  for (const auto& [d, w] : far.words) {
    std::vector<std::int64_t> shifted(w.size());
    std::transform(w.begin(), w.end(), shifted.begin(), [L](std::int64_t x) { return x + L; });
    out.words.emplace_back(d + L, std::move(shifted));
  }
  out.receive_only = t - 1;
  return out;
}

// S(t) for P - 1 = P(t), L >= 3. Section 3.3: I(t) = I(t - 1) + I(t - L), the first
// with the root's word in the form a^(L-2) (ca)^m b^n (R), the second any solution whose
// receive-only letter is b (F). R(t) comes from the induction when R(t - 1) and
// F(t - L) exist, else from a search; F(t) is R(t) or a search. Memoized per L.
std::optional<by_label> inductive(int t, int L) {
  struct memo {
    std::vector<std::optional<by_label>> R, F;
  };
  static std::mutex mu;
  static std::map<int, memo> all;
  std::lock_guard lock(mu);
  auto& M = all[L];
  for (auto s = static_cast<int>(M.R.size()); s <= t; ++s) {
    std::optional<by_label> r;
    if (s >= L + 1 && M.R[static_cast<std::size_t>(s - 1)] && M.F[static_cast<std::size_t>(s - L)])
      r = induce(*M.R[static_cast<std::size_t>(s - 1)], *M.F[static_cast<std::size_t>(s - L)], s, L);
    else if (s >= L)
      r = base_case(s, L, true);
    std::optional<by_label> f = r;
    if (!f && s >= 1) f = base_case(s, L, false);
    M.R.push_back(std::move(r));
    M.F.push_back(std::move(f));
  }
  if (M.R[static_cast<std::size_t>(t)]) return M.R[static_cast<std::size_t>(t)];
  return M.F[static_cast<std::size_t>(t)];
}

}  // namespace

continuous_schedule::continuous_schedule(int P, int L) : P_(P), L_(L) {
  if (P < 2 || L < 1) throw std::invalid_argument("optcast::logp::continuous_schedule: need P >= 2, L >= 1");
  const int N = P - 1;
  const params m{static_cast<double>(L), 0, 1};
  tree_ = tree_for(N, m);
  B_ = static_cast<std::int64_t>(tree_->finish());
  block_.assign(static_cast<std::size_t>(N), -1);
  words_.resize(static_cast<std::size_t>(N));
  int next = 1;
  for (int v = 0; v < N; ++v)
    if (const auto r = static_cast<int>(tree_->children(v).size())) {
      block_[static_cast<std::size_t>(v)] = next;
      next += r;
    } else {
      leaves_[static_cast<std::int64_t>(tree_->label(v))].push_back(v);
    }
  receive_only_proc_ = next;  // = N: the blocks take N - 1 processors

  // P - 1 = P(t), t large: the paper's induction. Otherwise a direct search.
  std::optional<by_label> sol;
  if (L >= 3 && P_of(static_cast<double>(B_), m) == N) {
    sol = inductive(static_cast<int>(B_), L);
    if (sol) how_ = "Section 3.3's induction";
  }
  if (sol) {
    std::map<std::int64_t, std::vector<std::vector<std::int64_t>>> pool;
    for (auto& [d, w] : sol->words) pool[d].push_back(std::move(w));
    for (int v = 0; v < N; ++v)
      if (block_[static_cast<std::size_t>(v)] >= 0) {
        auto& ws = pool[static_cast<std::int64_t>(tree_->label(v))];
        if (ws.empty()) throw std::logic_error("optcast::logp::continuous_schedule: the induction lost a block");
        words_[static_cast<std::size_t>(v)] = std::move(ws.back());
        ws.pop_back();
      }
    receive_only_ = sol->receive_only;
  } else if (N <= search_nodes) {
    std::map<std::int64_t, int> letters;
    std::vector<word_search::block> blocks;
    std::vector<int> node;
    for (int v = 0; v < N; ++v)
      if (const auto r = static_cast<int>(tree_->children(v).size())) {
        blocks.push_back({r, static_cast<std::int64_t>(tree_->label(v)), {}, false});
        node.push_back(v);
      } else {
        ++letters[static_cast<std::int64_t>(tree_->label(v))];
      }
    // Any leaf label may go to the receive-only processor; the most frequent first.
    std::vector<std::pair<int, std::int64_t>> ro;
    for (const auto& [x, c] : letters) ro.emplace_back(-c, x);
    std::sort(ro.begin(), ro.end());
    for (const auto& [negc, x] : ro) {
      word_search s(blocks, letters, x, search_budget);
      if (!s.run()) continue;
      for (std::size_t j = 0; j < node.size(); ++j) words_[static_cast<std::size_t>(node[j])] = s.blocks()[j].word;
      receive_only_ = x;
      how_ = "search";
      break;
    }
  }
  if (how_ && !legal()) throw std::logic_error("optcast::logp::continuous_schedule: an illegal word");
  if (!how_) return;
  // Per block, the positions of each letter, for finding who receives a letter when.
  positions_.resize(static_cast<std::size_t>(N));
  for (int v = 0; v < N; ++v)
    for (std::size_t p = 0; p < words_[static_cast<std::size_t>(v)].size(); ++p)
      positions_[static_cast<std::size_t>(v)][words_[static_cast<std::size_t>(v)][p]].push_back(static_cast<int>(p) + 1);
}

// The two restrictions of Section 3.2, checked on the words whichever way they came.
bool continuous_schedule::legal() const {
  std::map<std::int64_t, int> left;
  for (const auto& [x, ls] : leaves_) left[x] = static_cast<int>(ls.size());
  --left[receive_only_];
  for (int v = 0; v < static_cast<int>(block_.size()); ++v) {
    if (block_[static_cast<std::size_t>(v)] < 0) continue;
    const auto r = static_cast<std::int64_t>(tree_->children(v).size());
    const auto& w = words_[static_cast<std::size_t>(v)];
    if (static_cast<std::int64_t>(w.size()) != r - 1) return false;
    std::vector<char> seen(static_cast<std::size_t>(r));
    seen[static_cast<std::size_t>(mod(-static_cast<std::int64_t>(tree_->label(v)), r))] = 1;
    for (std::size_t p = 0; p < w.size(); ++p) {
      auto& s = seen[static_cast<std::size_t>(mod(static_cast<std::int64_t>(p) + 1 - w[p], r))];
      if (s) return false;
      s = 1;
      --left[w[p]];
    }
  }
  return std::all_of(left.begin(), left.end(), [](const auto& e) { return e.second == 0; });
}

int continuous_schedule::proc(int v, std::int64_t i) const {
  return block_[static_cast<std::size_t>(v)] +
         static_cast<int>(mod(i, static_cast<std::int64_t>(tree_->children(v).size())));
}

std::vector<int> continuous_schedule::receivers(std::int64_t x, std::int64_t T) const {
  std::vector<int> out;
  for (int v = 0; v < static_cast<int>(block_.size()); ++v) {
    const auto& pos = positions_[static_cast<std::size_t>(v)];
    const auto it = pos.find(x);
    if (it == pos.end()) continue;
    const auto r = static_cast<std::int64_t>(tree_->children(v).size());
    const auto first = out.size();
    for (int p : it->second)
      out.push_back(block_[static_cast<std::size_t>(v)] + static_cast<int>(mod(T - L_ - static_cast<std::int64_t>(tree_->label(v)) - p, r)));
    std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  }
  if (receive_only_ == x) out.push_back(receive_only_proc_);
  return out;
}

int continuous_schedule::holder(int v, std::int64_t i) const {
  if (block_[static_cast<std::size_t>(v)] >= 0) return proc(v, i);
  const auto x = static_cast<std::int64_t>(tree_->label(v));
  const auto& ls = leaves_.at(x);
  const auto m = static_cast<std::size_t>(std::find(ls.begin(), ls.end(), v) - ls.begin());
  const auto who = receivers(x, i + L_ + x);
  if (who.size() != ls.size()) throw std::logic_error("optcast::logp::continuous_schedule: words do not match the leaves");
  return who[m];
}

continuous_schedule::action continuous_schedule::at(int q, std::int64_t t) const {
  action a;
  if (!how_) throw std::logic_error("optcast::logp::continuous_schedule: no block-cyclic assignment");
  if (q == 0) {
    a.send_item = t;
    a.send_to = holder(0, t);
    return a;
  }
  const auto sender_of = [&](int v, std::int64_t i) { return v == 0 ? 0 : proc(tree_->parent(v), i); };
  if (q == receive_only_proc_) {
    const auto i = t - L_ - receive_only_;
    const auto& ls = leaves_.at(receive_only_);
    const auto who = receivers(receive_only_, t);
    const auto m = static_cast<std::size_t>(std::find(who.begin(), who.end(), q) - who.begin());
    a.recv_item = i;
    a.recv_from = sender_of(ls[m], i);
    return a;
  }
  // q's block: the internal node v with block_[v] <= q < block_[v] + r.
  int v = -1;
  for (int u = 0; u < static_cast<int>(block_.size()); ++u) {
    const int b = block_[static_cast<std::size_t>(u)];
    if (b >= 0 && b <= q && q < b + static_cast<int>(tree_->children(u).size())) {
      v = u;
      break;
    }
  }
  const auto r = static_cast<std::int64_t>(tree_->children(v).size());
  const auto d = static_cast<std::int64_t>(tree_->label(v));
  const auto j = static_cast<std::int64_t>(q - block_[static_cast<std::size_t>(v)]);
  const auto p = mod(t - L_ - d - j, r);
  if (p == 0) {
    a.recv_item = t - L_ - d;
    a.recv_from = sender_of(v, a.recv_item);
  } else {
    const auto x = words_[static_cast<std::size_t>(v)][static_cast<std::size_t>(p - 1)];
    const auto& ls = leaves_.at(x);
    const auto who = receivers(x, t);
    const auto m = static_cast<std::size_t>(std::find(who.begin(), who.end(), q) - who.begin());
    a.recv_item = t - L_ - x;
    a.recv_from = sender_of(ls[m], a.recv_item);
  }
  // The send: child c = p of v's item t - L - d - c (q's active items are j mod r).
  const auto c = p;
  a.send_item = t - L_ - d - c;
  a.send_to = holder(tree_->children(v)[static_cast<std::size_t>(c)], a.send_item);
  return a;
}

std::shared_ptr<const continuous_schedule> continuous_for(int P, int L) {
  static detail::plan_cache<std::pair<int, int>, continuous_schedule> cache;
  return cache.get({P, L}, [&] { return continuous_schedule(P, L); });
}

kitem_plan kitem_continuous(const continuous_schedule& s, int k) {
  if (!s.block_cyclic()) throw std::invalid_argument("optcast::logp::kitem_continuous: the schedule has no block-cyclic assignment");
  if (k < 1) throw std::invalid_argument("optcast::logp::kitem_continuous: need k >= 1");
  kitem_plan plan;
  plan.P = s.P();
  plan.L = s.L();
  plan.k = k;
  plan.sends.resize(static_cast<std::size_t>(s.P()));
  plan.receives.resize(static_cast<std::size_t>(s.P()));
  const auto last = static_cast<std::int64_t>(k) - 1 + s.delay();
  for (int q = 0; q < s.P(); ++q)
    for (std::int64_t t = 0; t <= last; ++t) {
      const auto a = s.at(q, t);
      if (a.send_item >= 0 && a.send_item < k) plan.sends[static_cast<std::size_t>(q)].push_back({static_cast<int>(a.send_item), a.send_to, t});
      if (a.recv_item >= 0 && a.recv_item < k) {
        plan.receives[static_cast<std::size_t>(q)].push_back({static_cast<int>(a.recv_item), a.recv_from, t});
        plan.finish = std::max(plan.finish, t);
      }
    }
  return plan;
}

}  // namespace optcast::logp
