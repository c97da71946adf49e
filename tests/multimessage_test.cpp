// Multi-message broadcasts with static round schedules: Bruck, Cypher and Ho's
// generalized Fibonacci trees (one port) and Bar-Noy and Ho's k-tree and rotation
// algorithms (k ports). The schedules are checked by packets::verify (the rounds
// model's rules), the bounds against the papers, and the round loop itself in the
// simulator (its rounds model reports any port violation) and, for the bytes, on the
// local and TCP fabrics.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "bruck_cypher_ho/fibonacci.hpp"
#include "bar_noy_ho/multiport.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Runs broadcast `alg` of m blocks among p ranks in the simulator's rounds model with k
// ports; returns "" or what went wrong. `rounds` gets the simulated finish time.
std::string simulate(algorithm alg, int p, int m, int k, int root, int& rounds) {
  sim::world w(p, sim::model::rounds(k));
  auto comms = optcast::communicators_of(w);
  const std::size_t bytes = static_cast<std::size_t>(m) * 3 + 1;  // blocks of 3 and 4 bytes
  std::vector<std::vector<std::uint8_t>> bufs(static_cast<std::size_t>(p), std::vector<std::uint8_t>(bytes));
  for (std::size_t i = 0; i < bytes; ++i) bufs[static_cast<std::size_t>(root)][i] = static_cast<std::uint8_t>(i * 13 + 7);
  auto res = optcast::run_all(comms, [&](communicator& c) {
    return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root, {.alg = alg, .blocks = m});
  });
  const auto rep = w.take_report();
  rounds = static_cast<int>(rep.finish_time);
  const std::string at = std::string(to_string(alg)) + " p " + std::to_string(p) + " m " + std::to_string(m) + " k " +
                         std::to_string(k) + ": ";
  if (rep.error) return at + rep.error_detail;
  for (int r = 0; r < p; ++r) {
    if (!res[static_cast<std::size_t>(r)]) return at + "rank " + std::to_string(r) + " failed: " + res[static_cast<std::size_t>(r)].error().message();
    if (bufs[static_cast<std::size_t>(r)] != bufs[static_cast<std::size_t>(root)]) return at + "rank " + std::to_string(r) + " holds other bytes";
  }
  if (rep.unreceived) return at + "messages sent and never received";
  return {};
}

}  // namespace

TEST_CASE("k-tree: Theorem 6's schedule, every n <= 1000, within Section 3.6's bounds", "[multimessage][full]") {
  std::string failure;
  for (int k : {2, 3, 4, 5})
    for (int n = 1; n <= 1000 && failure.empty(); ++n)
      for (int m : {1, k, 3 * k + 1, 50}) {
        const auto s = multiport::ktree(n, m, k);
        const std::string at = "k " + std::to_string(k) + " n " + std::to_string(n) + " m " + std::to_string(m) + ": ";
        if (auto e = packets::verify(s); !e.empty()) {
          failure = at + e;
          break;
        }
        if (n == 1) continue;
        const int h = multiport::ktree_height(n, k);
        // ceil(m/k) + h - 1 when every tree carries the last round's messages.
        if (m % k == 0 ? s.rounds != ceil_div(m, k) + h - 1 : s.rounds > ceil_div(m, k) + h - 1)
          failure = at + std::to_string(s.rounds) + " rounds, height " + std::to_string(h);
        // Section 3.6: ceil(m/k) + max(2, ceil(log_k(n + 2k))); before the approximation,
        // for n >= k + 2, the stated formula.
        if (s.rounds > ceil_div(m, k) + std::max(2, multiport::ceil_log(k, n + 2 * k))) failure = at + "above ceil(m/k) + max(2, ...)";
        if (n >= k + 2 && s.rounds > multiport::ktree_stated(n, m, k)) failure = at + "above the stated time";
        if (n < k + 2 && h > 3) failure = at + "3.5's trees taller than 3";
        if (s.rounds < multiport::lemma_2(n, m, k)) failure = at + "below Lemma 2";
        if (!failure.empty()) break;
      }
  CHECK(failure == "");
}

