// Karp et al., Section 2: the universal optimal broadcast tree, as a pure component
// against the paper's figures and Theorem 2.2, and as a broadcast whose simulated
// LogP time equals B(P) exactly; the staggered all-to-all broadcasts (Section 3.1), the
// combining broadcast (4.2) and summation (5). The k-item broadcasts: kitem_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "optcast/collectives.hpp"
#include "karp/plans.hpp"
#include "optcast/net/sim.hpp"
#include "traff/circulant.hpp"
#include "mat2.hpp"
#include "worlds.hpp"

using namespace optcast;

TEST_CASE("Figure 1: P = 8, L = 6, g = 4, o = 2", "[logp]") {
  // The root has the item at 0 and sends at 0, 4, 8, 12: its children have it at
  // 0 + L + 2o = 10, 14, 18, 22. The node labelled 10 sends at 10, 14: 20, 24. The node
  // labelled 14 sends at 14: 24. The eight smallest labels: 0 10 14 18 20 22 24 24.
  const logp::broadcast_tree t(8, {6, 2, 4});
  std::vector<double> labels;
  for (int v = 0; v < 8; ++v) labels.push_back(t.label(v));
  CHECK(labels == std::vector<double>{0, 10, 14, 18, 20, 22, 24, 24});
  CHECK(t.finish() == 24);
  CHECK(logp::B(8, {6, 2, 4}) == 24);
  // The root's children are the nodes labelled 10, 14, 18, 22, in that order.
  const auto kids = t.children(0);
  CHECK(std::vector<int>(kids.begin(), kids.end()) == std::vector<int>{1, 2, 3, 5});
  CHECK(t.parent(4) == 1);  // 20 = 10 + 10
  CHECK(logp::P_of(24, {6, 2, 4}) == 8);
  CHECK(logp::P_of(23, {6, 2, 4}) == 6);
  CHECK(logp::P_of(9.99, {6, 2, 4}) == 1);
}

TEST_CASE("B(P) is the P least labels taken one at a time, ties to the lesser parent, for any parameters", "[logp]") {
  // The definition as a heap of candidates (a node's next child and its first child),
  // against the tree the library builds. The fractional parameters make labels that are
  // equal in exact arithmetic differ by an ulp, where the order of two sums decides.
  struct cand {
    double label;
    int parent, index;
    bool operator>(const cand& o) const { return std::tie(label, parent, index) > std::tie(o.label, o.parent, o.index); }
  };
  std::string failure;
  for (const logp::params m : {logp::params{6, 2, 4}, {1, 0, 1}, {0.5, 0, 1}, {0.0938595867742349, 0, 0.8933170425576351},
                               {0.7, 0.3, 1.7}, {2.5, 0.5, 0.35}, {10, 0.3, 0.1}, {3, 1, 0.1}})
    for (int P : {1, 2, 3, 8, 100, 1001, 4097}) {
      const logp::broadcast_tree t(P, m);
      std::vector<double> label{0};
      std::vector<int> parent{-1};
      std::priority_queue<cand, std::vector<cand>, std::greater<>> next;
      next.push({m.hop(), 0, 0});
      while (static_cast<int>(label.size()) < P) {
        const cand c = next.top();
        next.pop();
        const int v = static_cast<int>(label.size());
        label.push_back(c.label);
        parent.push_back(c.parent);
        next.push({c.label + m.gap(), c.parent, c.index + 1});
        next.push({c.label + m.hop(), v, 0});
      }
      for (int v = 0; v < P && failure.empty(); ++v)
        if (t.label(v) != label[static_cast<std::size_t>(v)] || t.parent(v) != parent[static_cast<std::size_t>(v)])
          failure = "P " + std::to_string(P) + " L " + std::to_string(m.L) + " o " + std::to_string(m.o) + " g " +
                    std::to_string(m.g) + ": node " + std::to_string(v) + " differs";
    }
  CHECK(failure == "");
}

