// The barrier on live fabrics: ranks that enter at different times (one late by 80 ms, on
// its own thread) leave only after the last has entered; on k ports as on one, by either
// algorithm; under the round model the automatic choice takes ceil(log_{k+1} p) rounds
// (the registry test holds each algorithm to its own count for every p).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "optcast/collectives.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// Rank `late` enters `delay` after the others; every rank's exit must follow its entry.
void check_no_early_exit(testing::test_world& w, int late, std::chrono::milliseconds delay, collective_options opts = {}) {
  const auto p = static_cast<std::size_t>(w.size());
  std::vector<clock_type::time_point> exits(p);
  clock_type::time_point entered{};
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    if (c.rank() == late) {
      std::this_thread::sleep_for(delay);  // this rank's own thread: the others run on
      entered = clock_type::now();
    }
    auto r = co_await barrier(c, opts);
    exits[static_cast<std::size_t>(c.rank())] = clock_type::now();
    co_return r;
  });
  for (std::size_t r = 0; r < p; ++r) {
    INFO("rank " << r << " of " << p << ", rank " << late << " late");
    REQUIRE(res[r]);
    CHECK(exits[r] >= entered);
  }
}

}  // namespace

TEST_CASE("barrier over TCP: no rank leaves before the last enters, on one port and on three", "[tcp][collectives]") {
  for (int ports : {1, 3})
    for (int p : {2, 3, 5, 8}) {
      testing::tcp_test_world w(p, {}, {.ports = ports});
      check_no_early_exit(w, p - 1, 80ms);
      check_no_early_exit(w, 0, 80ms);
      check_no_early_exit(w, p / 2, 0ms);  // back to back: a call's messages do not meet the next's
    }
}

TEST_CASE("barrier over TCP by recursive doubling, where p is not a power of two too (ranks folding in pairs)", "[tcp][collectives]") {
  for (int p : {3, 5, 6, 8}) {
    testing::tcp_test_world w(p);
    const collective_options rd{.alg = algorithm::recursive_doubling};
    check_no_early_exit(w, p - 1, 80ms, rd);  // an odd rank that folds, where p is even
    check_no_early_exit(w, 0, 80ms, rd);      // an even rank that folds
    check_no_early_exit(w, p / 2, 0ms, rd);
  }
}

TEST_CASE("barrier in the simulator: ceil(log_{k+1} p) rounds", "[sim][collectives]") {
  for (int k : {1, 2, 3})
    for (int p : {1, 2, 3, 4, 7, 9, 16, 17, 64}) {
      testing::sim_test_world w(p, {}, sim::model::rounds(k));
      auto res = w.run_all([](communicator& c) { return barrier(c); });
      for (auto& r : res) REQUIRE(r);
      int rounds = 0;
      for (long long reach = 1; reach < p; reach *= k + 1) ++rounds;  // (k+1)^rounds >= p
      INFO("p = " << p << ", k = " << k);
      CHECK(w.world().now() == Approx(rounds));
    }
}

TEST_CASE("barrier: a rank calling something else fails the call with call_mismatch, and none returns as if synchronised", "[local][collectives]") {
  testing::local_test_world w(4);
  auto res = w.run_all([](communicator& c) -> task<result<void>> {
    if (c.rank() == 2) {
      std::vector<std::byte> b(8);
      co_return co_await broadcast(c, std::span(b), 0, {.timeout = 2000ms});
    }
    co_return co_await barrier(c, {.timeout = 2000ms});
  });
  bool mismatch = false;
  for (auto& r : res) mismatch |= !r && r.error() == errc::call_mismatch;
  CHECK(mismatch);
  for (auto& r : res) CHECK_FALSE(r);  // nobody returns as if it had synchronised
}
