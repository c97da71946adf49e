// The collectives' refusals and laziness: bad arguments get a clear error and leave the
// communicator working, counts that disagree between ranks fail every rank without a
// hang, and a task never awaited does nothing.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "optcast/collectives.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

// Tasks are lazy: a collective's task that is never awaited takes no sequence number and
// makes no check (broadcast's entry is not a coroutine of its own; its checks run when
// the task starts). Rank 0 drops three tasks; then every rank's calls still match.
TEST_CASE("a collective's task does nothing until it is awaited", "[local][collectives]") {
  const int p = 3;
  testing::local_test_world w(p);
  std::vector<std::vector<std::int32_t>> got(p, std::vector<std::int32_t>(6)), sums(p, std::vector<std::int32_t>(6));
  std::vector<std::string> errors(p);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    const auto R = static_cast<std::size_t>(c.rank());
    const collective_options o{.timeout = std::chrono::milliseconds(5000)};  // a mismatch fails, never hangs
    if (R == 0) {
      std::vector<std::int32_t> spare(6);
      { auto dropped = broadcast(c, std::span(spare), 1, o); }
      { auto refused = broadcast(c, std::span(spare), 7, o); }  // root 7: refused, if it ran
      { auto dropped = allreduce(c, std::span<const std::int32_t>(spare), std::span(spare), ops::sum, o); }
    }
    errors[R] = c.last_error();
    if (R == 1) std::iota(got[R].begin(), got[R].end(), 40);
    if (auto r = co_await broadcast(c, std::span(got[R]), 1, o); !r) co_return r;
    std::vector<std::int32_t> mine(6, static_cast<std::int32_t>(R + 1));
    co_return co_await allreduce(c, std::span<const std::int32_t>(mine), std::span(sums[R]), ops::sum, o);
  });
  for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) {
    INFO("rank " << r);
    REQUIRE(res[r]);
    CHECK(errors[r].empty());
    CHECK(got[r] == std::vector<std::int32_t>{40, 41, 42, 43, 44, 45});
    CHECK(sums[r] == std::vector<std::int32_t>(6, 1 + 2 + 3));
  }
}

TEST_CASE("bad arguments: clear errors, and the communicator still works", "[local][collectives]") {
  const int p = 4;
  testing::local_test_world w(p);
  std::vector<std::vector<std::string>> errors(p);
  std::vector<std::vector<std::error_code>> codes(p);
  std::vector<std::vector<std::int32_t>> after(p, std::vector<std::int32_t>(10));
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    const auto R = static_cast<std::size_t>(c.rank());
    auto record = [&](result<void> r) {
      codes[R].push_back(r ? std::error_code{} : r.error());
      errors[R].push_back(c.last_error());
    };
    std::vector<std::int32_t> in(8, 1), out(8), big(32);
    const std::vector<int> negative{2, -1, 2, 2}, short_counts{2, 2, 2}, twos{2, 2, 2, 2};
    record(co_await reduce(c, std::span<const std::int32_t>(in), std::span(out), ops::sum, 4));
    record(co_await reduce(c, std::span<const std::int32_t>(in), std::span(out), ops::sum, -1));
    record(co_await allgatherv(c, std::span<const std::int32_t>(in).first(2), std::span(big), std::span<const int>(negative)));
    record(co_await allgatherv(c, std::span<const std::int32_t>(in).first(2), std::span(big), std::span<const int>(short_counts)));
    record(co_await allgather(c, std::span<const std::int32_t>(in), std::span(out)));  // needs 32
    record(co_await allgatherv(c, std::span<const std::int32_t>(in), std::span(big), std::span<const int>(twos)));
    record(co_await reduce(c, std::span<const std::int32_t>(in), std::span(out).first(3), ops::sum, static_cast<int>(R)));
    record(co_await allreduce(c, std::span<const std::int32_t>(in), std::span(big), ops::max));
    record(co_await reduce_scatter_block(c, std::span<const std::int32_t>(in), std::span(out), ops::max));
    record(co_await allreduce(c, std::span<const std::int32_t>(in), std::span(out),
                              reduction<std::int32_t>::custom([](std::int32_t a, std::int32_t b) { return a - b; }, non_commutative),
                              {.alg = algorithm::circulant}));
    record(co_await allgather(c, std::span<const std::int32_t>(in).first(2), std::span(out), {.alg = algorithm::binomial}));
    record(co_await allreduce(c, std::span<const std::int32_t>(in), std::span(out), ops::sum, {.blocks = -2}));
    // Nothing above broke the communicator.
    std::vector<std::int32_t> mine(10, static_cast<std::int32_t>(R));
    co_return co_await allreduce(c, std::span<const std::int32_t>(mine), std::span(after[R]), ops::sum);
  });
  const std::vector<std::string> expect = {
      "root 4 is not a rank", "root -1 is not a rank", "counts[1] = -1 is negative", "3 counts for 4 ranks",
      "out has room for 8 elements, the counts add up to 32", "in has 8 elements, this rank's count is 2",
      "out has 3 elements at the root, in has 8", "allreduce: out has 32 elements, in has 8",
      "reduce_scatter_block: in has 8 elements, the counts add up to 32", "non-commutative",
      "the algorithms are recursive_doubling, circulant", "blocks must not be negative"};
  for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) {
    REQUIRE(res[r]);
    REQUIRE(codes[r].size() == expect.size());
    for (std::size_t i = 0; i < expect.size(); ++i) {
      INFO("rank " << r << " call " << i << ": " << errors[r][i]);
      CHECK(codes[r][i] == errc::invalid_argument);
      CHECK(errors[r][i].find(expect[i]) != std::string::npos);
    }
    CHECK(after[r] == std::vector<std::int32_t>(10, 0 + 1 + 2 + 3));
    CHECK_FALSE(w.comms()[r].broken());
  }
}

TEST_CASE("counts that disagree between ranks fail, and no rank hangs", "[local][tcp][collectives]") {
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  const int p = 4;
  auto w = testing::make_world(kind, p);
  std::vector<std::vector<double>> out(p, std::vector<double>(16));
  const auto start = std::chrono::steady_clock::now();
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    // Rank 1 believes rank 0 contributes 2 elements; rank 0 has 3.
    const std::vector<int> counts = c.rank() == 1 ? std::vector<int>{2, 2, 2, 2} : std::vector<int>{3, 2, 2, 2};
    std::vector<double> in(static_cast<std::size_t>(counts[static_cast<std::size_t>(c.rank())]), 1.5);
    co_return co_await allgatherv(c, std::span<const double>(in), std::span(out[static_cast<std::size_t>(c.rank())]),
                                  std::span<const int>(counts), {.blocks = 1, .timeout = 2000ms});
  });
  CHECK(std::chrono::steady_clock::now() - start < 15s);
  REQUIRE_FALSE(res[1]);
  bool mismatch = false;
  for (auto& r : res)
    if (!r) mismatch = mismatch || r.error() == errc::call_mismatch;
  // The counts travel in every message's signature, so the disagreement is named as such
  // rather than surfacing later as a message of the wrong size.
  CHECK(mismatch);
}