TEST_CASE("Theorem 2.2: in the postal model P(t) is the generalized Fibonacci f_t", "[logp]") {
  for (int L = 1; L <= 6; ++L) {
    std::vector<std::int64_t> f;  // Definition 2.5
    for (int i = 0; i <= 40; ++i) f.push_back(i < L ? 1 : f[static_cast<std::size_t>(i - 1)] + f[static_cast<std::size_t>(i - L)]);
    for (int t = 0; t <= 40; ++t) {
      INFO("L " << L << " t " << t);
      CHECK(logp::P_of(t, {static_cast<double>(L), 0, 1}, std::int64_t{1} << 40) == f[static_cast<std::size_t>(t)]);
    }
    // Fact 2.1 (as ERRATA.md reads it): 1 + sum_{i <= t} f_i = f_{t+L}.
    std::int64_t sum = 1;
    for (int t = 0; t + L <= 40; ++t) {
      sum += f[static_cast<std::size_t>(t)];
      CHECK(sum == f[static_cast<std::size_t>(t + L)]);
    }
  }
  // One port, unit latency: the binomial tree, ceil(log2 P).
  for (int P = 1; P <= 300; ++P) CHECK(logp::B(P, {1, 0, 1}) == circulant::ceil_log2(P));
}

TEST_CASE("the broadcast on B(P) takes exactly B(P; L, o, g) in the simulator", "[logp][sim]") {
  struct grid_point {
    double L, o, g;
  };
  // Figure 1; postal; o > g; g > L + 2o; g = o; L = 0; fractional.
  const grid_point grid[] = {{6, 2, 4}, {1, 0, 1}, {3, 0, 1}, {10, 1, 2}, {2, 3, 1},
                             {1, 1, 10}, {5, 2, 2}, {0, 1, 1}, {2.5, 0.5, 1.25}};
  for (const auto& gp : grid) {
    for (int P = 1; P <= 500; ++P) {
      INFO("L " << gp.L << " o " << gp.o << " g " << gp.g << " P " << P);
      const logp::params m{gp.L, gp.o, gp.g};
      const auto tree = logp::tree_for(P, m);
      sim::world w(P, sim::model::logp(gp.L, gp.o, gp.g));
      auto comms = optcast::communicators_of(w);
      std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(P), std::vector<std::byte>(4));
      const int root = P / 3;
      bufs[static_cast<std::size_t>(root)].assign(4, std::byte{0x5a});
      auto res = optcast::run_all(comms, [&](communicator& c) {
        return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root, {.alg = algorithm::logp_tree});
      });
      const auto rep = w.take_report();
      bool ok = true;
      for (auto& r : res) ok = ok && r;
      REQUIRE(ok);
      REQUIRE(rep.finish_time == tree->finish());
      // Every rank has the item exactly at its label: a leaf finishes then.
      for (int v = 1; v < P; ++v)
        if (tree->children(v).empty()) REQUIRE(rep.ranks[static_cast<std::size_t>((v + root) % P)].finish == tree->label(v));
      for (auto& b : bufs) REQUIRE(b == bufs[static_cast<std::size_t>(root)]);
      CHECK(rep.messages == static_cast<std::uint64_t>(P - 1));
    }
  }
}

TEST_CASE("logp_tree broadcast delivers every byte on the local and TCP fabrics", "[logp][local][tcp]") {
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  for (int p : {1, 2, 5, 17}) {
    auto w = testing::make_world(kind, p);
    for (int root : {0, p - 1}) {
      INFO(kind << " p " << p << " root " << root);
      std::vector<std::vector<std::uint32_t>> bufs(static_cast<std::size_t>(p), std::vector<std::uint32_t>(70001));
      for (std::size_t i = 0; i < bufs[0].size(); ++i) bufs[static_cast<std::size_t>(root)][i] = static_cast<std::uint32_t>(i * 2654435761u);
      auto res = w->run_all([&](communicator& c) {
        return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root,
                         {.alg = algorithm::logp_tree, .model = loggp_params{6, 2, 4, 0}});
      });
      for (auto& r : res) REQUIRE(r);
      for (auto& b : bufs) CHECK(b == bufs[static_cast<std::size_t>(root)]);
    }
  }
}

TEST_CASE("impossible LogP parameters are refused", "[logp]") {
  CHECK_THROWS_AS(logp::broadcast_tree(4, {0, 0, 1}), std::invalid_argument);
  CHECK_THROWS_AS(logp::broadcast_tree(0, {1, 0, 1}), std::invalid_argument);
  testing::local_test_world w(3);
  std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(8));
  auto res = w.run_all([&](communicator& c) {
    return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0,
                     {.alg = algorithm::logp_tree, .model = loggp_params{0, 0, 0, 0}});
  });
  for (std::size_t r = 0; r < 3; ++r) {
    REQUIRE_FALSE(res[r]);
    CHECK(res[r].error() == errc::invalid_argument);
    CHECK(w.comms()[r].last_error().find("L + 2o > 0") != std::string::npos);
  }
}

