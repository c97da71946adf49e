// Karp et al.'s algorithms carry the right data on the real fabrics: every result
// checked element by element on local, TCP and (where present) libfabric worlds. Their
// times are checked in the simulator (logp_test).
#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "optcast/collectives.hpp"
#include "mat2.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

std::vector<testing::world_case> world_cases() { return testing::world_cases({1, 2, 3, 5, 8, 13}, {2, 3, 7}); }

}  // namespace

TEST_CASE("alltoall: block j of rank i's in lands in block i of rank j's out", "[local][tcp][fabrics][logp]") {
  const auto wc = GENERATE(from_range(world_cases()));
  const int p = wc.p;
  const auto P = static_cast<std::size_t>(p);
  INFO(wc.kind << " p " << p);
  auto w = testing::make_world(wc.kind, p);
  const auto value = [](std::size_t from, std::size_t to, std::size_t i) {
    return static_cast<double>(from) * 1e6 + static_cast<double>(to) * 1e3 + static_cast<double>(i) + 0.25;
  };
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}})
    for (int k : {1, 3}) {
      INFO("count " << count << " items " << k);
      std::vector<std::vector<double>> out(P), inplace(P);
      auto res = w->run_all([&](communicator& c) -> task<result<void>> {
        const auto r = static_cast<std::size_t>(c.rank());
        std::vector<double> in(P * count);
        for (std::size_t to = 0; to < P; ++to)
          for (std::size_t i = 0; i < count; ++i) in[to * count + i] = value(r, to, i);
        out[r].assign(P * count, -1);
        if (auto x = co_await alltoall(c, std::span<const double>(in), std::span(out[r]), {.blocks = k}); !x)
          co_return x;
        inplace[r] = in;  // in and out the same buffer
        co_return co_await alltoall(c, std::span<const double>(inplace[r]), std::span(inplace[r]), {.blocks = k});
      });
      for (auto& r : res) REQUIRE(r);
      for (std::size_t r = 0; r < P; ++r) {
        std::vector<double> want;
        for (std::size_t from = 0; from < P; ++from)
          for (std::size_t i = 0; i < count; ++i) want.push_back(value(from, r, i));
        CHECK(out[r] == want);
        CHECK(inplace[r] == want);
      }
    }
}

TEST_CASE("alltoall: bad arguments are refused with the reason", "[local][logp]") {
  testing::local_test_world w(3);
  std::vector<std::string> why(3);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    std::vector<int> in(7), out(7), ok_in(6), short_out(5);
    auto a = co_await alltoall(c, std::span<const int>(in), std::span(out));
    why[static_cast<std::size_t>(c.rank())] = c.last_error();
    if (a || a.error() != errc::invalid_argument) co_return fail(errc::protocol_violation);
    auto b = co_await alltoall(c, std::span<const int>(ok_in), std::span(short_out));
    if (b || c.last_error().find("out has 5 elements, in has 6") == std::string::npos)
      co_return fail(errc::protocol_violation);
    auto d = co_await alltoall(c, std::span<const int>(ok_in), std::span(ok_in), {.alg = algorithm::circulant});
    if (d || c.last_error().find("staggered") == std::string::npos) co_return fail(errc::protocol_violation);
    // The communicator still works.
    std::vector<int> good(6, c.rank()), got(6);
    co_return co_await alltoall(c, std::span<const int>(good), std::span(got));
  });
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(res[r]);
    CHECK(why[r] == "alltoall: in has 7 elements, not a multiple of 3 ranks");
  }
}

