// Karp et al., Section 2: the universal optimal broadcast tree, as a pure component
// against the paper's figures and Theorem 2.2, and as a broadcast whose simulated
// LogP time equals B(P) exactly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/logp.hpp"
#include "optcast/net/sim.hpp"
#include "optcast/schedule.hpp"
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
      auto comms = w.communicators();
      std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(P), std::vector<std::byte>(4));
      const int root = P / 3;
      bufs[static_cast<std::size_t>(root)].assign(4, std::byte{0x5a});
      auto res = w.run_all(comms, [&](communicator& c) {
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
        auto comms = w.communicators();
        std::vector<std::vector<std::int32_t>> in(static_cast<std::size_t>(P), std::vector<std::int32_t>(static_cast<std::size_t>(k))),
            out(static_cast<std::size_t>(P), std::vector<std::int32_t>(static_cast<std::size_t>(k * P)));
        std::vector<std::int32_t> want;
        for (int r = 0; r < P; ++r)
          for (int i = 0; i < k; ++i) want.push_back(in[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] = r * 100 + i);
        auto res = w.run_all(comms, [&](communicator& c) {
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
        auto comms = w.communicators();
        std::vector<std::vector<std::int32_t>> in(UP), out(UP);
        for (std::size_t r = 0; r < UP; ++r) {
          for (std::size_t to = 0; to < UP; ++to)
            for (std::size_t i = 0; i < count; ++i) in[r].push_back(static_cast<std::int32_t>(r * 10000 + to * 10 + i));
          out[r].assign(UP * count, -1);
        }
        auto res = w.run_all(comms, [&](communicator& c) {
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
      auto comms = w.communicators();
      // Weighted so that a value counted twice or missed changes the sum.
      std::vector<std::vector<std::int64_t>> v(static_cast<std::size_t>(P));
      auto res = w.run_all(comms, [&](communicator& c) {
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
        auto comms = w.communicators();
        const int root = P / 2;
        std::vector<mat2> got(static_cast<std::size_t>(P));
        const auto prod = reduction<mat2>::custom([](const mat2& x, const mat2& y) { return mul(x, y); }, non_commutative);
        auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
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

namespace {

// What breaks the rules of the postal model in a k-item plan ("" if nothing): the
// source sends item i once, at step i; one send and one receive per processor and
// step; every item reaches every processor once, not before it arrives and, when
// `on_arrival`, exactly when it arrives (no buffer); a send forwards an item already in.
std::string kitem_violation(const logp::kitem_plan& plan, bool on_arrival) {
  const int P = plan.P, L = plan.L, k = plan.k;
  if (P > 1) {
    bool single = plan.sends[0].size() == static_cast<std::size_t>(k);
    for (std::size_t i = 0; single && i < plan.sends[0].size(); ++i)
      single = plan.sends[0][i].item == static_cast<int>(i) && plan.sends[0][i].time == static_cast<std::int64_t>(i);
    if (!single) return "the source is not single-sending";
  }
  // Flat tables, (processor, item) -> ...: the check runs on 63,680 plans.
  const auto at = [k](int p, int i) { return static_cast<std::size_t>(p) * static_cast<std::size_t>(k) + static_cast<std::size_t>(i); };
  struct message {
    int from = -1;
    std::int64_t time = 0;
  };
  std::vector<message> to(static_cast<std::size_t>(P) * static_cast<std::size_t>(k));  // the send that gives p item i
  std::vector<char> step_used;
  const auto once_per_step = [&](const auto& list) {
    step_used.clear();
    for (const auto& x : list) {
      const auto t = static_cast<std::size_t>(x.time);
      if (t >= step_used.size()) step_used.resize(t + 1);
      if (step_used[t]) return false;
      step_used[t] = 1;
    }
    return true;
  };
  for (int p = 0; p < P; ++p) {
    const auto& ss = plan.sends[static_cast<std::size_t>(p)];
    if (!once_per_step(ss)) return "rank " + std::to_string(p) + " sends twice in one step";
    for (const auto& s : ss) {
      if (s.peer < 1 || s.peer >= P || s.item < 0 || s.item >= k) return "a send out of range";
      auto& m = to[at(s.peer, s.item)];
      if (m.from >= 0) return "item " + std::to_string(s.item) + " sent twice to rank " + std::to_string(s.peer);
      m = {p, s.time};
    }
  }
  std::vector<std::int64_t> got(static_cast<std::size_t>(P) * static_cast<std::size_t>(k), -1);  // step p has item i
  std::int64_t last = 0;
  for (int p = 1; p < P; ++p) {
    const auto& rs = plan.receives[static_cast<std::size_t>(p)];
    if (!once_per_step(rs)) return "rank " + std::to_string(p) + " receives twice in one step";
    for (const auto& r : rs) {
      if (r.item < 0 || r.item >= k) return "a reception out of range";
      if (got[at(p, r.item)] >= 0) return "rank " + std::to_string(p) + " receives an item twice";
      got[at(p, r.item)] = r.time;
      const auto& m = to[at(p, r.item)];
      if (m.from != r.peer) return "a reception nobody sent";
      if (m.time + L > r.time) return "a reception before its arrival";
      if (on_arrival && m.time + L != r.time) return "a reception after its arrival (buffered)";
      last = std::max(last, r.time);
    }
    if (rs.size() != static_cast<std::size_t>(k)) return "rank " + std::to_string(p) + " misses items";
  }
  for (int p = 1; p < P; ++p)
    for (const auto& s : plan.sends[static_cast<std::size_t>(p)])
      if (got[at(p, s.item)] < 0 || got[at(p, s.item)] > s.time) return "rank " + std::to_string(p) + " forwards what it has not got";
  if (last != plan.finish) return "finish " + std::to_string(plan.finish) + " but the last reception is at " + std::to_string(last);
  return "";
}

}  // namespace

TEST_CASE("buffered k-item plans reach B(P-1) + L + k - 1, every rule of the model kept", "[logp]") {
  std::string failure;
  for (int L = 1; L <= 8 && failure.empty(); ++L)
    for (int P = 1; P <= 200 && failure.empty(); ++P)
      for (int k : {1, 2, 3, 4, 5, 7, 8, 13, 20, 31, 40}) {
        const auto plan = logp::kitem_buffered(P, L, k);
        failure = kitem_violation(plan, false);
        if (failure.empty() && P > 1 && plan.finish != static_cast<std::int64_t>(logp::B(P - 1, {static_cast<double>(L), 0, 1})) + L + k - 1)
          failure = "finish " + std::to_string(plan.finish);
        if (!failure.empty()) {
          failure = "L " + std::to_string(L) + " P " + std::to_string(P) + " k " + std::to_string(k) + ": " + failure;
          break;
        }
      }
  CHECK(failure == "");
}

TEST_CASE("Theorem 3.7: single-sending plans within B(P-1) + 2L + k - 2, every message received as it arrives", "[logp][full]") {
  // Every P <= 200, L <= 8, k <= 40. The plans promise more than the theorem: at most
  // one step above the single-sending lower bound B(P-1) + L + k - 1 (logp.hpp). A plan
  // below that bound would mean a broken checker.
  std::string failure;
  for (int L = 1; L <= 8 && failure.empty(); ++L)
    for (int P = 1; P <= 200 && failure.empty(); ++P)
      for (int k = 1; k <= 40; ++k) {
        const auto plan = logp::kitem_single(P, L, k);
        failure = kitem_violation(plan, true);
        const std::int64_t B = P > 1 ? static_cast<std::int64_t>(logp::B(P - 1, {static_cast<double>(L), 0, 1})) : 0;
        if (failure.empty() && P > 1 && plan.finish > B + 2 * L + k - 2) failure = "finish " + std::to_string(plan.finish) + " above the bound";
        if (failure.empty() && P > 1 && plan.finish > B + L + k) failure = "finish " + std::to_string(plan.finish) + " more than one step above the lower bound";
        if (failure.empty() && P > 1 && plan.finish < B + L + k - 1) failure = "finish " + std::to_string(plan.finish) + " below the lower bound";
        if (!failure.empty()) {
          failure = "L " + std::to_string(L) + " P " + std::to_string(P) + " k " + std::to_string(k) + ": " + failure;
          break;
        }
      }
  CHECK(failure == "");
}

TEST_CASE("single-sending k-item broadcast in the simulator: the plan's time without choosing receivers", "[logp][sim]") {
  // Plain postal: a message waits in the network while its receiver's port is busy and
  // is then received in arrival order. A plan that receives everything as it arrives
  // loses nothing to that, so the simulated time is the plan's.
  for (int L = 1; L <= 8; ++L)
    for (int P = 1; P <= 48; ++P)
      for (int k : {1, 2, 3, 5, 8, 13, 40}) {
        INFO("L " << L << " P " << P << " k " << k);
        sim::world w(P, sim::model::postal(L));
        auto comms = w.communicators();
        const int root = (P * 2) / 3;
        std::vector<std::vector<std::uint8_t>> bufs(static_cast<std::size_t>(P), std::vector<std::uint8_t>(static_cast<std::size_t>(3 * k)));
        for (std::size_t i = 0; i < bufs[0].size(); ++i) bufs[static_cast<std::size_t>(root)][i] = static_cast<std::uint8_t>(i * 7 + 1);
        auto res = w.run_all(comms, [&](communicator& c) {
          return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root, {.alg = algorithm::single_sending, .blocks = k});
        });
        for (auto& r : res) REQUIRE(r);
        for (auto& b : bufs) CHECK(b == bufs[static_cast<std::size_t>(root)]);
        const auto rep = w.take_report();
        CHECK(rep.finish_time == logp::kitem_single(P, L, k).finish);
        if (P > 1) CHECK(rep.finish_time <= logp::B(P - 1, {static_cast<double>(L), 0, 1}) + 2 * L + k - 2);
        CHECK(rep.unreceived == 0);
        CHECK(rep.messages == static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(P - 1));
      }
}

TEST_CASE("buffered k-item broadcast in the simulator: B(P-1) + L + k - 1 with choosing receivers", "[logp][sim]") {
  for (int L = 1; L <= 8; ++L)
    for (int P = 1; P <= 48; ++P)
      for (int k : {1, 2, 3, 5, 8, 13, 40}) {
        INFO("L " << L << " P " << P << " k " << k);
        sim::world w(P, sim::model::postal(L).choosing());
        auto comms = w.communicators();
        const int root = (P * 2) / 3;
        std::vector<std::vector<std::uint8_t>> bufs(static_cast<std::size_t>(P), std::vector<std::uint8_t>(static_cast<std::size_t>(3 * k)));
        for (std::size_t i = 0; i < bufs[0].size(); ++i) bufs[static_cast<std::size_t>(root)][i] = static_cast<std::uint8_t>(i * 7 + 1);
        auto res = w.run_all(comms, [&](communicator& c) {
          return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root, {.alg = algorithm::buffered, .blocks = k});
        });
        for (auto& r : res) REQUIRE(r);
        for (auto& b : bufs) CHECK(b == bufs[static_cast<std::size_t>(root)]);
        const auto rep = w.take_report();
        if (P > 1) CHECK(rep.finish_time == logp::B(P - 1, {static_cast<double>(L), 0, 1}) + L + k - 1);
        CHECK(rep.unreceived == 0);
        CHECK(rep.messages == static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(P - 1));
      }
}

TEST_CASE("continuous broadcast: block-cyclic words where the paper proves them, delay L + B(P-1)", "[logp]") {
  // Theorem 3.3: 3 <= L <= 10 and P - 1 = P(t). The induction builds the words from
  // the small trees up; one small tree of that form has none for even L (L + 3 nodes:
  // the search finds none), which the check below names.
  std::string failure;
  for (int L = 3; L <= 10 && failure.empty(); ++L)
    for (int t = 1;; ++t) {
      const auto N = logp::P_of(t, {static_cast<double>(L), 0, 1});
      if (N > 20000) break;
      if (N < 2 || (L % 2 == 0 && N == L + 3)) continue;
      const logp::continuous_schedule s(static_cast<int>(N) + 1, L);
      if (!s.block_cyclic()) {
        failure = "L " + std::to_string(L) + " P - 1 = P(" + std::to_string(t) + ") = " + std::to_string(N) + ": no words";
        break;
      }
    }
  CHECK(failure == "");
  for (int L = 4; L <= 10; L += 2) CHECK_FALSE(logp::continuous_schedule(L + 4, L).block_cyclic());
}

TEST_CASE("Corollary 3.1: k items of a continuous schedule in L + B(P-1) + k - 1, received as they arrive", "[logp][full]") {
  // Every P <= 120 with words (searched or induced), and the paper's P - 1 = P(t) up
  // to about 400; the plan's rules checked as for Theorem 3.7, the finish exact.
  std::string failure;
  std::map<int, int> with_words;  // L -> how many P <= 120 have words
  for (int L = 1; L <= 10 && failure.empty(); ++L) {
    std::vector<int> Ps;
    for (int P = 2; P <= 120; ++P) Ps.push_back(P);
    for (int t = 1; logp::P_of(t, {static_cast<double>(L), 0, 1}) <= 400; ++t)
      if (const auto N = logp::P_of(t, {static_cast<double>(L), 0, 1}); N >= 120) Ps.push_back(static_cast<int>(N) + 1);
    for (int P : Ps) {
      const logp::continuous_schedule s(P, L);
      if (!s.block_cyclic()) continue;
      if (P <= 120) ++with_words[L];
      for (int k : {1, 5, 40}) {
        const auto plan = logp::kitem_continuous(s, k);
        failure = kitem_violation(plan, true);
        const auto want = L + static_cast<std::int64_t>(logp::B(P - 1, {static_cast<double>(L), 0, 1})) + k - 1;
        if (failure.empty() && plan.finish != want) failure = "finish " + std::to_string(plan.finish) + ", not " + std::to_string(want);
        if (!failure.empty()) {
          failure = "L " + std::to_string(L) + " P " + std::to_string(P) + " k " + std::to_string(k) + " (" + s.how() + "): " + failure;
          break;
        }
      }
      if (!failure.empty()) break;
    }
  }
  CHECK(failure == "");
  // L = 1: only P - 1 a power of two (the hypercube); L = 2: Theorem 3.4 says the delay
  // cannot be L + B(P-1) for infinitely many P, and words are rare; L >= 3: nearly all.
  CHECK(with_words[1] >= 7);
  for (int N = 1; N < 120; N *= 2) CHECK(logp::continuous_schedule(N + 1, 1).block_cyclic());
  for (int L = 3; L <= 10; ++L) CHECK(with_words[L] >= 115);
}