TEST_CASE("staggered all-to-all broadcast: L + 2o + g (k (P - 1) - 1) in the simulator", "[logp][sim]") {
  struct grid_point {
    double L, o, g;
  };
  // g > o, postal, g = o, and o > g (where sends, and so receives, are o apart).
  const grid_point grid[] = {{6, 2, 4}, {1, 0, 1}, {3, 1, 1}, {10, 1, 2}, {4, 3, 1}};
  for (const auto& gp : grid)
    for (int k : {1, 2, 3})
      for (int P = 2; P <= 40; ++P) {
        INFO("L " << gp.L << " o " << gp.o << " g " << gp.g << " k " << k << " P " << P);
        sim::world w(P, sim::model::logp(gp.L, gp.o, gp.g));
        auto comms = optcast::communicators_of(w);
        std::vector<std::vector<std::int32_t>> in(static_cast<std::size_t>(P), std::vector<std::int32_t>(static_cast<std::size_t>(k))),
            out(static_cast<std::size_t>(P), std::vector<std::int32_t>(static_cast<std::size_t>(k * P)));
        std::vector<std::int32_t> want;
        for (int r = 0; r < P; ++r)
          for (int i = 0; i < k; ++i) want.push_back(in[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] = r * 100 + i);
        auto res = optcast::run_all(comms, [&](communicator& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          return allgather(c, std::span<const std::int32_t>(in[r]), std::span(out[r]), {.alg = algorithm::staggered, .blocks = k});
        });
        for (auto& r : res) REQUIRE(r);
        const double gap = std::max(gp.g, gp.o);
        CHECK(w.take_report().finish_time == gp.L + 2 * gp.o + gap * (k * (P - 1) - 1));
        for (auto& v : out) CHECK(v == want);
      }
}

TEST_CASE("staggered all-to-all personalized: the same time, every item to its own rank", "[logp][sim]") {
  struct grid_point {
    double L, o, g;
  };
  const grid_point grid[] = {{6, 2, 4}, {1, 0, 1}, {10, 1, 2}, {4, 3, 1}};
  for (const auto& gp : grid)
    for (int k : {1, 2, 4})
      for (int P = 1; P <= 33; ++P) {
        INFO("L " << gp.L << " o " << gp.o << " g " << gp.g << " k " << k << " P " << P);
        const auto UP = static_cast<std::size_t>(P);
        const std::size_t count = 5;  // elements per rank pair, in k items
        sim::world w(P, sim::model::logp(gp.L, gp.o, gp.g));
        auto comms = optcast::communicators_of(w);
        std::vector<std::vector<std::int32_t>> in(UP), out(UP);
        for (std::size_t r = 0; r < UP; ++r) {
          for (std::size_t to = 0; to < UP; ++to)
            for (std::size_t i = 0; i < count; ++i) in[r].push_back(static_cast<std::int32_t>(r * 10000 + to * 10 + i));
          out[r].assign(UP * count, -1);
        }
        auto res = optcast::run_all(comms, [&](communicator& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          return alltoall(c, std::span<const std::int32_t>(in[r]), std::span(out[r]), {.blocks = k});
        });
        for (auto& r : res) REQUIRE(r);
        const double gap = std::max(gp.g, gp.o);
        CHECK(w.take_report().finish_time == (P == 1 ? 0 : gp.L + 2 * gp.o + gap * (k * (P - 1) - 1)));
        for (std::size_t r = 0; r < UP; ++r)
          for (std::size_t from = 0; from < UP; ++from)
            for (std::size_t i = 0; i < count; ++i)
              if (out[r][from * count + i] != static_cast<std::int32_t>(from * 10000 + r * 10 + i)) {
                FAIL_CHECK("rank " << r << " element " << i << " from " << from);
                from = UP;
                break;
              }
      }
}

