// Sub-communicators: split() and subset() as MPI_Comm_split defines them, their calls
// never matching another communicator's while both are in flight, refusals that reach
// every rank, and ids that are reused and run out cleanly. Every collective and
// algorithm on a sub-communicator: the data tests run on split_test_world too
// (worlds.hpp's "split:" kinds).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "optcast/collectives.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

using sub_t = std::optional<communicator>;

// Every rank's parent rank, gathered over `c`: what its members' order really is.
task<result<std::vector<int>>> gathered_parent_ranks(communicator& c, int parent_rank) {
  std::vector<int> out(static_cast<std::size_t>(c.size()), -1);
  const int mine = parent_rank;
  if (auto r = co_await allgather(c, std::span<const int>(&mine, 1), std::span(out)); !r) co_return fail(r.error());
  co_return out;
}

}  // namespace

TEST_CASE("split: members by color, ranked by key then by parent rank", "[local][tcp][split]") {
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  const int p = 9;
  auto w = testing::make_world(kind, p);
  // Colors 0..2 by r % 3, rank 8 alone in color 7, rank 4 in none; keys with ties.
  auto color = [](int r) { return r == 8 ? 7 : r == 4 ? -1 : r % 3; };
  auto key = [](int r) { return (r * 5) % 3; };
  std::vector<sub_t> subs(p);
  std::vector<std::vector<int>> seen(p);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    auto s = co_await split(c, color(r), key(r));
    if (!s) co_return fail(s.error());
    subs[static_cast<std::size_t>(r)] = std::move(*s);
    auto& sub = subs[static_cast<std::size_t>(r)];
    if (!sub) co_return result<void>{};
    auto got = co_await gathered_parent_ranks(*sub, r);
    if (!got) co_return fail(got.error());
    seen[static_cast<std::size_t>(r)] = *got;
    co_return result<void>{};
  });
  for (int r = 0; r < p; ++r) {
    INFO(kind << " rank " << r);
    REQUIRE(res[static_cast<std::size_t>(r)]);
    const auto& sub = subs[static_cast<std::size_t>(r)];
    if (color(r) < 0) {
      CHECK_FALSE(sub);
      continue;
    }
    REQUIRE(sub);
    std::vector<int> want;  // MPI_Comm_split's order, written out independently
    for (int q = 0; q < p; ++q)
      if (color(q) == color(r)) want.push_back(q);
    std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return key(a) < key(b); });
    CHECK(sub->size() == static_cast<int>(want.size()));
    CHECK(want[static_cast<std::size_t>(sub->rank())] == r);
    CHECK(seen[static_cast<std::size_t>(r)] == want);
    for (int i = 0; i < sub->size(); ++i) CHECK(job_rank(*sub, i) == want[static_cast<std::size_t>(i)]);
    CHECK(sub->id() != 0);
  }
  CHECK(subs[8]->size() == 1);
}

