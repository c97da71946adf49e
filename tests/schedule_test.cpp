// The circulant schedules against Träff's paper: its worked examples and Tables 1-3
// entry by entry, its four correctness conditions and a replay of Algorithm 1 for every
// p up to 2048 and a sample of larger p.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <vector>

#include "tools.hpp"
#include "traff/circulant.hpp"
#include "traff/circulant_check.hpp"

using namespace optcast::circulant;

namespace {

struct paper_table {
  int p, q;
  std::vector<int> b;
  std::vector<std::vector<int>> recv, send;  // [k][r]
};

// Table 1 of Träff's paper, p = 17, q = 5.
const paper_table table1_p17{17, 5,
  {5, 0, 1, 2, 0, 3, 0, 1, 2, 4, 0, 1, 2, 0, 3, 0, 1},
  {{-4, 0, -5, -4, -3, -5, -2, -5, -4, -3, -1, -5, -4, -3, -5, -2, -5},
   {-5, -4, 1, -5, -4, -3, -3, -2, -5, -4, -3, -1, -5, -4, -3, -3, -2},
   {-2, -2, -2, 2, 0, -4, -4, -3, -2, -2, -4, -3, -1, -1, -4, -4, -3},
   {-1, -3, -3, -2, -2, 3, 0, 1, 2, -5, -2, -2, -2, -2, -1, -1, -1},
   {-3, -1, -1, -1, -1, -1, -1, -1, -1, 4, 0, 1, 2, 0, 3, 0, 1}},
  {{0, -5, -4, -3, -5, -2, -5, -4, -3, -1, -5, -4, -3, -5, -2, -5, -4},
   {1, -5, -4, -3, -3, -2, -5, -4, -3, -1, -5, -4, -3, -3, -2, -5, -4},
   {2, 0, -4, -4, -3, -2, -2, -4, -3, -1, -1, -4, -4, -3, -2, -2, -2},
   {3, 0, 1, 2, -5, -2, -2, -2, -2, -1, -1, -1, -1, -3, -3, -2, -2},
   {4, 0, 1, 2, 0, 3, 0, 1, -3, -1, -1, -1, -1, -1, -1, -1, -1}}};
// Table 2 of Träff's paper, p = 9, q = 4.
const paper_table table2_p9{9, 4,
  {4, 0, 1, 2, 0, 3, 0, 1, 2},
  {{-2, 0, -4, -3, -2, -4, -1, -4, -3},
   {-3, -2, 1, -4, -3, -2, -2, -1, -4},
   {-1, -3, -2, 2, 0, -3, -3, -2, -1},
   {-4, -1, -1, -1, -1, 3, 0, 1, 2}},
  {{0, -4, -3, -2, -4, -1, -4, -3, -2},
   {1, -4, -3, -2, -2, -1, -4, -3, -2},
   {2, 0, -3, -3, -2, -1, -1, -3, -2},
   {3, 0, 1, 2, -4, -1, -1, -1, -1}}};
// Table 3 of Träff's paper, p = 18, q = 5.
const paper_table table3_p18{18, 5,
  {5, 0, 1, 2, 0, 3, 0, 1, 2, 4, 0, 1, 2, 0, 3, 0, 1, 2},
  {{-3, 0, -5, -4, -3, -5, -2, -5, -4, -3, -1, -5, -4, -3, -5, -2, -5, -4},
   {-4, -3, 1, -5, -4, -3, -3, -2, -5, -4, -3, -1, -5, -4, -3, -3, -2, -5},
   {-2, -4, -3, 2, 0, -4, -4, -3, -2, -2, -4, -3, -1, -1, -4, -4, -3, -2},
   {-5, -2, -2, -2, -2, 3, 0, 1, 2, -5, -2, -2, -2, -2, -1, -1, -1, -1},
   {-1, -1, -1, -1, -1, -1, -1, -1, -1, 4, 0, 1, 2, 0, 3, 0, 1, 2}},
  {{0, -5, -4, -3, -5, -2, -5, -4, -3, -1, -5, -4, -3, -5, -2, -5, -4, -3},
   {1, -5, -4, -3, -3, -2, -5, -4, -3, -1, -5, -4, -3, -3, -2, -5, -4, -3},
   {2, 0, -4, -4, -3, -2, -2, -4, -3, -1, -1, -4, -4, -3, -2, -2, -4, -3},
   {3, 0, 1, 2, -5, -2, -2, -2, -2, -1, -1, -1, -1, -5, -2, -2, -2, -2},
   {4, 0, 1, 2, 0, 3, 0, 1, 2, -1, -1, -1, -1, -1, -1, -1, -1, -1}}};

void check_table(const paper_table& t) {
  const skips s(t.p);
  REQUIRE(s.q() == t.q);
  for (int r = 0; r < t.p; ++r) {
    CAPTURE(t.p, r);
    std::array<int, max_q> recv{}, send{};
    recv_schedule(s, r, recv);
    send_schedule(s, r, send);
    CHECK(baseblock(s, r) == t.b[static_cast<std::size_t>(r)]);
    for (int k = 0; k < t.q; ++k) {
      CAPTURE(k);
      CHECK(recv[static_cast<std::size_t>(k)] == t.recv[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)]);
      CHECK(send[static_cast<std::size_t>(k)] == t.send[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)]);
    }
  }
}

}  // namespace

