// Bruck, Cypher and Ho, Section 3: generalized Fibonacci trees, their sizes against the
// recursion and Theorems 3.7 and 3.9, base-x labelings and treetops.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "bruck_cypher_ho/fibonacci.hpp"

using namespace optcast;

TEST_CASE("Figures 1 and 2: FT_2(6) and FT_3(6) have 25 nodes, labels 0 to 6", "[fibonacci]") {
  // F_2: 1, 1, 3, 5, 9, 15, 25 (1 + the two before); F_3: 1, 1, 1, 4, 7, 13, 25.
  for (int d : {2, 3}) {
    const fibonacci::tree t(d, 6);
    CHECK(t.size() == 25);
    CHECK(fibonacci::F(d, 6) == 25);
    CHECK(t.label(0) == 0);
    CHECK(t.max_label() == 6);
  }
  CHECK(fibonacci::F(2, 4) == 9);
  CHECK(fibonacci::F(3, 4) == 7);
}

TEST_CASE("F_d(t) is the size of FT_d(t), and the base-x labeling is a schedule", "[fibonacci]") {
  for (int d = 2; d <= 7; ++d)
    for (int t = 0; t <= 18; ++t) {
      INFO("d " << d << " t " << t);
      const std::int64_t x = t % 3;
      const fibonacci::tree tr(d, t, x);
      REQUIRE(tr.size() == fibonacci::F(d, t));
      // The recursion, summed by hand: 1 below d, else 1 + the d before.
      std::int64_t want = 1;
      if (t >= d)
        for (int i = 1; i <= d; ++i) want += fibonacci::F(d, t - i);
      CHECK(fibonacci::F(d, t) == want);
      CHECK(tr.label(0) == x);
      // The paper's note after Definition 3.5 says t + x; that holds from t = d on (below
      // d the tree is its root alone, labelled x).
      CHECK(tr.max_label() == (t >= d ? t + x : x));
      for (int v = 0; v < tr.size(); ++v) {
        const auto kids = tr.children(v);
        CHECK((kids.empty() || kids.size() == static_cast<std::size_t>(d)));  // full d-ary
        std::set<std::int64_t> residues;
        for (std::size_t i = 0; i < kids.size(); ++i) {
          CHECK(tr.parent(kids[i]) == v);
          CHECK(tr.label(kids[i]) == tr.label(v) + static_cast<std::int64_t>(i) + 1);
          residues.insert(tr.label(kids[i]) % d);
        }
        CHECK(residues.size() == kids.size());  // distinct mod d: a packet every d rounds
      }
    }
}

TEST_CASE("Theorem 3.7: F_d(t) >= (2 - 2^(1-d))^(t-d-4) for t >= d + 2", "[fibonacci]") {
  const std::int64_t cap = std::int64_t{1} << 62;
  for (int d = 2; d <= 12; ++d)
    for (int t = d + 2; t <= 400; ++t) {
      const auto F = fibonacci::F(d, t, cap);
      if (F == cap) break;
      const long double bound = std::pow(2.0L - std::pow(2.0L, 1 - d), t - d - 4);
      INFO("d " << d << " t " << t << " F " << F);
      CHECK(static_cast<long double>(F) >= bound);
    }
}

TEST_CASE("f_d(n) is the least t with F_d(t) >= n, within Theorem 3.9's bound", "[fibonacci]") {
  std::string failure;
  for (int d = 2; d <= 10 && failure.empty(); ++d) {
    std::vector<std::int64_t> ns;
    for (std::int64_t n = 1; n <= 20000; ++n) ns.push_back(n);
    for (std::int64_t n = 20011; n < (std::int64_t{1} << 60); n = n * 3 + 7) ns.push_back(n);
    for (auto n : ns) {
      const int t = fibonacci::f(d, n);
      const double lg = std::log2(static_cast<double>(n));
      const bool least = fibonacci::F(d, t) >= n && (t == 0 || fibonacci::F(d, t - 1) < n);
      const bool within = t <= lg + 3 * lg / (std::pow(2.0, d) - 3) + d + 5;
      if (!least || !within) {
        failure = "d " + std::to_string(d) + " n " + std::to_string(n) + " f " + std::to_string(t) + (least ? " above the bound" : " not the least");
        break;
      }
    }
  }
  CHECK(failure == "");
}

