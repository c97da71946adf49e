// Träff and Hunold's multi-lane collectives (lib/traff_hunold) on the in-process fabric
// with the ranks grouped into hosts (local::world::set_layout): every shape of hosts,
// ranks per host and rails, placements in blocks and interleaved, roots everywhere, sizes
// that leave lanes empty; every element checked on every rank. Their refusals where the
// topology has no lanes. On real rails: tests/rails_test.sh.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "traff_hunold/lanes.hpp"
#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

struct shape {
  int hosts, per_host, rails;
  bool interleaved;  // rank r on host r % hosts, not r / per_host
};

topology layout_of(const shape& s) {
  topology t;
  t.rails = s.rails;
  const int p = s.hosts * s.per_host;
  for (int r = 0; r < p; ++r) t.host_of.push_back(s.interleaved ? r % s.hosts : r / s.per_host);
  // Hosts are numbered in the order of their lowest rank: so they are here either way.
  return t;
}

std::string text(const shape& s) {
  return std::to_string(s.hosts) + " hosts x " + std::to_string(s.per_host) + " ranks, " + std::to_string(s.rails) + " rails" +
         (s.interleaved ? ", interleaved" : "");
}

const collective_options lanes{.alg = algorithm::multi_lane};

}  // namespace

TEST_CASE("multi-lane broadcast, reduce, allreduce, allgather, scatter, gather and reduce-scatter: every shape, root and size", "[local][multi_lane]") {
  const std::vector<shape> shapes = {{2, 2, 1, false}, {2, 2, 2, false}, {3, 2, 1, true}, {4, 1, 2, false},
                                     {2, 3, 2, false}, {3, 3, 1, true},  {2, 4, 2, true}, {3, 1, 3, false}, {2, 2, 4, true}};
  for (const auto& sh : shapes) {
    const int p = sh.hosts * sh.per_host;
    local::world w(p);
    w.set_layout(layout_of(sh));
    auto comms = communicators_of(w);
    for (const std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{100003}}) {
      for (const int root : {0, p - 1, p / 2}) {
        INFO(text(sh) << ", " << count << " elements, root " << root);
        std::vector<std::vector<std::int64_t>> b(p, std::vector<std::int64_t>(count, -1)), red(p, std::vector<std::int64_t>(count, -1)),
            all(p, std::vector<std::int64_t>(count, -1));
        std::vector<std::vector<double>> dall(p, std::vector<double>(count, -1));
        std::vector<std::vector<std::int32_t>> gath(p, std::vector<std::int32_t>(count * static_cast<std::size_t>(p), -1));
        // Scatter: the root's p parts; each rank's part back; gather: the root's p parts.
        std::vector<std::int32_t> whole(count * static_cast<std::size_t>(p));
        for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<std::int32_t>(i * 7 + static_cast<std::size_t>(root));
        std::vector<std::vector<std::int32_t>> part(p, std::vector<std::int32_t>(count, -1)),
            back(p, std::vector<std::int32_t>(count * static_cast<std::size_t>(p), -1));
        std::vector<std::vector<std::int64_t>> rs(p, std::vector<std::int64_t>(count, -1));
        auto res = run_all(comms, [&](communicator& c) -> task<result<void>> {
          const int r = c.rank();
          const auto ur = static_cast<std::size_t>(r);
          if (r == root) std::iota(b[ur].begin(), b[ur].end(), std::int64_t{7});
          if (auto x = co_await broadcast(c, std::span(b[ur]), root, {.alg = algorithm::multi_lane}); !x) co_return x;
          std::vector<std::int64_t> mine(count);
          for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<std::int64_t>(i) * (r + 1) + r;
          if (auto x = co_await reduce(c, std::span<const std::int64_t>(mine), std::span(red[ur]), ops::sum, root, lanes); !x) co_return x;
          if (auto x = co_await allreduce(c, std::span<const std::int64_t>(mine), std::span(all[ur]), ops::sum, lanes); !x) co_return x;
          std::vector<double> d(count);
          for (std::size_t i = 0; i < count; ++i) d[i] = 0.1 * static_cast<double>(i + 1) / (r + 3);
          if (auto x = co_await allreduce(c, std::span<const double>(d), std::span(dall[ur]), ops::sum, lanes); !x) co_return x;
          std::vector<std::int32_t> seg(count);
          for (std::size_t i = 0; i < count; ++i) seg[i] = static_cast<std::int32_t>(r * 1000003 + static_cast<int>(i % 1000));
          if (auto x = co_await allgather(c, std::span<const std::int32_t>(seg), std::span(gath[ur]), lanes); !x) co_return x;
          if (auto x = co_await scatter(c, std::span<const std::int32_t>(whole), std::span(part[ur]), root, lanes); !x) co_return x;
          if (auto x = co_await gather(c, std::span<const std::int32_t>(part[ur]), std::span(back[ur]), root, lanes); !x) co_return x;
          // Reduce-scatter: element i of rank r's input is i * (r + 1) + r + root.
          std::vector<std::int64_t> rin(count * static_cast<std::size_t>(p));
          for (std::size_t i = 0; i < rin.size(); ++i) rin[i] = static_cast<std::int64_t>(i) * (r + 1) + r + root;
          co_return co_await reduce_scatter_block(c, std::span<const std::int64_t>(rin), std::span(rs[ur]), ops::sum, lanes);
        });
        for (int r = 0; r < p; ++r) {
          const auto ur = static_cast<std::size_t>(r);
          INFO("rank " << r);
          REQUIRE(res[ur]);
          std::int64_t rank_sum = 0, weight = 0;
          for (int q = 0; q < p; ++q) rank_sum += q, weight += q + 1;
          bool bcast_ok = true, all_ok = true, red_ok = true, gath_ok = true;
          for (std::size_t i = 0; i < count; ++i) {
            const std::int64_t want = static_cast<std::int64_t>(i) * weight + rank_sum;
            bcast_ok = bcast_ok && b[ur][i] == static_cast<std::int64_t>(i) + 7;
            all_ok = all_ok && all[ur][i] == want;
            if (r == root) red_ok = red_ok && red[ur][i] == want;
          }
          for (int q = 0; q < p; ++q)
            for (std::size_t i = 0; i < count; ++i)
              gath_ok = gath_ok && gath[ur][static_cast<std::size_t>(q) * count + i] == q * 1000003 + static_cast<int>(i % 1000);
          CHECK(bcast_ok);
          CHECK(red_ok);
          CHECK(all_ok);
          CHECK(gath_ok);
          CHECK(std::equal(part[ur].begin(), part[ur].end(), whole.begin() + static_cast<std::ptrdiff_t>(ur * count)));
          if (r == root) CHECK(back[ur] == whole);
          bool rs_ok = true;
          for (std::size_t i = 0; i < count; ++i) {
            const auto at = static_cast<std::int64_t>(ur * count + i);
            rs_ok = rs_ok && rs[ur][i] == at * weight + rank_sum + static_cast<std::int64_t>(p) * root;
          }
          CHECK(rs_ok);
          // Floating point: the same bits on every rank (each block is one lane's result).
          CHECK(dall[ur] == dall[0]);
        }
        // The doubles' sum is right too, within rounding.
        double want = 0;
        for (int q = 0; q < p; ++q) want += 0.1 / (q + 3);
        CHECK(dall[0][0] == Approx(want));
      }
    }
  }
}