TEST_CASE("skips halve p rounding up (Algorithm 2)", "[schedule]") {
  // Lemma 3's example in the paper: skip = 1, 2, 3, 6, 11.
  const skips s11(11);
  REQUIRE(s11.q() == 4);
  CHECK(std::vector<std::int64_t>{s11[0], s11[1], s11[2], s11[3], s11[4]} ==
        std::vector<std::int64_t>{1, 2, 3, 6, 11});
  const skips s17(17);
  CHECK(std::vector<std::int64_t>{s17[0], s17[1], s17[2], s17[3], s17[4], s17[5]} ==
        std::vector<std::int64_t>{1, 2, 3, 5, 9, 17});
  const skips s64(64);
  for (int k = 0; k <= 6; ++k) CHECK(s64[k] == (std::int64_t{1} << k));
  CHECK(skips(1).q() == 0);
  CHECK(skips(2).q() == 1);
  CHECK(skips(1 << 30).q() == 30);
  CHECK(skips((1 << 30) + 1).q() == 31);
}

TEST_CASE("baseblocks follow the listing in Lemma 3's proof", "[schedule]") {
  // "0 -> 10 -> 201 -> 301201 -> 40120130120" for p = 11 (the root's entry is q = 4).
  const skips s(11);
  const std::vector<int> want{4, 0, 1, 2, 0, 1, 3, 0, 1, 2, 0};
  for (int r = 0; r < 11; ++r) CHECK(baseblock(s, r) == want[static_cast<std::size_t>(r)]);
}

TEST_CASE("schedules equal the paper's Tables 1-3", "[schedule]") {
  SECTION("Table 2, p = 9") { check_table(table2_p9); }
  SECTION("Table 1, p = 17") { check_table(table1_p17); }
  SECTION("Table 3, p = 18") { check_table(table3_p18); }
}

namespace {

// The library computes in its own order what Algorithms 3-6 compute (DESIGN.md,
// "Computing Träff's schedules"); the transcription as printed is the yardstick.
void same_as_printed(int p, int stride) {
  const skips s(p);
  std::array<int, max_q> recv{}, send{};
  auto one = [&](int r) {
    const auto ours = schedule_for(s, r);
    optcast::tools::reference_schedule(p, r, recv, send);
    const auto q = static_cast<std::size_t>(s.q());
    const bool same = ours.baseblock == baseblock(s, r) && std::equal(recv.begin(), recv.begin() + q, ours.recv.begin()) &&
                      std::equal(send.begin(), send.begin() + q, ours.send.begin()) &&
                      std::all_of(ours.recv.begin() + q, ours.recv.end(), [](int v) { return v == 0; }) &&
                      std::all_of(ours.send.begin() + q, ours.send.end(), [](int v) { return v == 0; });
    if (!same) {
      CAPTURE(p, r, ours.recv, recv, ours.send, send);
      FAIL("the library's schedules differ from the transcription");
    }
  };
  for (int r = 0; r < p; r += stride) one(r);
  for (int r : {1, 2, 3, p - 2, p - 1})  // the walk's edge cases: r = 1 has no deep frame, r = 0 no walk
    if (r > 0 && r < p) one(r);
}

}  // namespace