TEST_CASE("treetops of FT_d(t): full, s nodes, the labels they had", "[fibonacci]") {
  for (int d = 3; d <= 7; d += 2)
    for (std::int64_t s = 1; s <= 400; s += d) {
      INFO("d " << d << " s " << s);
      const int t = fibonacci::f(d, s);
      const fibonacci::tree top(d, t, 0, s);
      REQUIRE(top.size() == s);
      CHECK(top.max_label() <= t);
      for (int v = 0; v < top.size(); ++v) {
        const auto kids = top.children(v);
        CHECK((kids.empty() || kids.size() == static_cast<std::size_t>(d)));
        for (std::size_t i = 0; i < kids.size(); ++i) CHECK(top.label(kids[i]) == top.label(v) + static_cast<std::int64_t>(i) + 1);
      }
    }
  CHECK_THROWS_AS(fibonacci::tree(3, 5, 0, 5), std::invalid_argument);  // 5 is not 1 mod 3
  CHECK_THROWS_AS(fibonacci::tree(3, 5, 0, 14), std::invalid_argument);  // F_3(5) = 13
  CHECK_THROWS_AS(fibonacci::F(1, 3), std::invalid_argument);
  CHECK_THROWS_AS(fibonacci::f(3, 0), std::invalid_argument);
}

// Section 4. packets::verify replays a schedule under the rounds model's rules (one send
// and one receive per processor per round, every packet from someone who has it), so
// these hold for the schedules themselves; multimessage_test runs them on fabrics.

namespace {

std::string check_layout_schedules(int n, int d, std::initializer_list<int> ms, bool every_layout = true) {
  auto lays = fibonacci::layouts(n, d);
  if (!every_layout) lays.resize(1);
  for (const auto& lay : lays)
    for (int m : ms) {
      const auto s = fibonacci::schedule(lay, m);
      const std::string at = "n " + std::to_string(n) + " d " + std::to_string(d) + " s " + std::to_string(lay.s) +
                             " inserted " + std::to_string(lay.inserted) + " array " + std::to_string(lay.array) +
                             " m " + std::to_string(m) + ": ";
      if (s.n != n || lay.processors() != n) return at + "wrong processor count";
      if (auto e = packets::verify(s); !e.empty()) return at + e;
      if (s.rounds != fibonacci::rounds(lay, m))
        return at + "schedule takes " + std::to_string(s.rounds) + " rounds, rounds() says " + std::to_string(fibonacci::rounds(lay, m));
    }
  return {};
}

}  // namespace

TEST_CASE("Section 4 schedules keep the one-port rules, and rounds() is what they take", "[fibonacci]") {
  std::string failure;
  for (int n = 1; n <= 400 && failure.empty(); ++n)
    for (int d : {1, 3, 5, 7})
      if (failure.empty() && (d == 1 || n >= d + 1)) failure = check_layout_schedules(n, d, {1, 2, 5, 32});
  for (int n = 401; n <= 3000 && failure.empty(); n += 37)
    for (int d : {3, 5, 7, 9})
      if (failure.empty()) failure = check_layout_schedules(n, d, {1, 7, 32}, false);
  for (int n : {1000, 2047, 3000})
    if (failure.empty()) failure = check_layout_schedules(n, 3, {200}, false);
  CHECK(failure == "");
}

TEST_CASE("Lemma 4.8: m + f_d((n-1)/d) + 2d - 2 rounds for every n from d^2 + d + 1 to 3000", "[fibonacci]") {
  std::string failure;
  for (int d = 3; d * d + d + 1 <= 3000 && failure.empty(); d += 2)
    for (int n = d * d + d + 1; n <= 3000 && failure.empty(); ++n) {
      // The paper's layout: groups as large as fit, at most d - 1 in the array (4.4),
      // fewer than d^2 inserted (4.3).
      const auto lay = fibonacci::layouts(n, d).front();
      const std::string at = "d " + std::to_string(d) + " n " + std::to_string(n) + ": ";
      if (lay.array > d - 1 || lay.inserted >= d * d || (n - 1 - lay.array) % d != 0) failure = at + "not the paper's layout";
      for (int m : {1, 2, 5, 32, 200})
        if (failure.empty() && fibonacci::rounds(lay, m) > fibonacci::lemma_4_8(n, m, d))
          failure = at + "m " + std::to_string(m) + ": " + std::to_string(fibonacci::rounds(lay, m)) + " rounds > " +
                    std::to_string(fibonacci::lemma_4_8(n, m, d));
      // Lemma 4.7 (n = 1 mod d) holds as stated; Lemma 4.6 (n = d + 1 mod d^2) counts one
      // round fewer than its own construction takes when the broadcaster's first send
      // counts as a round (as Lemma 2.1 counts it): f_d + d rounds pass one packet down
      // the labels 0 .. f_d + d. We reach 4.6's count plus one.
      const int f = fibonacci::f(d, (n - 1 + d - 1) / d);
      if (failure.empty() && n % d == 1 && fibonacci::rounds(lay, 3) > 3 + f + d) failure = at + "above Lemma 4.7";
      if (failure.empty() && n % (d * d) == d + 1 && fibonacci::rounds(lay, 3) > 3 + f + d) failure = at + "above Lemma 4.6 + 1";
    }
  CHECK(failure == "");
  // And the schedules behind them, for the d the choice lands on.
  for (int n = 13; n <= 3000 && failure.empty(); ++n) failure = check_layout_schedules(n, 3, {2}, false);
  for (int n = 31; n <= 3000 && failure.empty(); n += 3) failure = check_layout_schedules(n, 5, {2}, false);
  CHECK(failure == "");
}