TEST_CASE("calls on a parent, its sub-communicators and theirs run at once and never cross",
          "[local][tcp][fabrics][split]") {
  const std::string kind = GENERATE(from_range(testing::fabric_kinds()));
  INFO(kind);
  const int p = 6;
  auto w = testing::make_world(kind, p);
  const std::size_t n = 3000;
  std::vector<std::vector<std::int64_t>> world_sum(p), half_sum(p), quarter_bcast(p);
  std::vector<std::vector<std::byte>> world_bcast(p), p2p_parent(p), p2p_child(p);
  std::vector<int> half_size(p), quarter_size(p);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    const auto R = static_cast<std::size_t>(r);
    auto half = co_await split(c, r % 2, r);  // evens and odds
    if (!half) co_return fail(half.error());
    auto quarter = co_await split(**half, (*half)->rank() / 2, -(*half)->rank());  // pairs of a half, reversed
    if (!quarter) co_return fail(quarter.error());
    communicator& h = **half;
    communicator& q = **quarter;
    half_size[R] = h.size();
    quarter_size[R] = q.size();
    std::vector<std::int64_t> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int64_t>(i) * (r + 1);
    world_sum[R].assign(n, -1);
    half_sum[R].assign(n, -1);
    quarter_bcast[R].assign(n, r == job_rank(q, 0) ? 4242 : -1);
    world_bcast[R] = r == 0 ? testing::bytes(100000, 5) : std::vector<std::byte>(100000);
    // The same user tag on the parent and on the half, both in flight: each message must
    // land on its own communicator.
    const std::vector<std::byte> to_parent = testing::bytes(64, 100 + r), to_child = testing::bytes(64, 200 + r);
    p2p_parent[R].resize(64);
    p2p_child[R].resize(64);
    const int up = (r + 1) % p, down = (r + p - 1) % p;
    const int hup = (h.rank() + 1) % h.size(), hdown = (h.rank() + h.size() - 1) % h.size();
    std::vector<task<result<void>>> all;
    all.push_back(allreduce(c, std::span<const std::int64_t>(in), std::span(world_sum[R]), ops::sum));
    all.push_back(allreduce(h, std::span<const std::int64_t>(in), std::span(half_sum[R]), ops::sum));
    all.push_back(broadcast(q, std::span(quarter_bcast[R]), 0));
    all.push_back(broadcast(c, std::span(world_bcast[R]), 0, {.alg = algorithm::circulant, .blocks = 4}));
    all.push_back(send(c, up, 7, to_parent));
    all.push_back(send(h, hup, 7, to_child));
    all.push_back(recv(h, hdown, 7, p2p_child[R]));
    all.push_back(recv(c, down, 7, p2p_parent[R]));
    auto results = co_await when_all_tasks(std::move(all));
    for (auto& x : results)
      if (!x) co_return x;
    co_return result<void>{};
  });
  auto sum_of = [&](const std::vector<int>& ranks) {
    std::vector<std::int64_t> s(n, 0);
    for (int r : ranks)
      for (std::size_t i = 0; i < n; ++i) s[i] += static_cast<std::int64_t>(i) * (r + 1);
    return s;
  };
  std::vector<int> everyone(p), evens, odds;
  std::iota(everyone.begin(), everyone.end(), 0);
  for (int r = 0; r < p; ++r) (r % 2 ? odds : evens).push_back(r);
  for (int r = 0; r < p; ++r) {
    const auto R = static_cast<std::size_t>(r);
    INFO("rank " << r);
    REQUIRE(res[R]);
    CHECK(half_size[R] == 3);
    CHECK(quarter_size[R] == ((r / 2) / 2 == 0 ? 2 : 1));  // half ranks 0,1 pair up; 2 is alone
    CHECK(world_sum[R] == sum_of(everyone));
    CHECK(half_sum[R] == sum_of(r % 2 ? odds : evens));
    CHECK(quarter_bcast[R] == std::vector<std::int64_t>(n, 4242));
    CHECK(world_bcast[R] == testing::bytes(100000, 5));
    CHECK(p2p_parent[R] == testing::bytes(64, 100 + (r + p - 1) % p));
    const auto& mine = r % 2 ? odds : evens;
    const auto at = static_cast<std::size_t>(std::find(mine.begin(), mine.end(), r) - mine.begin());
    CHECK(p2p_child[R] == testing::bytes(64, 200 + mine[(at + mine.size() - 1) % mine.size()]));
  }
}

TEST_CASE("subset: the listed ranks in the listed order; a wrong list is refused on every rank",
          "[local][tcp][split]") {
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  INFO(kind);
  const int p = 5;
  auto w = testing::make_world(kind, p);
  const std::vector<int> list{4, 0, 2};
  std::vector<sub_t> subs(p);
  std::vector<std::vector<int>> seen(p);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto s = co_await subset(c, list);
    if (!s) co_return fail(s.error());
    subs[static_cast<std::size_t>(c.rank())] = std::move(*s);
    auto& sub = subs[static_cast<std::size_t>(c.rank())];
    if (!sub) co_return result<void>{};
    auto got = co_await gathered_parent_ranks(*sub, c.rank());
    if (!got) co_return fail(got.error());
    seen[static_cast<std::size_t>(c.rank())] = *got;
    co_return result<void>{};
  });
  for (int r = 0; r < p; ++r) {
    REQUIRE(res[static_cast<std::size_t>(r)]);
    const bool member = std::find(list.begin(), list.end(), r) != list.end();
    REQUIRE(subs[static_cast<std::size_t>(r)].has_value() == member);
    if (member) CHECK(seen[static_cast<std::size_t>(r)] == list);
  }

  SECTION("one rank lists a rank twice, another gives a different list") {
    for (int bad = 0; bad < 2; ++bad) {
      std::vector<std::string> why(p);
      auto refused = w->run_all([&](communicator& c) -> task<result<void>> {
        std::vector<int> mine = list;
        if (c.rank() == 3) mine = bad == 0 ? std::vector<int>{1, 1} : std::vector<int>{0, 2, 4};
        auto s = co_await subset(c, mine);
        why[static_cast<std::size_t>(c.rank())] = c.last_error();
        if (!s) co_return fail(s.error());
        co_return result<void>{};
      });
      for (int r = 0; r < p; ++r) {
        INFO("case " << bad << " rank " << r << ": " << why[static_cast<std::size_t>(r)]);
        REQUIRE_FALSE(refused[static_cast<std::size_t>(r)]);
        CHECK(refused[static_cast<std::size_t>(r)].error() == errc::invalid_argument);
        CHECK(why[static_cast<std::size_t>(r)].find("rank") != std::string::npos);
        CHECK_FALSE(w->comms()[static_cast<std::size_t>(r)].broken());
      }
      if (bad == 0) CHECK(why[3].find("rank 1 is listed twice") != std::string::npos);
    }
    // The parent still works.
    std::vector<std::int32_t> got(p);
    auto after = w->run_all([&](communicator& c) -> task<result<void>> {
      const std::int32_t one = 1;
      std::int32_t sum = 0;
      auto r = co_await allreduce(c, std::span<const std::int32_t>(&one, 1), std::span(&sum, 1), ops::sum);
      got[static_cast<std::size_t>(c.rank())] = sum;
      co_return r;
    });
    for (int r = 0; r < p; ++r) {
      REQUIRE(after[static_cast<std::size_t>(r)]);
      CHECK(got[static_cast<std::size_t>(r)] == p);
    }
  }
}