TEST_CASE("k-tree: Table 1, extra rounds over Lemma 2 for k = 2, 3, 4 and n = 32, 1024, 32768", "[multimessage]") {
  // The paper's Table 1.
  const int table[3][3] = {{2, 4, 6}, {1, 2, 3}, {1, 1, 2}};
  const int ns[3] = {32, 1024, 32768};
  for (int k = 2; k <= 4; ++k)
    for (int c = 0; c < 3; ++c) {
      const int n = ns[c];
      INFO("k " << k << " n " << n);
      for (int m : {1, k, 7 * k + 1}) {
        // The table follows from the time the paper states before approximating (its
        // difference from Lemma 2 does not depend on m; see ERRATA.md).
        CHECK(multiport::ktree_stated(n, m, k) - multiport::lemma_2(n, m, k) == table[k - 2][c]);
        // The trees built are that tall for k = 3, 4. For k = 2 the three n have k | n - 2
        // (3.3), where no node is added: the stated formula still counts the 2k nodes 3.4
        // may add, one level more than T'_2(n) has (T_2(31) has height 4, not 5).
        const int built = (m % k == 0 ? ceil_div(m, k) + multiport::ktree_height(n, k) - 1 : multiport::ktree(n, m, k).rounds) -
                          multiport::lemma_2(n, m, k);
        CHECK(built == (k == 2 ? table[k - 2][c] - 1 : table[k - 2][c]));
      }
    }
  // The same from simulated runs of the round loop.
  for (int k = 2; k <= 4; ++k)
    for (int c = 0; c < 3; ++c) {
      int rounds = 0;
      REQUIRE(simulate(algorithm::ktree, ns[c], k, k, 0, rounds) == "");
      CHECK(rounds - multiport::lemma_2(ns[c], k, k) == (k == 2 ? table[k - 2][c] - 1 : table[k - 2][c]));
    }
}

TEST_CASE("rotation: Proposition 8's decomposition and the chains", "[multimessage]") {
  for (int k : {2, 3, 4, 5})
    for (int n = 1; n <= 5000; ++n) {
      INFO("k " << k << " n " << n);
      const auto boxes = multiport::decompose(n, k);
      long total = 1;
      int last_d = 1 << 30;
      for (std::size_t i = 0; i < boxes.size(); ++i) {
        const auto& b = boxes[i];
        total += b.size;
        if (b.kind == multiport::box_kind::special) {
          CHECK(b.d < last_d);  // property 3: d strictly decreasing
          last_d = b.d;
          CHECK((b.a >= 1 && b.a <= k));
          CHECK(b.size == b.a * static_cast<long>(std::pow(k + 1, b.d - 1)) + k - b.a);
        } else {
          CHECK(i + 1 == boxes.size());  // property 1: nice or small ends the chain
          if (b.kind == multiport::box_kind::small) CHECK(b.size < 2 * k);
          if (b.kind == multiport::box_kind::nice) CHECK(b.size == static_cast<long>(std::pow(k + 1, b.d)) - 1);
        }
      }
      CHECK(total == n);
      CHECK(static_cast<int>(boxes.size()) <= multiport::ceil_log(k + 1, n) + 1);
      // The chain used is at least as fast as Proposition 8's.
      const auto best = multiport::best_chain(n, k);
      long best_total = 1;
      for (const auto& b : best) best_total += b.size;
      CHECK(best_total == n);
      CHECK(multiport::chain_time(best, k) <= multiport::chain_time(boxes, k));
    }
}

