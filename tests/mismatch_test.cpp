// Mismatched calls: one rank calls a collective differently from the others (another
// root, size, counts, element type, operator, algorithm, block count or collective).
// Before call signatures, several of these returned success with wrong data on every
// rank; now every rank must fail with errc::call_mismatch, quickly (well within the
// deadline), and the message must name both calls.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/join.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

struct mismatch_case {
  std::string name;
  // One rank's call; `odd`: this is the rank that calls differently. Sets `right` when the
  // call leaves the data the others' (majority) call would: a rank outside the mismatch's
  // reach (a broadcast subtree without the odd rank) may finish with right data.
  std::function<task<result<void>>(communicator&, bool odd, collective_options, bool& right)> call;
};

std::byte pattern(std::size_t i) { return static_cast<std::byte>(i * 131 + 7); }

task<result<void>> bcast(communicator& c, std::size_t n, int root, collective_options o, bool& right) {
  std::vector<std::byte> b(n);
  if (c.rank() == root)
    for (std::size_t i = 0; i < n; ++i) b[i] = pattern(i);
  auto r = co_await broadcast(c, std::span(b), root, o);
  right = n == 1000;
  for (std::size_t i = 0; i < n && right; ++i) right = b[i] == pattern(i);
  co_return r;
}

std::vector<mismatch_case> mismatch_cases() {
  std::vector<mismatch_case> cs;
  cs.push_back({"root", [](communicator& c, bool odd, collective_options o, bool& right) {
                  return bcast(c, 1000, odd ? 1 : 0, o, right);
                }});
  cs.push_back({"size", [](communicator& c, bool odd, collective_options o, bool& right) {
                  return bcast(c, odd ? 1200 : 1000, 0, o, right);
                }});
  // The same total, other counts: no message size gives this away.
  cs.push_back({"count", [](communicator& c, bool odd, collective_options o, bool& right) -> task<result<void>> {
                  const auto P = static_cast<std::size_t>(c.size());
                  std::vector<int> counts(P, 2);
                  counts[odd ? 0 : 1] = 3;
                  std::vector<std::int32_t> in(static_cast<std::size_t>(counts[static_cast<std::size_t>(c.rank())]), c.rank());
                  std::vector<std::int32_t> out(2 * P + 1, -1);
                  auto r = co_await allgatherv(c, std::span<const std::int32_t>(in), std::span(out), std::span<const int>(counts), o);
                  std::vector<std::int32_t> want;  // the majority's: rank 1 gives 3
                  for (std::size_t k = 0; k < P; ++k) want.insert(want.end(), k == 1 ? 3 : 2, static_cast<std::int32_t>(k));
                  right = out == want;
                  co_return r;
                }});
  // scatter's counts are implicit (each rank's part): one rank's larger part is a mismatch.
  cs.push_back({"scatter part", [](communicator& c, bool odd, collective_options o, bool& right) -> task<result<void>> {
                  const auto P = static_cast<std::size_t>(c.size());
                  std::vector<std::int32_t> all(c.rank() == 0 ? 2 * P : 0), part(odd ? 3 : 2, -1);
                  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int32_t>(i);
                  auto r = co_await scatter(c, std::span<const std::int32_t>(all), std::span(part), 0, o);
                  const auto at = 2 * static_cast<std::int32_t>(c.rank());
                  right = part == std::vector<std::int32_t>{at, at + 1};
                  co_return r;
                }});
  // Types of equal size: the bytes would combine, wrongly.
  cs.push_back({"type", [](communicator& c, bool odd, collective_options o, bool& right) -> task<result<void>> {
                  std::vector<std::int32_t> x(64, c.rank() + 1);
                  result<void> r;
                  if (odd) {
                    std::vector<float> f(64, static_cast<float>(c.rank() + 1));
                    r = co_await allreduce(c, std::span<const float>(f), std::span(f), ops::sum, o);
                    std::memcpy(x.data(), f.data(), x.size() * sizeof(float));
                  } else {
                    r = co_await allreduce(c, std::span<const std::int32_t>(x), std::span(x), ops::sum, o);
                  }
                  right = x == std::vector<std::int32_t>(64, c.size() * (c.size() + 1) / 2);
                  co_return r;
                }});
  cs.push_back({"operator", [](communicator& c, bool odd, collective_options o, bool& right) -> task<result<void>> {
                  std::vector<std::int32_t> x(64, c.rank() + 1);
                  auto r = odd ? co_await allreduce(c, std::span<const std::int32_t>(x), std::span(x), ops::max, o)
                               : co_await allreduce(c, std::span<const std::int32_t>(x), std::span(x), ops::sum, o);
                  right = x == std::vector<std::int32_t>(64, c.size() * (c.size() + 1) / 2);
                  co_return r;
                }});
  cs.push_back({"algorithm", [](communicator& c, bool odd, collective_options o, bool& right) {
                  o.alg = odd ? algorithm::binomial : algorithm::circulant;
                  return bcast(c, 1000, 0, o, right);
                }});
  cs.push_back({"blocks", [](communicator& c, bool odd, collective_options o, bool& right) {
                  o.alg = algorithm::circulant;
                  o.blocks = odd ? 2 : 4;
                  return bcast(c, 1000, 0, o, right);
                }});
  cs.push_back({"collective", [](communicator& c, bool odd, collective_options o, bool& right) -> task<result<void>> {
                  std::vector<std::int32_t> x(250, c.rank());
                  auto r = odd ? co_await reduce(c, std::span<const std::int32_t>(x), std::span(x), ops::sum, 0, o)
                               : co_await broadcast(c, std::span(x), 0, o);
                  // The reduce gives a non-root rank nothing: nothing wrong either.
                  right = odd || x == std::vector<std::int32_t>(250, 0);
                  co_return r;
                }});
  return cs;
}