TEST_CASE("allreduce combining: every rank the exact reduction, any P", "[local][tcp][fabrics][logp]") {
  const auto wc = GENERATE(from_range(world_cases()));
  const int p = wc.p;
  const auto P = static_cast<std::size_t>(p);
  INFO(wc.kind << " p " << p);
  auto w = testing::make_world(wc.kind, p);
  // Latencies of 1, 2 and 5 steps (fold, chains and the paper's own schedule among
  // them), and an element count large enough for several TCP segments.
  const std::size_t count = 3001;
  for (double L : {1.0, 2.0, 5.0}) {
    INFO("L " << L);
    std::vector<std::vector<std::int64_t>> sum(P);
    std::vector<std::vector<std::uint32_t>> top(P);
    auto res = w->run_all([&](communicator& c) -> task<result<void>> {
      const auto r = static_cast<std::size_t>(c.rank());
      const collective_options o{.alg = algorithm::combining, .model = loggp_params{L, 0, 1, 0}};
      std::vector<std::int64_t> in(count);
      for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<std::int64_t>((r + 1) * (i + 3) + (i << (r % 17)));
      sum[r].assign(count, -1);
      if (auto x = co_await allreduce(c, std::span<const std::int64_t>(in), std::span(sum[r]), ops::sum, o); !x)
        co_return x;
      top[r].assign(count, 0);
      for (std::size_t i = 0; i < count; ++i) top[r][i] = static_cast<std::uint32_t>((r * 7919 + i * 104729) % 65521);
      co_return co_await allreduce(c, std::span<const std::uint32_t>(top[r]), std::span(top[r]), ops::max, o);
    });
    for (std::size_t r = 0; r < P; ++r) {
      INFO("rank " << r << ": " << (res[r] ? "" : res[r].error().message()) << " " << w->comms()[r].failure_detail());
      REQUIRE(res[r]);
    }
    std::vector<std::int64_t> want_sum(count, 0);
    std::vector<std::uint32_t> want_top(count, 0);
    for (std::size_t j = 0; j < P; ++j)
      for (std::size_t i = 0; i < count; ++i) {
        want_sum[i] += static_cast<std::int64_t>((j + 1) * (i + 3) + (i << (j % 17)));
        want_top[i] = std::max(want_top[i], static_cast<std::uint32_t>((j * 7919 + i * 104729) % 65521));
      }
    for (std::size_t r = 0; r < P; ++r) {
      CHECK(sum[r] == want_sum);
      CHECK(top[r] == want_top);
    }
  }
}

TEST_CASE("allreduce combining refuses what it cannot do", "[local][logp]") {
  testing::local_test_world w(3);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    std::vector<int> v(4, 1);
    const auto cat = reduction<int>::custom([](int a, int b) { return a * 10 + b; }, non_commutative);
    auto a = co_await allreduce(c, std::span<const int>(v), std::span(v), cat, {.alg = algorithm::combining});
    if (a || c.last_error().find("non-commutative") == std::string::npos) co_return fail(errc::protocol_violation);
    auto b = co_await reduce(c, std::span<const int>(v), std::span(v), ops::sum, 0, {.alg = algorithm::combining});
    if (b || c.last_error().find(algorithm_names(collective::reduce)) == std::string::npos) co_return fail(errc::protocol_violation);
    auto d = co_await allreduce(c, std::span<const int>(v), std::span(v), ops::sum,
                                {.alg = algorithm::combining, .model = loggp_params{-1, 0, 1, 0}});
    if (d || c.last_error().find("model parameters") == std::string::npos) co_return fail(errc::protocol_violation);
    co_return co_await allreduce(c, std::span<const int>(v), std::span(v), ops::sum, {.alg = algorithm::combining});
  });
  for (auto& r : res) CHECK(r);
}

using testing::mat2;
using testing::mul;