TEST_CASE("rotation: Theorem 10 for every n <= 1000, optimal where Lemma 3 says so", "[multimessage][full]") {
  std::string failure;
  int optimal = 0, lemma3_cases = 0;
  for (int k : {2, 3, 4, 5})
    for (int n = 1; n <= 1000 && failure.empty(); ++n)
      for (int m : {1, k, 3 * k + 1, 50}) {
        const auto s = multiport::rotation(n, m, k);
        const std::string at = "k " + std::to_string(k) + " n " + std::to_string(n) + " m " + std::to_string(m) + ": ";
        if (auto e = packets::verify(s); !e.empty()) {
          failure = at + e;
          break;
        }
        if (n == 1) continue;
        const int theorem10 = ceil_div(m, k) + multiport::ceil_log(k + 1, n);
        if (s.rounds > ceil_div(m, k) + multiport::chain_time(multiport::best_chain(n, k), k)) failure = at + "above Theorem 7's time";
        // Every box of k = 5 has a size divisible by 5 (5a + 5, 35a + 5, 5, 35, ...), so
        // n - 1 = 4 mod 5 leaves a last box of 4 or 9, and neither takes k = 5 messages
        // a round in one round (4 floor(5/3) < 5): one round over Theorem 10 there, for
        // the n whose chain has no slack. Everywhere else Theorem 10 holds.
        const bool exception = k == 5 && n % 5 == 0;
        if (s.rounds > theorem10 + (exception ? 1 : 0)) failure = at + std::to_string(s.rounds) + " rounds > Theorem 10's " + std::to_string(theorem10);
        if (s.rounds < multiport::lemma_3(n, m, k)) failure = at + "below Lemma 3";
        if (multiport::lemma_3(n, m, k) == theorem10 && !exception) {
          ++lemma3_cases;
          if (s.rounds == theorem10) ++optimal;
        }
        if (!failure.empty()) break;
      }
  CHECK(failure == "");
  CHECK(optimal == lemma3_cases);  // where Lemma 3 reaches Theorem 10, the algorithm is optimal
  CHECK(lemma3_cases > 1000);
}

TEST_CASE("the round loop in the simulator: bounds, ports and bytes", "[multimessage][sim][full]") {
  std::string failure;
  int rounds = 0;
  // Fibonacci trees, one port: Lemma 4.8 where it applies, Lemma 2.1 below it.
  // Every n to 3000 with m = 1 and 2; 5 and 32 on every n to 300 and a sample beyond, 200
  // on two (packets::verify has checked every schedule).
  for (int n = 1; n <= 3000; ++n)
    for (int m : {1, 2, 5, 32}) {
      if (m > 2 && n > 300 && n % 97 != 0) continue;
      if (!failure.empty()) break;
      failure = simulate(algorithm::fibonacci, n, m, 1, n / 2, rounds);
      const auto lay = fibonacci::choose(n, m);
      if (failure.empty() && rounds != fibonacci::rounds(lay, m)) failure = "fibonacci n " + std::to_string(n) + ": simulated rounds differ from the schedule";
      for (int d = 3; failure.empty() && d * d + d + 1 <= n; d += 2)
        if (rounds > fibonacci::lemma_4_8(n, m, d)) failure = "fibonacci n " + std::to_string(n) + " above Lemma 4.8, d = " + std::to_string(d);
      if (failure.empty() && n > 1 && rounds < m + multiport::ceil_log(2, n) - 1) failure = "fibonacci n " + std::to_string(n) + " below Lemma 2.1";
    }
  for (int n : {1000, 3000})
    if (failure.empty()) {
      failure = simulate(algorithm::fibonacci, n, 200, 1, 1, rounds);
      if (failure.empty() && rounds > fibonacci::lemma_4_8(n, 200, 3)) failure = "fibonacci m 200 above Lemma 4.8";
    }
  CHECK(failure == "");
  CHECK(failure == "");
}

TEST_CASE("the k-port round loops in the simulator: every n <= 1000", "[multimessage][sim][full]") {
  // Every n with m = 1 and k; 3k + 1 and 50 on every n up to 100 and a sample beyond
  // (packets::verify has checked those schedules for every n).
  std::string failure;
  int rounds = 0;
  for (int k : {2, 3, 4, 5})
    for (int n = 1; n <= 1000; ++n)
      for (int m : {1, k, 3 * k + 1, 50}) {
        if (m > k && n > 100 && n % 41 != 0) continue;
        if (!failure.empty()) break;
        failure = simulate(algorithm::ktree, n, m, k, n - 1, rounds);
        if (failure.empty() && n > 1 && rounds > ceil_div(m, k) + multiport::ktree_height(n, k) - 1) failure = "ktree above Theorem 6";
        if (failure.empty()) failure = simulate(algorithm::rotation, n, m, k, 0, rounds);
        const bool exception = k == 5 && n % 5 == 0;
        if (failure.empty() && n > 1 && rounds > ceil_div(m, k) + multiport::ceil_log(k + 1, n) + (exception ? 1 : 0))
          failure = "rotation k " + std::to_string(k) + " n " + std::to_string(n) + " m " + std::to_string(m) + " above Theorem 10";
      }
  CHECK(failure == "");
}