TEST_CASE("communicator ids: freed ones are reused, and running out is an error", "[local][split]") {
  testing::local_test_world w(2);
  SECTION("3000 sub-communicators made and dropped one after another") {
    std::vector<std::uint32_t> ids;
    auto res = w.run_all([&](communicator& c) -> task<result<void>> {
      for (int i = 0; i < 3000; ++i) {
        auto s = co_await split(c, 0, 0);
        if (!s) co_return fail(s.error());
        if (c.rank() == 0) ids.push_back((*s)->id());
      }
      co_return result<void>{};
    });
    REQUIRE(res[0]);
    REQUIRE(res[1]);
    CHECK(std::all_of(ids.begin(), ids.end(), [](std::uint32_t id) { return id == 1; }));
  }
  SECTION("all held: the last one that fits, then limit_exceeded") {
    std::vector<std::vector<communicator>> held(2);
    std::vector<std::string> why(2);
    auto res = w.run_all([&](communicator& c) -> task<result<void>> {
      for (;;) {
        auto s = co_await split(c, 0, 0);
        if (!s) {
          why[static_cast<std::size_t>(c.rank())] = c.last_error();
          co_return fail(s.error());
        }
        held[static_cast<std::size_t>(c.rank())].push_back(std::move(**s));
      }
    });
    for (int r = 0; r < 2; ++r) {
      REQUIRE_FALSE(res[static_cast<std::size_t>(r)]);
      CHECK(res[static_cast<std::size_t>(r)].error() == errc::limit_exceeded);
      CHECK(held[static_cast<std::size_t>(r)].size() == seq_layout::reserved_id - 1);
      CHECK(why[static_cast<std::size_t>(r)].find("in use") != std::string::npos);
    }
    // Every held one still works, the newest too, and dropping one frees its id.
    std::vector<std::int32_t> got(2);
    res = w.run_all([&](communicator& c) -> task<result<void>> {
      auto& mine = held[static_cast<std::size_t>(c.rank())];
      const std::int32_t v = c.rank() + 1;
      std::int32_t sum = 0;
      if (auto r = co_await allreduce(mine.back(), std::span<const std::int32_t>(&v, 1), std::span(&sum, 1), ops::sum); !r)
        co_return r;
      got[static_cast<std::size_t>(c.rank())] = sum;
      mine.erase(mine.begin() + 100);
      auto s = co_await split(c, 0, 0);
      if (!s) co_return fail(s.error());
      co_return (*s)->id() == 101 ? result<void>{} : fail(errc::protocol_violation);
    });
    CHECK(res[0]);
    CHECK(res[1]);
    CHECK(got == std::vector<std::int32_t>{3, 3});
  }
}

