// One TCP connection per pair of ranks, used both ways (net/tcp/wire_format.hpp, hs_duplex):
// the rank that did not open it sends on it too, and two ranks that open toward each other
// at once keep one. Counted through tcp::connections; the data checked on every rank.
#include <catch2/catch.hpp>

#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/net/tcp.hpp"
#include "optcast/when_all.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

using testing::bytes;

struct totals {
  int outgoing = 0, incoming = 0, both_ways = 0, merged = 0;
};

totals count(testing::test_world& w) {
  totals t;
  for (auto& c : w.comms()) {
    const auto n = tcp::connections(c.get_fabric());
    t.outgoing += n.outgoing;
    t.incoming += n.incoming;
    t.both_ways += n.both_ways;
    t.merged += n.merged;
  }
  return t;
}

}  // namespace

TEST_CASE("the rank that did not open a connection answers on it", "[tcp][fabric]") {
  const std::string kind = GENERATE("tcp", "tcp:encrypt");
  INFO(kind);
  auto w = testing::make_world(kind, 2);
  std::vector<std::byte> ask = bytes(100, 1), answer = bytes(70000, 2), got_ask(100), got_answer(70000);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    result<std::size_t> r;
    if (c.rank() == 0) {
      r = co_await f.send(1, {1, 0}, ask);
      if (r) r = co_await f.recv(1, {1, 1}, got_answer);
    } else {
      r = co_await f.recv(0, {1, 0}, got_ask);
      if (r) r = co_await f.send(0, {1, 1}, answer);
    }
    if (!r) co_return fail(r.error());
    co_return result<void>{};
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
  CHECK(got_ask == ask);
  CHECK(got_answer == answer);
  const auto n0 = tcp::connections(w->comms()[0].get_fabric()), n1 = tcp::connections(w->comms()[1].get_fabric());
  CHECK(n0.outgoing == 1);
  CHECK(n0.incoming == 0);
  CHECK(n1.outgoing == 0);
  CHECK(n1.incoming == 1);
  CHECK(n1.both_ways == 1);
  CHECK(n0.merged + n1.merged == 0);  // rank 1 took rank 0's connection without opening one
}

TEST_CASE("two ranks that open toward each other at once keep one connection", "[tcp][fabric]") {
  // Both send first: each opens, and the pair settles on one, whichever order the
  // handshakes cross in. Repeated on fresh worlds for the orders to vary.
  const std::string kind = GENERATE("tcp", "tcp:encrypt");
  INFO(kind);
  for (int trial = 0; trial < 10; ++trial) {
    auto w = testing::make_world(kind, 2);
    std::vector<std::vector<std::byte>> out{bytes(3000, 1), bytes(3000, 2)}, in(2, std::vector<std::byte>(3000));
    auto res = w->run_all([&](communicator& c) -> task<result<void>> {
      const int r = c.rank();
      for (std::uint32_t round = 0; round < 20; ++round)
        if (auto e = co_await exchange(c.get_fabric(), 1 - r, out[static_cast<std::size_t>(r)], 1 - r, in[static_cast<std::size_t>(r)], {2, round}); !e)
          co_return e;
      co_return result<void>{};
    });
    INFO("trial " << trial);
    REQUIRE(res[0]);
    REQUIRE(res[1]);
    CHECK(in[0] == out[1]);
    CHECK(in[1] == out[0]);
    const auto t = count(*w);
    CHECK(t.outgoing == 1);
    CHECK(t.incoming == 1);
    CHECK(t.both_ways == 1);
    CHECK(t.merged <= 1);
  }
}

TEST_CASE("an allreduce by recursive doubling holds one connection per pair that met", "[tcp][fabric]") {
  // p = 8, three rounds: rank r meets r^1, r^2, r^4, 12 pairs in all.
  const int p = 8;
  auto w = testing::make_world("tcp", p);
  std::vector<std::vector<std::uint64_t>> v(p, std::vector<std::uint64_t>(4));
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < 4; ++i) v[static_cast<std::size_t>(r)][i] = static_cast<std::uint64_t>(r * 10 + static_cast<int>(i));
  for (int call = 0; call < 3; ++call) {
    auto res = w->run_all([&](communicator& c) {
      auto& mine = v[static_cast<std::size_t>(c.rank())];
      return allreduce(c, std::span<const std::uint64_t>(mine), std::span(mine), ops::sum, {.alg = algorithm::recursive_doubling});
    });
    for (int r = 0; r < p; ++r) REQUIRE(res[static_cast<std::size_t>(r)]);
  }
  // Three sums of the ranks' values: 8^2 times the first, and so on.
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < 4; ++i) {
      std::uint64_t first = 0;
      for (int q = 0; q < p; ++q) first += static_cast<std::uint64_t>(q * 10 + static_cast<int>(i));
      CHECK(v[static_cast<std::size_t>(r)][i] == first * p * p);
    }
  const auto t = count(*w);
  CHECK(t.outgoing == 12);
  CHECK(t.incoming == 12);
  CHECK(t.both_ways == 12);
  CHECK(t.merged <= 12);
}
