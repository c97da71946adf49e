// Karp et al. Sections 3.4-3.5: the k-item broadcast plans, buffered and single-sending.
#include "karp/plans.hpp"
#include "runtime/plan_cache.hpp"

#include "logp_check.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <queue>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace optcast::logp {

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
  // need(q): the items still to reach q, a bit per item, visited oldest first.
  const auto KW = (K + 63) / 64;
  std::vector<std::uint64_t> need_bits(static_cast<std::size_t>(P) * KW);
  const auto need = [&](int q) { return need_bits.data() + static_cast<std::size_t>(q) * KW; };
  // Calls f(i) for q's missing items in order until it returns true; returns that item or -1.
  const auto find_need = [&](int q, auto&& f) -> int {
    const std::uint64_t* b = need(q);
    for (std::size_t w = 0; w < KW; ++w)
      for (auto x = b[w]; x; x &= x - 1)
        if (const int i = static_cast<int>(w * 64) + std::countr_zero(x); f(i)) return i;
    return -1;
  };
  const auto first_need = [&](int q) { return find_need(q, [](int) { return true; }); };
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
        need(q)[static_cast<std::size_t>(i) / 64] |= std::uint64_t{1} << (i % 64);
        ++remaining;
      }
  }
  // The end game, step by step: every free sending port may give any item it holds to
  // a processor whose receiving port is free on arrival. Each step is a maximum
  // matching (augmenting paths) that serves the processors missing the oldest items
  // first, each from the sender that can give it the oldest of them. Sets of
  // processors are bit masks: who holds an item, who can send, who was visited.
  const auto W = (static_cast<std::size_t>(P) + 63) / 64;
  std::vector<std::uint64_t> holders(K * W), holds_any(W), can_send(W), seen(W), taken(W);
  const auto set = [](std::vector<std::uint64_t>& m, std::size_t off, int q) {
    m[off + static_cast<std::size_t>(q >> 6)] |= std::uint64_t{1} << (q & 63);
  };
  const auto is_set = [](const std::vector<std::uint64_t>& m, int q) {
    return (m[static_cast<std::size_t>(q >> 6)] >> (q & 63)) & 1;
  };
  std::vector<int> receivers, by_oldest, owner(static_cast<std::size_t>(P));
  std::vector<std::size_t> start_of(K + 1);
  const auto best = [&](int s, int q, std::int64_t t) {
    int found = -1;
    find_need(q, [&](int i) {
      if (has(s, i) <= t) found = i;
      return found >= 0 || i + L > t;
    });
    return found;
  };
  std::int64_t t = 0;
  // For q's oldest missing item first: a free sender holding it, else one whose
  // receiver can be moved to another sender; then the next item.
  const auto augment = [&](const auto& self, int q) -> bool {
    bool matched = false;
    find_need(q, [&](int i) {
      if (i + L > t) return true;  // nobody holds item i before its root does, at i + L
      const std::uint64_t* h = holders.data() + static_cast<std::size_t>(i) * W;
      for (std::size_t w = 0; w < W; ++w)
        if (const auto x = h[w] & can_send[w] & ~seen[w] & ~taken[w]) {
          const int s = static_cast<int>(w * 64) + std::countr_zero(x);
          set(seen, 0, s);
          set(taken, 0, s);
          owner[static_cast<std::size_t>(s)] = q;
          return matched = true;
        }
      for (std::size_t w = 0; w < W; ++w)
        for (auto x = h[w] & can_send[w] & ~seen[w]; x; x &= x - 1) {
          const int s = static_cast<int>(w * 64) + std::countr_zero(x);
          if (is_set(seen, s)) continue;  // visited by a deeper search meanwhile
          set(seen, 0, s);
          if (self(self, owner[static_cast<std::size_t>(s)])) {
            owner[static_cast<std::size_t>(s)] = q;
            return matched = true;
          }
        }
      return false;
    });
    return matched;
  };
  const std::int64_t limit = plan.finish + 4 * (static_cast<std::int64_t>(k) + bc.label(N - 1) + 2 * L) + 64;
  for (; remaining > 0; ++t) {
    if (t > limit) throw std::logic_error("optcast::logp::kitem_single: the end game does not finish");
    if (static_cast<std::size_t>(t) < arriving.size())
      for (const auto& [q, i] : arriving[static_cast<std::size_t>(t)]) {
        set(holders, static_cast<std::size_t>(i) * W, q);
        set(holds_any, 0, q);
      }
    std::fill(can_send.begin(), can_send.end(), 0);
    receivers.clear();
    for (int q = 1; q < P; ++q) {
      // A processor with nothing to give is no sender (no holders[i] has it either).
      if (is_set(holds_any, q) && !at(out_busy[static_cast<std::size_t>(q)], t)) set(can_send, 0, q);
      if (first_need(q) >= 0 && !at(in_busy[static_cast<std::size_t>(q)], t + L)) receivers.push_back(q);
    }
    // Ordered by their oldest missing item, stably (a counting sort: items are 0 .. k-1).
    std::fill(start_of.begin(), start_of.end(), 0);
    for (int q : receivers) ++start_of[static_cast<std::size_t>(first_need(q)) + 1];
    for (std::size_t i = 1; i <= K; ++i) start_of[i] += start_of[i - 1];
    by_oldest.resize(receivers.size());
    for (int q : receivers) by_oldest[start_of[static_cast<std::size_t>(first_need(q))]++] = q;
    receivers.swap(by_oldest);
    std::fill(taken.begin(), taken.end(), 0);
    // What a failed search visited cannot reach a free sender until a search succeeds
    // (Kuhn): keeping those marks changes no outcome and saves the repeated searches.
    std::fill(seen.begin(), seen.end(), 0);
    // An augmenting path ends at a free sender: once none is left, no receiver can be
    // served, and the rest of the searches would only fail.
    int free_senders = 0;
    for (const auto w : can_send) free_senders += std::popcount(w);
    for (int q : receivers) {
      if (free_senders == 0) break;
      if (augment(augment, q)) {
        --free_senders;
        std::fill(seen.begin(), seen.end(), 0);
      }
    }
    for (int s = 1; s < P; ++s)
      if (is_set(taken, s)) {
        const int q = owner[static_cast<std::size_t>(s)];
        const int i = best(s, q, t);
        transfer(s, q, i, t);
        need(q)[static_cast<std::size_t>(i) / 64] &= ~(std::uint64_t{1} << (i % 64));
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
  static detail::plan_cache<std::tuple<int, int, int>, kitem_plan> cache;
  return cache.get({P, L, k}, [&] { return make(P, L, k); });
}

}  // namespace

std::shared_ptr<const kitem_plan> kitem_buffered_for(int P, int L, int k) {
  return cached([](int p, int l, int n) { return kitem_buffered(p, l, n); }, P, L, k);
}

std::shared_ptr<const kitem_plan> kitem_single_for(int P, int L, int k) {
  return cached([](int p, int l, int n) { return kitem_single(p, l, n); }, P, L, k);
}

}  // namespace optcast::logp
