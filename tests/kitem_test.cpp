// Karp et al., Sections 3.2-3.5: k-item broadcasts. The buffered and single-sending
// plans and the continuous schedule as pure components, held to every rule of the postal
// model and to the paper's times, and as broadcasts in the simulator.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
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
        auto comms = optcast::communicators_of(w);
        const int root = (P * 2) / 3;
        std::vector<std::vector<std::uint8_t>> bufs(static_cast<std::size_t>(P), std::vector<std::uint8_t>(static_cast<std::size_t>(3 * k)));
        for (std::size_t i = 0; i < bufs[0].size(); ++i) bufs[static_cast<std::size_t>(root)][i] = static_cast<std::uint8_t>(i * 7 + 1);
        auto res = optcast::run_all(comms, [&](communicator& c) {
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
        auto comms = optcast::communicators_of(w);
        const int root = (P * 2) / 3;
        std::vector<std::vector<std::uint8_t>> bufs(static_cast<std::size_t>(P), std::vector<std::uint8_t>(static_cast<std::size_t>(3 * k)));
        for (std::size_t i = 0; i < bufs[0].size(); ++i) bufs[static_cast<std::size_t>(root)][i] = static_cast<std::uint8_t>(i * 7 + 1);
        auto res = optcast::run_all(comms, [&](communicator& c) {
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
