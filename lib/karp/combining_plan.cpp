// Karp et al. Section 4.2: the combining broadcast (allreduce) plan for any P.
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

std::string_view to_string(combining_plan::kind k) noexcept {
  switch (k) {
    case combining_plan::kind::fibonacci: return "fibonacci";
    case combining_plan::kind::chain: return "chain";
    case combining_plan::kind::fold: return "fold";
  }
  return "?";
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
  static detail::plan_cache<std::pair<int, int>, combining_plan> cache;
  return cache.get({P, L}, [&] { return combining_schedule(P, L); });
}

}  // namespace optcast::logp