TEST_CASE("schedules are those of Algorithms 3-6 as printed", "[schedule]") {
  SECTION("every rank of every p <= 1100") {
    for (int p = 1; p <= 1100; ++p) same_as_printed(p, 1);
  }
  SECTION("near powers of two up to 2^20, every 97th rank") {
    for (int k = 11; k <= 20; ++k)
      for (int d : {-3, -1, 0, 1, 5})
        same_as_printed((1 << k) + d, 97);
  }
}

TEST_CASE("the four correctness conditions hold for every p <= 2048", "[schedule]") {
  int worst = 0;
  for (int p = 1; p <= 2048; ++p) {
    const auto rep = check_conditions(p);
    INFO(rep.failure.value_or(""));
    REQUIRE_FALSE(rep.failure);
    worst = std::max(worst, rep.max_send_violations);
  }
  CHECK(worst <= 4);  // Theorem 3
  CHECK(worst >= 1);  // and the violation path is exercised
}

TEST_CASE("the four correctness conditions hold for a sample of large p", "[schedule]") {
  for (int p : {4095, 4096, 4097, 6000, 12289, 65535, 65536, 65537, 100003, 262145, 1048577}) {
    const auto rep = check_conditions(p);
    INFO(rep.failure.value_or(""));
    REQUIRE_FALSE(rep.failure);
  }
}

TEST_CASE("Algorithm 1 replayed round by round for every p <= 2048", "[schedule][full]") {
  for (int n : {1, 2, 3, 7, 16}) {
    for (int p = 1; p <= 2048; ++p) {
      const auto rep = replay_broadcast(p, n);
      INFO(rep.failure.value_or(""));
      REQUIRE_FALSE(rep.failure);
      REQUIRE(rep.rounds == (p == 1 ? 0 : n - 1 + skips(p).q()));
    }
  }
}

TEST_CASE("Algorithm 1 replayed for large p and many blocks", "[schedule]") {
  for (auto [p, n] : {std::pair{100, 1000}, {1000, 64}, {4097, 5}, {65537, 2}, {200003, 1}}) {
    const auto rep = replay_broadcast(p, n);
    INFO(rep.failure.value_or(""));
    REQUIRE_FALSE(rep.failure);
    CHECK(rep.rounds == n - 1 + skips(p).q());
    // Every non-root rank receives every block at least once.
    CHECK(rep.messages >= static_cast<std::int64_t>(p - 1) * n);
  }
}

TEST_CASE("the checker rejects corrupted schedules", "[schedule]") {
  auto t = compute_tables(17);
  REQUIRE_FALSE(check_conditions(t).failure);
  SECTION("a receive block changed") {
    t.recv[5 * 5 + 2] = -1;  // r = 5, k = 2
    CHECK(check_conditions(t).failure);
  }
  SECTION("a send block changed") {
    t.send[9 * 5 + 3] = 2;  // r = 9, k = 3
    CHECK(check_conditions(t).failure);
  }
  SECTION("a sender and its receiver agreeing on a block neither should move") {
    // r = 1 sends to r + skip[1] = 3 in round 1; make both sides agree on block 1, which
    // rank 1 only receives in round 1 itself (condition 4).
    t.send[1 * 5 + 1] = 1;
    t.recv[3 * 5 + 1] = 1;
    CHECK(check_conditions(t).failure);
  }
}