struct world_kind {
  std::string kind;
  bool check;  // communicator_options::check (OPTCAST_CHECK)
};

std::vector<world_kind> kinds() {
  // shm never answers the peeks that find a message no receive matches (ofi_fabric::
  // probe); with the check, every kind is caught there too.
  if (testing::ofi_run()) return {{"ofi:tcp;ofi_rxm", false}, {"ofi:tcp;ofi_rxm", true}, {"ofi:shm", true}};
  return {{"local", false}, {"tcp", false}, {"local", true}, {"tcp", true}};
}

}  // namespace

TEST_CASE("every kind of mismatched call fails on every rank, naming both calls", "[fabrics][mismatch]") {
  const auto wk = GENERATE(from_range(kinds()));
  const auto& kind = wk.kind;
  const int p = 5;
  const int odd_rank = 2;
  const auto timeout = 20s;
  communicator_options opts;
  opts.check = wk.check;
  auto w = testing::make_world(kind, p, opts);
  for (const auto& mc : mismatch_cases()) {
    INFO(kind << (wk.check ? " with OPTCAST_CHECK" : "") << ": " << mc.name << " differs on rank " << odd_rank);
    // A correct call first, so that the mismatch is not the first thing on a connection.
    auto warm = w->run_all([](communicator& c) -> task<result<void>> {
      std::vector<std::int32_t> x(16, c.rank());
      co_return co_await allreduce(c, std::span<const std::int32_t>(x), std::span(x), ops::sum);
    });
    for (int r = 0; r < p; ++r) {
      INFO("warm-up on rank " << r << ": " << w->comms()[static_cast<std::size_t>(r)].failure_detail());
      REQUIRE(warm[static_cast<std::size_t>(r)]);
    }
    const auto start = std::chrono::steady_clock::now();
    auto right = std::make_unique<bool[]>(p);  // not vector<bool>: a bool& per rank
    auto res = w->run_all([&](communicator& c) {
      return mc.call(c, c.rank() == odd_rank, {.timeout = timeout}, right[static_cast<std::size_t>(c.rank())]);
    });
    const auto took = std::chrono::steady_clock::now() - start;
    // Told, not timed out: far within the deadline.
    CHECK(took < timeout / 4);
    // A rank that only sent (the root of a broadcast), or whose part of the call did not
    // touch the odd rank, may finish before anyone sees the mismatch, with the right
    // data; it is told then, and its communicator is broken from there on. The cause
    // reaches every rank, also one that saw another's connection close first.
    CHECK(w->settle([](communicator& c) { return c.failure() == errc::call_mismatch; }, 2s));
    bool named = false;
    for (int r = 0; r < p; ++r) {
      const auto R = static_cast<std::size_t>(r);
      auto& c = w->comms()[R];
      INFO("rank " << r << ": " << c.failure_detail());
      CHECK(c.failure() == errc::call_mismatch);
      if (!res[R]) {
        // broken: told before it made the call (the failure above says why).
        CHECK((res[R].error() == errc::call_mismatch || res[R].error() == errc::broken));
      } else {
        // Finished: then with the data the majority's call gives (the odd rank can finish
        // only where its call returns nothing: a reduce's leaf).
        CHECK(right[R]);
      }
      named = named || c.failure_detail().find("called differently") != std::string::npos;
    }
    CHECK(named);
    // A failed collective breaks the communicator: start again on a fresh world.
    w = testing::make_world(kind, p, opts);
  }
}

TEST_CASE("OPTCAST_CHECK takes 1 or 0; the check passes equal calls", "[local][mismatch]") {
  setenv("OPTCAST_CHECK", "1", 1);
  CHECK(collective_settings::from_env().check);
  setenv("OPTCAST_CHECK", "0", 1);
  CHECK_FALSE(collective_settings::from_env().check);
  setenv("OPTCAST_CHECK", "yes", 1);
  CHECK_THROWS_WITH(collective_settings::from_env(), Catch::Contains("OPTCAST_CHECK='yes'"));
  unsetenv("OPTCAST_CHECK");
  CHECK_FALSE(collective_settings::from_env().check);

  communicator_options opts;
  opts.check = true;
  auto w = testing::make_world("local", 4, opts);
  for (int round = 0; round < 3; ++round) {
    auto res = w->run_all([&](communicator& c) -> task<result<void>> {
      std::vector<std::int32_t> x(100, c.rank() + round);
      if (auto r = co_await allreduce(c, std::span<const std::int32_t>(x), std::span(x), ops::sum); !r) co_return r;
      for (auto v : x)
        if (v != 6 + 4 * round) co_return fail(errc::protocol_violation);
      co_return co_await broadcast(c, std::span(x), round % 4);
    });
    for (auto& r : res) REQUIRE(r);
  }
}