TEST_CASE("scatterv, gatherv, reduce_scatter: equal counts run what scatter and gather run, irregular ones keep off the lanes", "[local][multi_lane]") {
  local::world w(8);
  w.set_layout(layout_of({4, 2, 2, false}));  // two rails: the lanes carry twice what one tree does
  auto comms = communicators_of(w);
  const std::size_t each = 40000;  // large enough for the automatic choice to take the lanes
  std::vector<std::int32_t> whole(each * 8);
  std::iota(whole.begin(), whole.end(), 1);
  for (const bool equal : {true, false}) {
    INFO((equal ? "equal" : "irregular") << " counts");
    std::vector<std::int64_t> counts(8, static_cast<std::int64_t>(each));
    if (!equal) counts[3] = 0, counts[5] = 2 * static_cast<std::int64_t>(each);
    std::vector<std::size_t> at(9, 0);
    for (std::size_t r = 0; r < 8; ++r) at[r + 1] = at[r] + static_cast<std::size_t>(counts[r]);
    std::vector<std::vector<std::int32_t>> part(8), back(8, std::vector<std::int32_t>(whole.size(), -1));
    std::vector<std::string> ran(8);
    auto res = run_all(comms, [&](communicator& c) -> task<result<void>> {
      const auto ur = static_cast<std::size_t>(c.rank());
      part[ur].assign(static_cast<std::size_t>(counts[ur]), -1);
      // Half the ranks call scatter where the counts are equal: the same call.
      if (equal && c.rank() % 2) {
        if (auto x = co_await scatter(c, std::span<const std::int32_t>(whole), std::span(part[ur]), 1); !x) co_return x;
      } else if (auto x = co_await scatterv(c, std::span<const std::int32_t>(whole), std::span(part[ur]), std::span<const std::int64_t>(counts), 1); !x) {
        co_return x;
      }
      co_return co_await gatherv(c, std::span<const std::int32_t>(part[ur]), std::span(back[ur]), std::span<const std::int64_t>(counts), 1);
    });
    for (std::size_t r = 0; r < 8; ++r) {
      INFO("rank " << r);
      REQUIRE(res[r]);
      CHECK(std::equal(part[r].begin(), part[r].end(), whole.begin() + static_cast<std::ptrdiff_t>(at[r])));
    }
    CHECK(back[1] == whole);
    const auto plan = plan_collective(comms[0], collective::scatter, {.bytes = each * 8 * 4, .largest = each * 4, .smallest = each * 4});
    REQUIRE(plan);
    CHECK(plan->alg == algorithm::multi_lane);
  }
  // Asked for by name with irregular counts: refused with the reason, on every rank.
  std::vector<std::int64_t> counts{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<std::int32_t> all(36), mine(8);
  auto res = run_all(comms, [&](communicator& c) -> task<result<void>> {
    co_return co_await scatterv(c, std::span<const std::int32_t>(all), std::span(mine).first(static_cast<std::size_t>(c.rank() + 1)),
                                std::span<const std::int64_t>(counts), 0, lanes);
  });
  for (std::size_t r = 0; r < 8; ++r) {
    REQUIRE_FALSE(res[r]);
    CHECK(res[r].error() == errc::invalid_argument);
    CHECK_THAT(comms[r].last_error(), Catch::Contains("multi_lane takes equal parts only"));
  }
  // And a reduce-scatter's irregular counts likewise.
  std::vector<std::int64_t> sums(8);
  res = run_all(comms, [&](communicator& c) -> task<result<void>> {
    std::vector<std::int64_t> in(36, 1);
    co_return co_await reduce_scatter(c, std::span<const std::int64_t>(in), std::span(sums).first(static_cast<std::size_t>(c.rank() + 1)),
                                      std::span<const std::int64_t>(counts), ops::sum, lanes);
  });
  for (std::size_t r = 0; r < 8; ++r) {
    REQUIRE_FALSE(res[r]);
    CHECK_THAT(comms[r].last_error(), Catch::Contains("reduce_scatter: multi_lane takes equal parts only"));
  }
}

TEST_CASE("multi_lane is refused, with the reason, where the topology has no lanes", "[local][multi_lane]") {
  const int p = 6;
  const std::vector<std::pair<std::string, std::optional<topology>>> cases = {
      {"no topology (a host per rank, one rail)", std::nullopt},
      {"one host", topology{{0, 0, 0, 0, 0, 0}, 2}},
      {"hosts of 2, 3 and 1 ranks", topology{{0, 0, 1, 1, 1, 2}, 1}},
  };
  for (const auto& [what, t] : cases) {
    INFO(what);
    local::world w(p);
    if (t) w.set_layout(*t);
    auto comms = communicators_of(w);
    std::vector<std::int64_t> buf(100);
    auto res = run_all(comms, [&](communicator& c) -> task<result<void>> {
      co_return co_await broadcast(c, std::span(buf), 0, {.alg = algorithm::multi_lane});
    });
    for (int r = 0; r < p; ++r) {
      REQUIRE_FALSE(res[static_cast<std::size_t>(r)]);
      CHECK(res[static_cast<std::size_t>(r)].error() == errc::invalid_argument);
      CHECK_THAT(comms[static_cast<std::size_t>(r)].last_error(), Catch::Contains("needs hosts of several ranks or several rails"));
    }
  }
  local::world w(4);
  CHECK_THROWS_WITH(w.set_layout(topology{{0, 1}, 1}), Catch::Contains("a layout of 2 ranks for a world of 4"));
}

TEST_CASE("the automatic choice takes multi_lane for large messages on hosts of several ranks or rails, never without", "[local][multi_lane][choose]") {
  struct when {
    std::string what;
    std::optional<topology> layout;
    bool lanes_for_large;
  };
  const std::vector<when> cases = {
      {"4 hosts x 2 ranks, 2 rails", topology{{0, 0, 1, 1, 2, 2, 3, 3}, 2}, true},
      {"8 hosts x 1 rank, 2 rails", topology{{0, 1, 2, 3, 4, 5, 6, 7}, 2}, true},
      {"2 hosts x 4 ranks, 1 rail", topology{{0, 0, 0, 0, 1, 1, 1, 1}, 1}, true},
      {"no topology", std::nullopt, false},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    local::world w(8);
    if (c.layout) w.set_layout(*c.layout);
    auto comms = communicators_of(w);
    auto& comm = comms[0];
    const std::size_t large = 16 << 20;
    const auto b = plan_broadcast(comm, large);
    REQUIRE(b);
    CHECK((b->alg == algorithm::multi_lane) == c.lanes_for_large);
    for (const auto coll : {collective::allreduce, collective::reduce}) {
      const auto r = plan_collective(comm, coll, {.bytes = large});
      REQUIRE(r);
      INFO(to_string(coll) << " chose " << to_string(r->alg));
      CHECK((r->alg == algorithm::multi_lane) == c.lanes_for_large);
    }
    const auto g = plan_collective(comm, collective::allgather, {.bytes = large * 8, .largest = large, .smallest = large});
    REQUIRE(g);
    CHECK((g->alg == algorithm::multi_lane) == c.lanes_for_large);
    // A non-commutative operator keeps to the rank-ordered rows, topology or not.
    const auto nc = plan_collective(comm, collective::allreduce, {.bytes = large, .commutative = false, .order_free = false});
    REQUIRE(nc);
    CHECK(nc->alg != algorithm::multi_lane);
  }
}

TEST_CASE("a lane's view lends the rank's own scratch memory, so it outlives the call", "[local][multi_lane]") {
  local::world w(2);
  auto comms = communicators_of(w);
  fabric& base = comms[0].get_fabric();
  base.scratch().release();
  const std::vector<int> members{0, 1};
  {
    detail::lane_view view(base, members, 0, 16);
    auto lease = view.scratch().take(std::size_t{1} << 20);
    CHECK(lease.size() == std::size_t{1} << 20);
  }
  // Given back to the rank's pool: the next call's lanes take it without faulting in
  // fresh pages.
  CHECK(base.scratch().kept() >= std::size_t{1} << 20);
}

TEST_CASE("multi-lane allreduce in chunks: node-local phases overlapping the lanes, every element right", "[local][multi_lane]") {
  // 300007 int64 (2.4 MB): 2 to 4 chunks of 256 KiB lane pieces or more, their bounds off
  // the lanes' and the elements' (the count is prime).
  const std::vector<shape> shapes = {{2, 2, 1, false}, {3, 3, 1, true}, {2, 4, 2, false}, {2, 2, 4, true}, {4, 1, 2, false}};
  const std::size_t count = 300007;
  for (const auto& sh : shapes) {
    INFO(text(sh));
    const int p = sh.hosts * sh.per_host;
    local::world w(p);
    w.set_layout(layout_of(sh));
    auto comms = communicators_of(w);
    std::vector<std::vector<std::int64_t>> out(p, std::vector<std::int64_t>(count, -1));
    auto res = run_all(comms, [&](communicator& c) -> task<result<void>> {
      const int r = c.rank();
      std::vector<std::int64_t> mine(count);
      for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<std::int64_t>(i) * (r + 1) - r;
      co_return co_await allreduce(c, std::span<const std::int64_t>(mine), std::span(out[static_cast<std::size_t>(r)]), ops::sum, lanes);
    });
    for (const auto& r : res) REQUIRE(r);
    const std::int64_t weight = static_cast<std::int64_t>(p) * (p + 1) / 2, ranks = static_cast<std::int64_t>(p) * (p - 1) / 2;
    for (int r = 0; r < p; ++r) {
      bool ok = true;
      for (std::size_t i = 0; i < count; ++i) ok = ok && out[static_cast<std::size_t>(r)][i] == static_cast<std::int64_t>(i) * weight - ranks;
      CHECK(ok);
    }
  }
}
