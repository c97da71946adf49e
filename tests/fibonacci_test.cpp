// Bruck, Cypher and Ho, Section 3: generalized Fibonacci trees, their sizes against the
// recursion and Theorems 3.7 and 3.9, base-x labelings and treetops.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "optcast/fibonacci.hpp"

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