TEST_CASE("Theorem 4.9 and the choice of d: never above m + log n + 3 log log n + 15", "[fibonacci][full]") {
  std::string failure;
  for (int n = 2; n <= 3000 && failure.empty(); ++n)
    for (int m : {1, 2, 5, 32, 200}) {
      const auto best = fibonacci::choose(n, m);
      const int r = fibonacci::rounds(best, m);
      const double lg = std::log2(n);
      const int lower = m + static_cast<int>(std::ceil(lg - 1e-9)) - 1;  // Lemma 2.1
      const std::string at = "n " + std::to_string(n) + " m " + std::to_string(m) + ": ";
      if (best.processors() != n) failure = at + "layout of the wrong size";
      if (r > m + lg + 3 * std::log2(std::max(lg, 1.0)) + 15) failure = at + std::to_string(r) + " rounds above Theorem 4.9";
      if (r < lower) failure = at + std::to_string(r) + " rounds below the lower bound";
      // No layout of d = 1, 3, 5, 7 does better than the one chosen.
      for (int d : {1, 3, 5, 7})
        if (d == 1 || n >= d + 1)
          for (const auto& lay : fibonacci::layouts(n, d))
            if (fibonacci::rounds(lay, m) < r) failure = at + "d " + std::to_string(d) + " beats the choice";
      if (!failure.empty()) break;
    }
  CHECK(failure == "");
  // Small n, below the paper's range (documented in fibonacci.hpp): within m + n - 2 (the
  // path), optimal for n <= 3, and from n = 7 on better than the path.
  for (int n = 2; n <= 12; ++n)
    for (int m : {1, 5, 32}) {
      INFO("n " << n << " m " << m);
      const int r = fibonacci::rounds(fibonacci::choose(n, m), m);
      CHECK(r <= m + n - 2);
      if (n <= 3) CHECK(r == m + n - 2);
      if (n >= 7) CHECK(r < m + n - 2);
    }
  CHECK(fibonacci::rounds(fibonacci::choose(1, 5), 5) == 0);
  CHECK_THROWS_AS(fibonacci::layouts(10, 4), std::invalid_argument);
}

TEST_CASE("rounds_at_least bounds every layout's rounds, so choose() skips only layouts that cannot win", "[fibonacci]") {
  std::vector<int> ns;
  for (int n = 2; n <= 400; ++n) ns.push_back(n);
  for (int n : {1000, 4097, 20000, 100000}) ns.push_back(n);
  std::string failure;
  for (int n : ns) {
    int fewest = -1;
    for (int d = 1; d <= 15 && failure.empty(); d += 2) {
      if (d > 1 && n < d + 1) break;
      for (const auto& lay : fibonacci::layouts(n, d)) {
        const int r = fibonacci::rounds(lay, 1), bound = fibonacci::rounds_at_least(lay, 1);
        if (bound > r)
          failure = "n " + std::to_string(n) + " d " + std::to_string(d) + " s " + std::to_string(lay.s) + ": bound " +
                    std::to_string(bound) + " above its " + std::to_string(r) + " rounds";
        if (fewest < 0 || r < fewest) fewest = r;
      }
    }
    if (failure.empty() && fibonacci::rounds(fibonacci::choose(n, 1), 1) != fewest)
      failure = "n " + std::to_string(n) + ": choose() misses the layout of " + std::to_string(fewest) + " rounds";
    if (!failure.empty()) break;
  }
  CHECK(failure == "");
}