TEST_CASE("two splits at once in one process are refused on every rank, and the first one stands",
          "[local][split]") {
  // On two communicators (on one, two calls at once would be numbered in whichever order
  // they reach it, which no rank can rely on).
  testing::local_test_world w(3);
  std::vector<std::string> why(3);
  std::vector<int> made(3, 0);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    auto other = co_await split(c, 0, 0);
    if (!other) co_return fail(other.error());
    std::vector<task<result<std::optional<communicator>>>> both;
    both.push_back(split(c, 0, 0));
    both.push_back(split(**other, 0, 0));
    auto out = co_await when_all_tasks(std::move(both));
    why[static_cast<std::size_t>(c.rank())] = (*other)->last_error();
    if (!out[0]) co_return fail(out[0].error());
    made[static_cast<std::size_t>(c.rank())] = (*out[0])->size();
    co_return out[1] ? fail(errc::protocol_violation) : result<void>{};
  });
  for (int r = 0; r < 3; ++r) {
    INFO(why[static_cast<std::size_t>(r)]);
    const std::string outcome = res[static_cast<std::size_t>(r)] ? "ok" : res[static_cast<std::size_t>(r)].error().message();
    INFO(outcome);
    CHECK(res[static_cast<std::size_t>(r)]);
    CHECK(made[static_cast<std::size_t>(r)] == 3);
    CHECK(why[static_cast<std::size_t>(r)].find("one at a time") != std::string::npos);
  }
}

TEST_CASE("a failure on a sub-communicator breaks its parent, on every rank", "[local][tcp][split]") {
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  INFO(kind);
  auto w = testing::make_world(kind, 4);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto s = co_await split(c, 0, 0);
    if (!s) co_return fail(s.error());
    // Rank 3 broadcasts 8 bytes where the others expect 16: a call mismatch.
    std::vector<std::byte> buf(c.rank() == 3 ? 8 : 16);
    co_return co_await broadcast(**s, std::span(buf), 0);
  });
  CHECK(w->settle([](communicator& c) { return c.broken(); }, std::chrono::seconds(10)));
  CHECK_FALSE(res[3]);  // the root's own part may have finished before anyone noticed
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(w->comms()[static_cast<std::size_t>(r)].broken());
  }
}

TEST_CASE("recv_any on a sub-communicator names the sender by its rank there, and takes no parent message",
          "[local][tcp][split]") {
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  INFO(kind);
  const int p = 6;
  auto w = testing::make_world(kind, p);
  // Two halves by parity, members in reverse parent order, so that a sub rank differs
  // from its parent rank and from its job rank.
  std::vector<std::vector<std::pair<int, int>>> got(p);  // at each sub root: (sub rank named, payload)
  std::vector<int> parent_got(p, -1);
  std::vector<std::vector<int>> members(p);
  const std::uint32_t tag = 5;
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    auto s = co_await split(c, r % 2, -r);
    if (!s) co_return fail(s.error());
    communicator& sub = **s;
    for (int i = 0; i < sub.size(); ++i) members[static_cast<std::size_t>(r)].push_back(job_rank(sub, i));
    if (r == 1) {
      // A parent message to rank 4 (the even half's sub root) with the same user tag,
      // there before its receives from any peer start: they must leave it alone.
      const int v = 100 + r;
      if (auto x = co_await send(c, 4, tag, std::as_bytes(std::span(&v, 1))); !x) co_return x;
    }
    if (auto x = co_await gathered_parent_ranks(c, r); !x) co_return fail(x.error());  // a barrier
    if (sub.rank() == 0) {
      for (int i = 1; i < sub.size(); ++i) {
        int v = -1;
        auto from = co_await recv_any(sub, tag, std::as_writable_bytes(std::span(&v, 1)));
        if (!from) co_return fail(from.error());
        got[static_cast<std::size_t>(r)].emplace_back(*from, v);
      }
      if (r == 4) {
        int v = -1;
        if (auto x = co_await recv(c, 1, tag, std::as_writable_bytes(std::span(&v, 1))); !x) co_return x;
        parent_got[4] = v;
      }
    } else {
      const int v = r;
      if (auto x = co_await send(sub, 0, tag, std::as_bytes(std::span(&v, 1))); !x) co_return x;
    }
    co_return result<void>{};
  });
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    REQUIRE(res[static_cast<std::size_t>(r)]);
  }
  // The sub roots are the highest parent ranks of each half: 4 and 5.
  for (int root : {4, 5}) {
    INFO("sub root " << root);
    const auto& m = members[static_cast<std::size_t>(root)];
    REQUIRE(m.size() == 3);
    REQUIRE(m[0] == root);
    auto seen = got[static_cast<std::size_t>(root)];
    REQUIRE(seen.size() == 2);
    for (auto [from, v] : seen) CHECK(m[static_cast<std::size_t>(from)] == v);  // named rank sent it
    std::sort(seen.begin(), seen.end());
    CHECK(seen[0].first == 1);
    CHECK(seen[1].first == 2);
  }
  CHECK(parent_got[4] == 101);
}
