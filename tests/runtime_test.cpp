// Tasks, and failure semantics on the in-process fabric (the fabric contract itself is
// checked on every fabric in fabric_conformance_test.cpp).
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "optcast/when_all.hpp"
#include "common/deadlines.hpp"
#include "runtime/plan_cache.hpp"
#include "common/stall.hpp"
#include "fault_fabric.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

task<int> answer() { co_return 42; }
task<int> twice() { co_return 2 * co_await answer(); }

std::vector<std::byte> bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i + static_cast<std::size_t>(seed) * 17) & 0xff);
  return v;
}

}  // namespace

TEST_CASE("tasks compose and run to completion", "[runtime]") {
  int got = 0;
  spawn(twice(), [&](std::optional<int> v, std::exception_ptr) { got = v.value_or(-1); });
  CHECK(got == 84);
}

TEST_CASE("a deep chain of synchronously finishing awaits does not grow the stack", "[runtime]") {
  // Each of a million awaits finishes at once (a local recv of a buffered message would
  // too); symmetric transfer keeps the stack flat.
  struct counter {
    static task<int> one() { co_return 1; }
    static task<long> many(int n) {
      long s = 0;
      for (int i = 0; i < n; ++i) s += co_await one();
      co_return s;
    }
  };
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Sanitizers keep every frame (no tail call for symmetric transfer to rely on): here
  // only the chain's result is checked, at a depth their stack holds.
  constexpr long depth = 10'000;
  WARN("sanitizer build: the flat stack is not checked");
#else
  constexpr long depth = 1'000'000;
#endif
  long got = 0;
  spawn(counter::many(static_cast<int>(depth)), [&](std::optional<long> v, std::exception_ptr) { got = v.value_or(0); });
  CHECK(got == depth);
}

TEST_CASE("a rank that dies mid-broadcast fails the others with peer lost", "[runtime][local]") {
  const int p = 6;
  local::world w(p);
  std::vector<communicator> comms;
  for (int r = 0; r < p; ++r)
    comms.emplace_back(r != 3 ? w.fabric(r)
                              : std::make_shared<testing::fault_fabric>(w.fabric(r), 20, [&] { w.kill(3); }));
  std::vector<std::vector<std::byte>> bufs(p, std::vector<std::byte>(1 << 16));
  const auto want = bytes(1 << 16, 5);
  bufs[0] = want;
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
    co_return co_await broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0,
                                 {.alg = algorithm::circulant, .blocks = 64, .timeout = 30s});
  });
  int failed = 0;
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    const auto& x = res[static_cast<std::size_t>(r)];
    if (x) {
      CHECK(bufs[static_cast<std::size_t>(r)] == want);  // finished before it mattered
    } else {
      // The local fabric runs the ranks in turn: one that had not started its call when
      // rank 3 died finds its communicator broken by that failure.
      CHECK((x.error() == errc::peer_lost || x.error() == errc::broken));
      if (r != 3) CHECK(comms[static_cast<std::size_t>(r)].failure_detail().find("rank 3 died") != std::string::npos);
      ++failed;
    }
  }
  CHECK_FALSE(res[3]);
  CHECK(failed >= 3);  // rank 3 and the ranks its blocks are routed through
}


TEST_CASE("posted_op: a receive posted ahead, awaited later; one never awaited is withdrawn", "[runtime][local]") {
  optcast::local::world w(2);
  auto comms = optcast::communicators_of(w);
  std::vector<std::byte> early(64), late(64);
  const auto a = bytes(64, 1), b = bytes(64, 2);
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    if (c.rank() == 1) {
      {  // posted and dropped: it must not take the message meant for the receive below
        posted_op dropped;
        dropped.start(f.recv(0, {7, 2}, early));
      }
      posted_op ahead;
      ahead.start(f.recv(0, {7, 1}, early));
      // Tell rank 0 to go on only now: its sends come after the receive was posted.
      if (auto r = co_await f.send(0, {7, 0}, std::span<const std::byte>()); !r) co_return fail(r.error());
      if (auto r = co_await ahead.finished(); !r || *r != 64) co_return fail(errc::protocol_violation);
      auto r = co_await f.recv(0, {7, 2}, late);
      if (!r) co_return fail(r.error());
      co_return result<void>{};
    }
    if (auto r = co_await f.recv(1, {7, 0}, std::span<std::byte>()); !r) co_return fail(r.error());
    if (auto r = co_await f.send(1, {7, 1}, a); !r) co_return fail(r.error());
    auto r = co_await f.send(1, {7, 2}, b);
    if (!r) co_return fail(r.error());
    co_return result<void>{};
  });
  CHECK(res[0]);
  CHECK(res[1]);
  CHECK(early == a);
  CHECK(late == b);
}