TEST_CASE("summation: the ordered product at the root, each operand read once", "[local][tcp][fabrics][logp]") {
  const auto wc = GENERATE(from_range(world_cases()));
  const int p = wc.p;
  const auto P = static_cast<std::size_t>(p);
  INFO(wc.kind << " p " << p);
  auto w = testing::make_world(wc.kind, p);
  const auto prod = reduction<mat2>::custom([](const mat2& x, const mat2& y) { return mul(x, y); }, non_commutative);
  for (std::int64_t n : {1, 3, 50, 5000}) {
    INFO("n " << n);
    std::vector<mat2> ops(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto u = static_cast<std::uint32_t>(i);
      ops[i] = {u + 2, 3 * u, u ^ 9, u * u + 1};
    }
    mat2 want = ops[0];
    for (std::size_t i = 1; i < ops.size(); ++i) want = mul(want, ops[i]);
    const int root = p - 1;
    std::vector<mat2> got(P);
    std::vector<std::vector<std::int64_t>> read(P);
    std::vector<std::vector<logp::summation_plan::segment>> share(P);
    const collective_options o{.model = loggp_params{4, 1, 2, 0}};
    auto res = w->run_all([&](communicator& c) -> task<result<void>> {
      const auto r = static_cast<std::size_t>(c.rank());
      share[r] = summation_share(c, n, root, o);
      // The generator form, recording which operands this rank asks for.
      auto x = co_await summation<mat2>(
          c, n, [&](std::int64_t i) { read[r].push_back(i); return ops[static_cast<std::size_t>(i)]; }, prod, root, o);
      if (!x) co_return fail(x.error());
      // The span form.
      auto y = co_await summation(c, std::span<const mat2>(ops), prod, root, o);
      if (!y) co_return fail(y.error());
      if (!(*x == *y)) co_return fail(errc::protocol_violation);
      got[r] = *x;
      co_return result<void>{};
    });
    for (auto& r : res) REQUIRE(r);
    CHECK(got[static_cast<std::size_t>(root)] == want);
    // Every operand read by exactly one rank, and each rank read exactly its share.
    std::vector<int> times(static_cast<std::size_t>(n));
    for (std::size_t r = 0; r < P; ++r) {
      std::vector<std::int64_t> mine;
      for (const auto& s : share[r])
        for (std::int64_t i = s.first; i < s.first + s.count; ++i) mine.push_back(i);
      CHECK(read[r] == mine);
      for (auto i : read[r]) ++times[static_cast<std::size_t>(i)];
      if (r != static_cast<std::size_t>(root)) CHECK(got[r] == mat2{});
    }
    CHECK(std::count(times.begin(), times.end(), 1) == n);
  }
}

TEST_CASE("summation: bad arguments are refused with the reason", "[local][logp]") {
  testing::local_test_world w(2);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    auto a = co_await summation<int>(c, 0, [](std::int64_t) { return 1; }, ops::sum);
    if (a || c.last_error().find("at least one operand") == std::string::npos) co_return fail(errc::protocol_violation);
    auto b = co_await summation<int>(c, 5, [](std::int64_t) { return 1; }, ops::sum, 2);
    if (b || c.last_error().find("root 2") == std::string::npos) co_return fail(errc::protocol_violation);
    auto d = co_await summation<int>(c, 5, [](std::int64_t) { return 1; }, ops::sum, 0, {.alg = algorithm::circulant});
    if (d || c.last_error().find("logp_tree") == std::string::npos) co_return fail(errc::protocol_violation);
    auto e = co_await summation<int>(c, 5, [](std::int64_t) { return 1; }, ops::sum);
    if (!e || (c.rank() == 0 && *e != 5)) co_return fail(errc::protocol_violation);
    co_return result<void>{};
  });
  for (auto& r : res) CHECK(r);
  CHECK_THROWS_AS(summation_share(w.comms()[0], 0), std::invalid_argument);
}

TEST_CASE("k-item broadcasts, buffered and single-sending: every rank the root's bytes", "[local][tcp][fabrics][logp]") {
  const auto wc = GENERATE(from_range(world_cases()));
  const auto alg = GENERATE(algorithm::buffered, algorithm::single_sending);
  const int p = wc.p;
  INFO(wc.kind << " p " << p << " " << to_string(alg));
  auto w = testing::make_world(wc.kind, p);
  for (std::size_t bytes : {std::size_t{7}, std::size_t{100000}})
    for (int k : {1, 3, 40})
      for (int root : {0, p - 1}) {
        INFO("bytes " << bytes << " k " << k << " root " << root);
        std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(p), std::vector<std::byte>(bytes));
        for (std::size_t i = 0; i < bytes; ++i) bufs[static_cast<std::size_t>(root)][i] = static_cast<std::byte>((i * 31 + 5) & 0xff);
        auto res = w->run_all([&](communicator& c) {
          return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root,
                           {.alg = alg, .blocks = k, .model = loggp_params{3, 0, 1, 0}});
        });
        for (auto& r : res) REQUIRE(r);
        for (auto& b : bufs) CHECK(b == bufs[static_cast<std::size_t>(root)]);
      }
}
