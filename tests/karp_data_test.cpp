// Karp et al.'s algorithms carry the right data on the real fabrics: every result
// checked element by element on local, TCP and (where present) libfabric worlds. Their
// times are checked in the simulator (logp_test).
#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "optcast/collectives.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

struct world_case {
  std::string kind;
  int p;
};

std::vector<world_case> world_cases() {
  std::vector<world_case> out;
  for (int p : {1, 2, 3, 5, 8, 13}) out.push_back({"local", p});
  for (int p : {2, 3, 7}) out.push_back({"tcp", p});
  if (testing::provider_present("tcp;ofi_rxm")) out.push_back({"ofi:tcp;ofi_rxm", 5});
  return out;
}

}  // namespace

TEST_CASE("alltoall: block j of rank i's in lands in block i of rank j's out", "[local][tcp][logp]") {
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