// The fabrics' deadline table, with the warning before each deadline that starts a
// stall's inquiry (common/stall.hpp): timings on a real steady clock, checked by order
// and by lower bounds only, so a slow machine cannot fail them.
TEST_CASE("deadline table: a warning lead() before each deadline, both gone when disarmed", "[runtime]") {
  using clock = std::chrono::steady_clock;
  asio::io_context io;
  std::vector<std::pair<char, std::uint32_t>> events;  // 'w' warning, 'd' deadline
  std::vector<clock::time_point> at;
  detail::deadline_table t(
      io.get_executor(), [&](std::uint32_t s) { events.push_back({'d', s}), at.push_back(clock::now()); },
      [&](std::uint32_t s) { events.push_back({'w', s}), at.push_back(clock::now()); },
      [](clock::duration d) { return d / 2; });
  const auto start = clock::now();
  t.arm(1, 80ms);                        // warns at 40, expires at 80
  const auto gone = t.arm(2, 60ms);      // disarmed before either
  const auto half = t.arm(3, 200ms);     // disarmed after its warning (100), before 200
  t.disarm(gone);
  asio::steady_timer cut(io);
  cut.expires_after(150ms);
  cut.async_wait([&](std::error_code) { t.disarm(half); });
  io.run();  // returns once nothing is armed: the table leaves no timer pending
  using E = std::vector<std::pair<char, std::uint32_t>>;
  CHECK(events == E{{'w', 1}, {'d', 1}, {'w', 3}});
  REQUIRE(at.size() == 3);
  CHECK(at[0] - start >= 40ms);
  CHECK(at[1] - start >= 80ms);
  CHECK(at[2] - start >= 100ms);
}

TEST_CASE("deadline table: no warning when the lead is not inside the deadline", "[runtime]") {
  asio::io_context io;
  std::string events;
  detail::deadline_table t(
      io.get_executor(), [&](std::uint32_t) { events += 'd'; }, [&](std::uint32_t) { events += 'w'; },
      [](std::chrono::steady_clock::duration d) { return d * 2; });
  t.arm(1, 10ms);
  io.run();
  CHECK(events == "d");
  CHECK(detail::stall_watch::lead(std::chrono::seconds(30)) == std::chrono::milliseconds(300));
  CHECK(detail::stall_watch::lead(std::chrono::milliseconds(400)) == std::chrono::milliseconds(100));
}

// keep_idle_timer(): the timer stays on the first (far) deadline while later ones come and
// go; a nearer one must still move it, and a far one that was disarmed fires nothing.
TEST_CASE("deadline table kept idle: a nearer deadline fires on time after 100 far ones", "[runtime]") {
  using clock = std::chrono::steady_clock;
  asio::io_context io;
  std::vector<std::uint32_t> expired;
  clock::time_point near_at{};
  detail::deadline_table t(io.get_executor(), [&](std::uint32_t s) {
    expired.push_back(s);
    if (s == 1000) near_at = clock::now();
  });
  t.keep_idle_timer();
  for (std::uint32_t s = 0; s < 100; ++s) t.disarm(t.arm(s, std::chrono::milliseconds(200 + s)));
  const auto start = clock::now();
  t.arm(1000, 20ms);
  const auto far = t.arm(1001, 5s);
  asio::steady_timer stop(io);
  stop.expires_after(250ms);  // past the far ones that were disarmed, well before 5 s
  stop.async_wait([&](std::error_code) { t.disarm(far), io.stop(); });
  io.run();
  CHECK(expired == std::vector<std::uint32_t>{1000});
  CHECK(near_at - start >= 20ms);
  CHECK(near_at - start < 200ms);  // not held back to the first far deadline
}

TEST_CASE("stall watch without a store: fails at the deadline with what it waits for, or at once", "[runtime]") {
  asio::io_context io;
  std::string waiting = "; receive from rank 2 (collective 5, step 1)";
  std::vector<std::string> failed;
  detail::stall_watch w(io.get_executor(), [&](std::uint32_t seq) { return seq == 5 ? waiting : std::string{}; },
                        [&](const std::string& why) { failed.push_back(why); });
  w.deadline_near(nullptr, 5, "rank 0");  // nobody to ask: nothing yet
  CHECK(failed.empty());
  w.deadline_passed(nullptr, 5, "rank 0");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0] == "deadline of collective 5 passed on rank 0 waiting for receive from rank 2 (collective 5, step 1)");
  w.deadline_passed(nullptr, 6, "rank 0");  // waits on nobody
  REQUIRE(failed.size() == 2);
  CHECK(failed[1] == "deadline of collective 6 passed on rank 0");
  CHECK(io.poll() == 0);  // no timer left behind
}

TEST_CASE("plan cache: one plan per key while alive, and no entry left per key that has gone", "[runtime]") {
  detail::plan_cache<int, std::vector<int>> cache;
  int built = 0;
  auto make = [&](int k) {
    return [&, k] {
      ++built;
      return std::vector<int>(16, k);
    };
  };
  auto held = cache.get(7, make(7));
  CHECK(cache.get(7, make(7)) == held);  // alive: not built again
  CHECK(built == 1);
  // 10,000 keys used once each (as LogP models that vary with the message size are):
  // expired entries are swept, so the map stays small.
  for (int k = 100; k < 10100; ++k) CHECK((*cache.get(k, make(k)))[0] == k);
  CHECK(built == 10001);
  CHECK(cache.entries() <= 64);
  CHECK(cache.get(7, make(7)) == held);  // the one still held survived every sweep
}