TEST_CASE("combining broadcast plans: T = B(P) for P = f_T, at most B(P) + 2L - 1 otherwise", "[logp]") {
  for (int L = 1; L <= 8; ++L) {
    std::vector<std::int64_t> f;  // Definition 2.5
    for (int i = 0; i < 60; ++i) f.push_back(i < L ? 1 : f[static_cast<std::size_t>(i - 1)] + f[static_cast<std::size_t>(i - L)]);
    int at_B = 0;
    for (int P = 1; P <= 400; ++P) {
      INFO("L " << L << " P " << P);
      const auto plan = logp::combining_schedule(P, L);
      const int b = static_cast<int>(logp::B(P, {static_cast<double>(L), 0, 1}));
      const bool fib = std::find(f.begin(), f.end(), P) != f.end();
      if (fib) CHECK(plan.T == b);
      CHECK(plan.T >= b);
      CHECK(plan.T <= b + 2 * L - 1);
      at_B += plan.T == b;
      // The windows grow by what arrives, from a step at least L back, and end at
      // exactly the ranks on the schedule: nothing counted twice, nothing left out.
      REQUIRE(plan.window.size() == plan.from.size());
      CHECK(plan.window[0] == 1);
      for (std::size_t j = 1; j < plan.window.size(); ++j) {
        const int t = plan.from[j];
        if (t >= 0) CHECK(t <= static_cast<int>(j) - L);
        CHECK(plan.window[j] == plan.window[j - 1] + (t >= 0 ? plan.window[static_cast<std::size_t>(t)] : 0));
      }
      CHECK(plan.window.back() == plan.inner);
      if (plan.how == logp::combining_plan::kind::fold) {
        CHECK(std::find(f.begin(), f.end(), plan.inner) != f.end());
        CHECK(2 * plan.inner > P);
        CHECK(plan.T == plan.start + static_cast<int>(plan.window.size()) - 1 + L);
      } else {
        CHECK(plan.inner == P);
        CHECK(plan.T == static_cast<int>(plan.window.size()) - 1);
      }
    }
    // The search reaches B(P) for most P once L >= 2 (268 of 400 for L = 2, more for
    // larger L); L = 1 needs star addition chains, which rarely have ceil(log2 P) steps.
    if (L >= 2) CHECK(at_B >= 250);
  }
}

TEST_CASE("combining broadcast: the plan's time in the postal model, every rank the exact sum", "[logp][sim]") {
  for (int L = 1; L <= 8; ++L)
    for (int P = 1; P <= 130; ++P) {
      INFO("L " << L << " P " << P);
      sim::world w(P, sim::model::postal(L));
      auto comms = optcast::communicators_of(w);
      // Weighted so that a value counted twice or missed changes the sum.
      std::vector<std::vector<std::int64_t>> v(static_cast<std::size_t>(P));
      auto res = optcast::run_all(comms, [&](communicator& c) {
        auto& mine = v[static_cast<std::size_t>(c.rank())];
        mine = {c.rank() + 1, std::int64_t{1} << (c.rank() % 40), 7};
        return allreduce(c, std::span<const std::int64_t>(mine), std::span(mine), ops::sum, {.alg = algorithm::combining});
      });
      for (auto& r : res) REQUIRE(r);
      std::vector<std::int64_t> want{static_cast<std::int64_t>(P) * (P + 1) / 2, 0, 7 * static_cast<std::int64_t>(P)};
      for (int r = 0; r < P; ++r) want[1] += std::int64_t{1} << (r % 40);
      for (auto& x : v) CHECK(x == want);
      const auto rep = w.take_report();
      CHECK(rep.finish_time == logp::combining_for(P, L)->T);
      CHECK(rep.unreceived == 0);
    }
}

namespace {

using testing::mat2;
using testing::mul;

mat2 operand(std::int64_t i) {
  const auto u = static_cast<std::uint32_t>(i);
  return {u * 3 + 1, u ^ 5, u + 7, u * u + 2};
}

}  // namespace

