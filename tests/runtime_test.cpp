// Tasks, when_all and the fabric contract on the in-process fabric.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "optcast/when_all.hpp"
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
  long got = 0;
  spawn(counter::many(1'000'000), [&](std::optional<long> v, std::exception_ptr) { got = v.value_or(0); });
  CHECK(got == 1'000'000);
}

TEST_CASE("local fabric: unexpected messages, tag matching and zero bytes", "[runtime][local]") {
  local::world w(2);
  auto comms = w.communicators();
  const auto a = bytes(100, 1), b = bytes(7, 2);
  std::vector<std::byte> ra(100), rb(7), rz;
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    if (c.rank() == 0) {
      // Sent before anything is posted on the other side: buffered as unexpected.
      if (auto r = co_await f.send(1, {5, 1}, a); !r) co_return fail(r.error());
      if (auto r = co_await f.send(1, {5, 2}, b); !r) co_return fail(r.error());
      if (auto r = co_await f.send(1, {5, 3}, std::span<const std::byte>{}); !r) co_return fail(r.error());
    } else {
      // Received in the other order: matched by tag, not by arrival.
      if (auto r = co_await f.recv(0, {5, 3}, rz); !r) co_return fail(r.error());
      if (auto r = co_await f.recv(0, {5, 2}, rb); !r) co_return fail(r.error());
      if (auto r = co_await f.recv(0, {5, 1}, ra); !r) co_return fail(r.error());
    }
    co_return result<void>{};
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
  CHECK(ra == a);
  CHECK(rb == b);
}

TEST_CASE("local fabric: a receive of the wrong size fails without overflow", "[runtime][local]") {
  local::world w(2);
  auto comms = w.communicators();
  const auto big = bytes(64, 3);
  std::vector<std::byte> small(32 + 16, std::byte{0x5A});  // 32 wanted, then a guard
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    if (c.rank() == 0) {
      auto r = co_await f.send(1, {1, 0}, big);
      co_return r ? result<void>{} : fail(r.error());
    }
    auto r = co_await f.recv(0, {1, 0}, std::span(small).first(32));
    co_return r ? result<void>{} : fail(r.error());
  });
  CHECK(res[0]);
  REQUIRE_FALSE(res[1]);
  CHECK(res[1].error() == errc::size_mismatch);
  for (std::size_t i = 32; i < small.size(); ++i) CHECK(small[i] == std::byte{0x5A});
  CHECK(comms[1].get_fabric().last_error().find("64 B") != std::string::npos);
}

TEST_CASE("when_all: a failing send cancels its receive at once", "[runtime][local]") {
  local::world w(2);
  auto comms = w.communicators();
  std::vector<std::byte> buf(8);
  auto start = std::chrono::steady_clock::now();
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    if (c.rank() == 1) co_return result<void>{};
    auto& f = c.get_fabric();
    // The send names a rank that does not exist; the receive would wait forever.
    co_return co_await when_all(f.send(7, {1, 0}, buf), f.recv(1, {1, 0}, buf));
  });
  REQUIRE_FALSE(res[0]);
  CHECK(res[0].error() == errc::invalid_argument);
  CHECK(std::chrono::steady_clock::now() - start < 1s);
}

TEST_CASE("a stalled peer yields a timeout, not a hang", "[runtime][local]") {
  local::world w(3);
  auto comms = w.communicators();
  std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(1000));
  const auto start = std::chrono::steady_clock::now();
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    if (c.rank() == 0) co_return result<void>{};  // the root never joins
    co_return co_await broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0,
                                 {.timeout = 100ms});
  });
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  for (int r : {1, 2}) {
    INFO("rank " << r);
    REQUIRE_FALSE(res[static_cast<std::size_t>(r)]);
    CHECK(res[static_cast<std::size_t>(r)].error() == errc::timeout);
    CHECK(comms[static_cast<std::size_t>(r)].broken());
  }
  // A broken communicator refuses further collectives at once.
  auto again = run(comms[1], broadcast(comms[1], std::span(bufs[1]), 0));
  REQUIRE_FALSE(again);
  CHECK(again.error() == errc::broken);
  CHECK(comms[1].failure() == errc::timeout);
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
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    co_return co_await broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0,
                                 {.blocks = 64, .timeout = 30s});
  });
  int failed = 0;
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    const auto& x = res[static_cast<std::size_t>(r)];
    if (x) {
      CHECK(bufs[static_cast<std::size_t>(r)] == want);  // finished before it mattered
    } else {
      CHECK(x.error() == errc::peer_lost);
      ++failed;
    }
  }
  CHECK_FALSE(res[3]);
  CHECK(failed >= 3);  // rank 3 and the ranks its blocks are routed through
}

TEST_CASE("several collectives in flight on one communicator do not cross-match", "[runtime][local]") {
  const int p = 7;
  local::world w(p);
  auto comms = w.communicators();
  std::vector<std::vector<std::byte>> a(p, std::vector<std::byte>(5000)), b(p, std::vector<std::byte>(5000));
  const auto want_a = bytes(5000, 11), want_b = bytes(5000, 12);
  a[2] = want_a;
  b[5] = want_b;
  std::vector<std::optional<result<void>>> ra(p), rb(p);
  int done = 0;
  // Every rank starts both before either finishes, ranks one after another, so messages
  // of the second reach ranks that have not even started the first. Same sizes: only
  // the tags keep them apart.
  for (std::size_t r = 0; r < p; ++r) {
    spawn(broadcast(comms[r], std::span(a[r]), 2, {.blocks = 5}),
          [&, r](std::optional<result<void>> v, std::exception_ptr) { ra[r] = *v; ++done; });
    spawn(broadcast(comms[r], std::span(b[r]), 5, {.blocks = 3}),
          [&, r](std::optional<result<void>> v, std::exception_ptr) { rb[r] = *v; ++done; });
  }
  auto all = [&] { return done == 2 * p; };
  comms[0].get_fabric().run_until(all);
  for (std::size_t r = 0; r < p; ++r) {
    INFO("rank " << r);
    CHECK(*ra[r]);
    CHECK(*rb[r]);
    CHECK(a[r] == want_a);
    CHECK(b[r] == want_b);
  }
}

TEST_CASE("bad arguments are refused without breaking the communicator", "[runtime][local]") {
  local::world w(3);
  auto comms = w.communicators();
  std::vector<std::byte> buf(10);
  auto r = run(comms[0], broadcast(comms[0], std::span(buf), 3));
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::invalid_argument);
  r = run(comms[0], broadcast(comms[0], std::span(buf), -1));
  CHECK(r.error() == errc::invalid_argument);
  r = run(comms[0], broadcast(comms[0], std::span(buf), 0, {.blocks = -2}));
  CHECK(r.error() == errc::invalid_argument);
  CHECK_FALSE(comms[0].broken());
}