TEST_CASE("fibonacci, ktree, rotation: every rank the root's bytes on local and TCP", "[multimessage][local][tcp]") {
  struct world_case {
    std::string kind;
    int p, ports;
  };
  const auto wc = GENERATE(world_case{"local", 1, 1}, world_case{"local", 2, 2}, world_case{"local", 13, 1},
                           world_case{"local", 17, 3}, world_case{"local", 40, 2}, world_case{"tcp", 5, 2},
                           world_case{"tcp", 13, 3}, world_case{"tcp", 14, 1});
  INFO(wc.kind << " p " << wc.p << " ports " << wc.ports);
  std::unique_ptr<testing::test_world> w;
  if (wc.kind == "local")
    w = std::make_unique<testing::local_test_world>(wc.p, communicator_options{}, wc.ports);
  else
    w = std::make_unique<testing::tcp_test_world>(wc.p, communicator_options{}, testing::job_options{.ports = wc.ports});
  std::vector<algorithm> algs{algorithm::fibonacci};
  if (wc.ports >= 2) algs.insert(algs.end(), {algorithm::ktree, algorithm::rotation});
  for (auto alg : algs)
    for (std::size_t bytes : {std::size_t{0}, std::size_t{5}, std::size_t{300001}})
      for (int blocks : {1, 7, 40})
        for (int root : {0, wc.p - 1}) {
          INFO(to_string(alg) << " bytes " << bytes << " blocks " << blocks << " root " << root);
          std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(wc.p), std::vector<std::byte>(bytes));
          for (std::size_t i = 0; i < bytes; ++i) bufs[static_cast<std::size_t>(root)][i] = static_cast<std::byte>((i * 131 + 17) >> 3);
          auto res = w->run_all([&](communicator& c) {
            return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root, {.alg = alg, .blocks = blocks});
          });
          for (auto& r : res) REQUIRE(r);
          for (auto& b : bufs) CHECK(b == bufs[static_cast<std::size_t>(root)]);
        }
}

TEST_CASE("k-port algorithms on too few ports are refused with the reason", "[multimessage][local]") {
  testing::local_test_world w(4);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    std::vector<std::byte> buf(100);
    for (auto alg : {algorithm::ktree, algorithm::rotation}) {
      auto r = co_await broadcast(c, std::span(buf), 0, {.alg = alg});
      if (r || r.error() != errc::invalid_argument || c.last_error().find("at least 2 ports") == std::string::npos)
        co_return fail(errc::protocol_violation);
    }
    co_return result<void>{};
  });
  for (auto& r : res) CHECK(r);
  // A communicator asking for more ports than its fabric has.
  testing::local_test_world w2(3, communicator_options{.ports = 4}, 2);
  auto res2 = w2.run_all([&](communicator& c) -> task<result<void>> {
    std::vector<std::byte> buf(10);
    auto r = co_await broadcast(c, std::span(buf), 0, {.alg = algorithm::rotation});
    if (r || c.last_error().find("asks for 4 ports") == std::string::npos) co_return fail(errc::protocol_violation);
    co_return result<void>{};
  });
  for (auto& r : res2) CHECK(r);
  // Held to fewer ports than the fabric has, the k-tree uses k = 2 on a 3-port fabric.
  testing::sim_test_world w3(10, communicator_options{.ports = 2}, sim::model::rounds(3));
  std::vector<std::vector<std::byte>> bufs(10, std::vector<std::byte>(64));
  for (std::size_t i = 0; i < 64; ++i) bufs[0][i] = static_cast<std::byte>(i);
  auto res3 = w3.run_all([&](communicator& c) { return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0, {.alg = algorithm::ktree, .blocks = 8}); });
  for (auto& r : res3) CHECK(r);
  for (auto& b : bufs) CHECK(b == bufs[0]);
  CHECK(w3.world().take_report().finish_time == 4 + multiport::ktree_height(10, 2) - 1);
}