TEST_CASE("Figure 6: t = 28, P = 8, L = 5, g = 4, o = 2 sums 79 operands", "[logp]") {
  // The pattern is Figure 1's tree (L + 1 = 6, o = 2, g = 4) reversed: labels 0 10 14
  // 18 20 22 24 24 send at 28 18 14 10 8 6 4 4. The root receives 4 sums and keeps
  // 28 - 4 (o + 1) + 1 = 17 operands; the node labelled 10 receives 2: 18 - 6 + 1 = 13;
  // the one labelled 14 receives 1: 14 - 3 + 1 = 12; the leaves S + 1: 11 9 7 5 5.
  // 17 + 13 + 12 + 11 + 9 + 7 + 5 + 5 = 79 = (28 + 18 + 14 + 10 + 8 + 6 + 4 + 4) - o (P - 1) + 1.
  CHECK(logp::summation_capacity(28, 8, {5, 2, 4}) == 79);
  CHECK(logp::summation_capacity(27, 8, {5, 2, 4}) < 79);
  const auto plan = logp::summation_schedule(79, 8, {5, 2, 4});
  CHECK(plan.t == 28);
  REQUIRE(plan.nodes.size() == 8);
  std::vector<std::int64_t> own;
  for (const auto& nd : plan.nodes) {
    std::int64_t k = 0;
    for (const auto& s : nd.local) k += s.count;
    own.push_back(k);
  }
  CHECK(own == std::vector<std::int64_t>{17, 13, 12, 11, 9, 7, 5, 5});
  CHECK(logp::summation_schedule(80, 8, {5, 2, 4}).t == 29);
}

TEST_CASE("summation plans: Lemma 5.1's count, least t, every operand once in order", "[logp]") {
  const logp::params grid[] = {{5, 2, 4}, {1, 0, 1}, {3, 1, 1}, {6, 0, 2}, {2, 3, 1}};
  for (const auto& m : grid)
    for (int P : {1, 2, 3, 8, 33, 100})
      for (std::int64_t n : {1, 2, 3, 10, 77, 1000, 123457}) {
        INFO("L " << m.L << " o " << m.o << " g " << m.g << " P " << P << " n " << n);
        const auto plan = logp::summation_schedule(n, P, m);
        // Lemma 5.1 over the nodes taking part: n(t) = sum S_v - o (P' - 1) + 1.
        double sum_s = 0;
        for (const auto& nd : plan.nodes) sum_s += nd.send;
        const auto used = static_cast<double>(plan.nodes.size());
        CHECK(plan.capacity == static_cast<std::int64_t>(sum_s - plan.m.o * (used - 1) + 1));
        CHECK(plan.capacity >= n);
        CHECK(logp::summation_capacity(plan.t, P, m) == plan.capacity);
        if (plan.t > 0) CHECK(logp::summation_capacity(plan.t - 1, P, m) < n);
        // The ranges tile 0 .. n-1, each node's subtree contiguous.
        std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
        for (const auto& nd : plan.nodes)
          for (const auto& s : nd.local)
            if (s.count) ranges.emplace_back(s.first, s.count);
        std::sort(ranges.begin(), ranges.end());
        std::int64_t next = 0;
        for (const auto& [first, count] : ranges) {
          CHECK(first == next);
          next = first + count;
        }
        CHECK(next == n);
      }
}

TEST_CASE("summation in the simulator: the plan's time, the ordered product", "[logp][sim]") {
  const logp::params grid[] = {{5, 2, 4}, {1, 0, 1}, {3, 1, 1}, {6, 0, 2}, {2, 3, 1}};
  for (const auto& m : grid)
    for (int P : {1, 2, 3, 5, 8, 13, 40})
      for (std::int64_t n : {1, 2, 5, 64, 999}) {
        INFO("L " << m.L << " o " << m.o << " g " << m.g << " P " << P << " n " << n);
        sim::world w(P, sim::model::logp(m.L, m.o, m.g));
        auto comms = optcast::communicators_of(w);
        const int root = P / 2;
        std::vector<mat2> got(static_cast<std::size_t>(P));
        const auto prod = reduction<mat2>::custom([](const mat2& x, const mat2& y) { return mul(x, y); }, non_commutative);
        auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
          auto r = co_await summation<mat2>(c, n, operand, prod, root);
          if (!r) co_return fail(r.error());
          got[static_cast<std::size_t>(c.rank())] = *r;
          co_return result<void>{};
        });
        for (auto& r : res) REQUIRE(r);
        mat2 want = operand(0);
        for (std::int64_t i = 1; i < n; ++i) want = mul(want, operand(i));
        CHECK(got[static_cast<std::size_t>(root)] == want);
        const auto plan = logp::summation_schedule(n, P, m);
        CHECK(w.take_report().finish_time == plan.t);
      }
}
