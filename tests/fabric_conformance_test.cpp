// The fabric contract (fabric.hpp), checked the same way on every fabric: tag matching,
// unexpected messages, zero bytes, size mismatches, failures inside a round, deadlines,
// several collectives in flight. Receives from any peer: fabric_any_peer_test.cpp.
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include "optcast/log.hpp"
#include "optcast/when_all.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

using testing::as_void;
using testing::bytes;

}  // namespace

TEST_CASE("messages match by tag, arrive before their receive, and may be empty", "[local][tcp][fabrics][fabric]") {
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), 2);
  // The large one exceeds any socket buffer, so it is still arriving while posted.
  const auto a = bytes(100, 1), b = bytes(7, 2), big = bytes((8u << 20) + 3, 3);
  std::vector<std::byte> ra(100), rb(7), rz, rbig(big.size());
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    if (c.rank() == 0) {
      for (auto [t, data] : {std::pair{tag{5, 1}, std::span<const std::byte>(a)}, {tag{5, 2}, std::span<const std::byte>(b)},
                             {tag{5, 3}, std::span<const std::byte>()}, {tag{6, 0}, std::span<const std::byte>(big)}})
        if (auto r = co_await f.send(1, t, data); !r) co_return fail(r.error());
      co_return result<void>{};
    }
    // Received in the reverse order of sending: matched by tag, not by arrival.
    if (auto r = co_await f.recv(0, {6, 0}, rbig); !r) co_return fail(r.error());
    if (auto r = co_await f.recv(0, {5, 3}, rz); !r) co_return fail(r.error());
    if (auto r = co_await f.recv(0, {5, 2}, rb); !r) co_return fail(r.error());
    co_return as_void(co_await f.recv(0, {5, 1}, ra));
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
  CHECK(ra == a);
  CHECK(rb == b);
  CHECK(rbig == big);
}

TEST_CASE("messages with equal tags between two ranks arrive in order", "[local][tcp][fabrics][fabric]") {
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), 2);
  std::vector<std::uint32_t> got(50);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    for (std::uint32_t i = 0; i < 50; ++i) {
      result<std::size_t> r;
      if (c.rank() == 0)
        r = co_await f.send(1, {9, 9}, std::as_bytes(std::span(&i, 1)));
      else
        r = co_await f.recv(0, {9, 9}, std::as_writable_bytes(std::span(&got[i], 1)));
      if (!r) co_return fail(r.error());
    }
    co_return result<void>{};
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
  for (std::uint32_t i = 0; i < 50; ++i) CHECK(got[i] == i);
}

TEST_CASE("a receive of the wrong size fails without overflow", "[local][tcp][fabrics][fabric]") {
  const std::string kind = GENERATE(from_range(testing::fabric_kinds()));
  INFO("fabric " << kind);
  const bool posted_first = GENERATE(false, true);
  auto w = testing::make_world(kind, 2);
  const auto big = bytes(64, 3);
  std::vector<std::byte> small(32 + 16, std::byte{0x5A});  // 32 wanted, then a guard
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    if (c.rank() == 0) {
      if (auto r = co_await f.send(1, {1, 0}, big); !r) co_return fail(r.error());
      co_return as_void(co_await f.send(1, {1, 1}, std::span<const std::byte>()));
    }
    if (!posted_first)  // the empty marker comes after the message: it is buffered by now
      if (auto r = co_await f.recv(0, {1, 1}, std::span<std::byte>()); !r) co_return fail(r.error());
    co_return as_void(co_await f.recv(0, {1, 0}, std::span(small).first(32)));
  });
  REQUIRE_FALSE(res[1]);
  CHECK(res[1].error() == errc::size_mismatch);
  for (std::size_t i = 32; i < small.size(); ++i) CHECK(small[i] == std::byte{0x5A});
  const auto& why = w->comms()[1].get_fabric().last_error();
  CHECK(why.find("size mismatch") != std::string::npos);
  if (kind.rfind("ofi:", 0) != 0) CHECK(why.find("64 B") != std::string::npos);  // libfabric may not say
}

TEST_CASE("when_all: a failing send cancels its receive at once", "[local][tcp][fabrics][fabric]") {
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), 2);
  std::vector<std::byte> buf(8);
  const auto start = std::chrono::steady_clock::now();
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    if (c.rank() == 1) co_return result<void>{};
    auto& f = c.get_fabric();
    // The send names a rank that does not exist; the receive would wait forever.
    co_return co_await when_all(f.send(7, {1, 0}, buf), f.recv(1, {1, 0}, buf));
  });
  REQUIRE_FALSE(res[0]);
  CHECK(res[0].error() == errc::invalid_argument);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
}

TEST_CASE("a stalled root yields a timeout, not a hang", "[local][tcp][fabrics][fabric]") {
  // The simulator has no wall-clock deadlines: it finds the stall at once (sim_test).
  const std::string kind = GENERATE(from_range(testing::fabric_kinds_where([](const fabric& f) { return !f.model_time(); })));
  auto w = testing::make_world(kind, 3);
  std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(1000));
  const auto start = std::chrono::steady_clock::now();
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    if (c.rank() == 0) co_return result<void>{};  // the root never joins
    co_return co_await broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0, {.timeout = 200ms});
  });
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  for (int r : {1, 2}) {
    INFO("rank " << r);
    REQUIRE_FALSE(res[static_cast<std::size_t>(r)]);
    CHECK(res[static_cast<std::size_t>(r)].error() == errc::timeout);
    CHECK(w->comms()[static_cast<std::size_t>(r)].broken());
    CHECK(w->comms()[static_cast<std::size_t>(r)].failure_detail().find("deadline") != std::string::npos);
  }
  // A broken communicator refuses further collectives at once.
  auto& c1 = w->comms()[1];
  auto again = run(c1, broadcast(c1, std::span(bufs[1]), 0));
  REQUIRE_FALSE(again);
  CHECK(again.error() == errc::broken);
}

TEST_CASE("several collectives in flight on one communicator do not cross-match", "[local][tcp][fabrics][fabric]") {
  const int p = 7;
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), p);
  std::vector<std::vector<std::byte>> a(p, std::vector<std::byte>(5000)), b(p, std::vector<std::byte>(5000));
  const auto want_a = bytes(5000, 11), want_b = bytes(5000, 12);
  a[2] = want_a;
  b[5] = want_b;
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const auto r = static_cast<std::size_t>(c.rank());
    // Both started before either finishes; same sizes, so only the tags keep them apart.
    std::vector<task<result<void>>> both;
    both.push_back(broadcast(c, std::span(a[r]), 2, {.blocks = 5}));
    both.push_back(broadcast(c, std::span(b[r]), 5, {.blocks = 3}));
    auto out = co_await when_all_tasks(std::move(both));
    for (auto& x : out)
      if (!x) co_return x;
    co_return result<void>{};
  });
  for (std::size_t r = 0; r < p; ++r) {
    INFO("rank " << r);
    CHECK(res[r]);
    CHECK(a[r] == want_a);
    CHECK(b[r] == want_b);
  }
}

TEST_CASE("bad arguments are refused without breaking the communicator", "[local][tcp][fabrics][fabric]") {
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), 3);
  auto& c = w->comms()[0];
  std::vector<std::byte> buf(10);
  for (auto [root, blocks] : {std::pair{3, 0}, {-1, 0}, {0, -2}}) {
    auto r = run(c, broadcast(c, std::span(buf), root, {.blocks = blocks}));
    REQUIRE_FALSE(r);
    CHECK(r.error() == errc::invalid_argument);
  }
  auto r = run(c, send(c, 0, 1, buf));  // to itself
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::invalid_argument);
  CHECK_FALSE(c.broken());
}

TEST_CASE("broadcast over TCP threads, several p, roots and sizes", "[tcp][broadcast]") {
  for (int p : {1, 2, 3, 5, 8}) {
    testing::tcp_test_world w(p);
    for (int root : {0, p - 1, p / 2})
      for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{100003}, std::size_t{3u << 20}}) {
        std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(p), std::vector<std::byte>(size));
        const auto want = bytes(size, root + 1);
        bufs[static_cast<std::size_t>(root)] = want;
        auto res = w.run_all([&](communicator& c) {
          return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root, {.blocks = size > 1000 ? 7 : 1});
        });
        for (int r = 0; r < p; ++r) {
          INFO("p=" << p << " root=" << root << " size=" << size << " rank=" << r);
          REQUIRE(res[static_cast<std::size_t>(r)]);
          REQUIRE(bufs[static_cast<std::size_t>(r)] == want);
        }
      }
  }
}

TEST_CASE("a circulant broadcast opens about 2 log2 p connections per rank", "[tcp][fabric]") {
  const int p = 16;  // q = 4
  testing::tcp_test_world w(p);
  std::vector<std::vector<std::byte>> bufs(p, std::vector<std::byte>(1 << 16));
  auto res = w.run_all([&](communicator& c) {
    return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 5, {.alg = algorithm::circulant, .blocks = 8});
  });
  for (int r = 0; r < p; ++r) {
    REQUIRE(res[static_cast<std::size_t>(r)]);
    const auto n = tcp::connections(w.comms()[static_cast<std::size_t>(r)].get_fabric());
    INFO("rank " << r << ": " << n.outgoing << " out, " << n.incoming << " in");
    CHECK(n.outgoing <= 4);  // to r + skip[k], k < q
    CHECK(n.incoming <= 4);  // from r - skip[k]
  }
}

TEST_CASE("a failing rank tells its peers why", "[local][tcp][fabrics][fabric]") {
  // Through an abort frame and the store (TCP), the store (libfabric), or at once (local).
  const auto kind = GENERATE(from_range(testing::ofi_run() ? std::vector<std::string>{"ofi:tcp;ofi_rxm", "ofi:shm"}
                                                           : std::vector<std::string>{"local", "tcp"}));
  INFO(kind);
  auto wp = testing::make_world(kind, 2);
  auto& w = *wp;
  // One buffer per rank: ranks run on their own threads, and a shared one is a data race.
  std::vector<std::vector<std::byte>> bufs(2, std::vector<std::byte>(8));
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    auto& buf = bufs[static_cast<std::size_t>(c.rank())];
    if (c.rank() == 0) {
      // Open the connection to rank 1 with one message, then fail.
      if (auto r = co_await f.send(1, {3, 0}, buf); !r) co_return fail(r.error());
      f.abort(make_error_code(errc::timeout), "the reason of rank 0");
      co_return result<void>{};
    }
    if (auto r = co_await f.recv(0, {3, 0}, buf); !r) co_return fail(r.error());
    co_return as_void(co_await f.recv(0, {3, 1}, buf));  // never sent: rank 0 failed
  });
  REQUIRE_FALSE(res[1]);
  CHECK(res[1].error() == errc::timeout);  // the failing rank's own error, not a lost peer
  CHECK(w.comms()[1].failure_detail().find("rank 0 failed: the reason of rank 0") != std::string::npos);
}

TEST_CASE("exchange: every rank sends right and receives from the left at once", "[local][tcp][fabrics][fabric]") {
  const int p = 5;
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), p);
  std::vector<std::vector<std::byte>> out(p), in(p, std::vector<std::byte>(3000));
  for (int r = 0; r < p; ++r) out[static_cast<std::size_t>(r)] = bytes(3000, r);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    co_return co_await exchange(c.get_fabric(), (r + 1) % p, out[static_cast<std::size_t>(r)], (r + p - 1) % p,
                                in[static_cast<std::size_t>(r)], {4, 0});
  });
  for (int r = 0; r < p; ++r) {
    REQUIRE(res[static_cast<std::size_t>(r)]);
    CHECK(in[static_cast<std::size_t>(r)] == out[static_cast<std::size_t>((r + p - 1) % p)]);
  }
}

TEST_CASE("one event loop serves a TCP fabric and a libfabric fabric at once", "[ofi][fabric]") {
  // Runs in the libfabric run only (tagged [ofi]), where tests/main.cpp found the provider.
  const int p = 3;
  // Two jobs (a store each: a store admits a rank once), each rank in both, with one
  // io_context per rank (the test's, run by a thread of its own) serving both fabrics.
  store::server tcp_store("127.0.0.1", 0, p, 101), ofi_store("127.0.0.1", 0, p, 202);
  std::vector<std::unique_ptr<asio::io_context>> ios;
  for (int r = 0; r < p; ++r) ios.push_back(std::make_unique<asio::io_context>(1));
  std::vector<std::optional<communicator>> tcp_comms(p), ofi_comms(p);
  {
    std::vector<std::thread> starting;
    for (int r = 0; r < p; ++r)
      starting.emplace_back([&, r] {
        ofi::config c;
        c.rank = r;
        c.size = p;
        c.host_store = false;
        c.store = {"127.0.0.1", tcp_store.port()};
        tcp_comms[static_cast<std::size_t>(r)].emplace(tcp::connect(*ios[static_cast<std::size_t>(r)], c));
        c.store = {"127.0.0.1", ofi_store.port()};
        c.provider = "tcp;ofi_rxm";
        ofi_comms[static_cast<std::size_t>(r)].emplace(ofi::connect(*ios[static_cast<std::size_t>(r)], c));
      });
    for (auto& t : starting) t.join();
  }
  std::vector<std::vector<std::byte>> a(p, std::vector<std::byte>(1 << 20)), b(p, std::vector<std::byte>(1 << 20));
  const auto want_a = bytes(1 << 20, 21), want_b = bytes(1 << 20, 22);
  a[0] = want_a;
  b[2] = want_b;
  std::vector<std::vector<result<void>>> res(p);
  std::vector<std::thread> loops;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  for (auto& io : ios) {
    guards.emplace_back(io->get_executor());
    loops.emplace_back([&io] { io->run(); });
  }
  std::vector<std::thread> ranks;
  for (int r = 0; r < p; ++r)
    ranks.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      auto both = [&]() -> task<std::vector<result<void>>> {
        std::vector<task<result<void>>> ts;
        ts.push_back(broadcast(*tcp_comms[i], std::span(a[i]), 0, {.blocks = 8}));
        ts.push_back(broadcast(*ofi_comms[i], std::span(b[i]), 2, {.blocks = 8}));
        co_return co_await when_all_tasks(std::move(ts));
      };
      // Handed to the rank's loop, which serves both fabrics.
      res[i] = run(*tcp_comms[i], both());
    });
  for (auto& t : ranks) t.join();
  for (auto& io : ios) io->stop();  // the fabrics keep work pending (their accepts)
  for (auto& t : loops) t.join();
  for (std::size_t r = 0; r < p; ++r) {
    INFO("rank " << r);
    REQUIRE(res[r].size() == 2);
    CHECK(res[r][0]);
    CHECK(res[r][1]);
    CHECK(a[r] == want_a);
    CHECK(b[r] == want_b);
  }
  tcp_comms.clear();
  ofi_comms.clear();
}

// libfabric's providers hold unexpected messages where optcast cannot count them, so the
// sender counts what its receiver has confirmed (ofi_fabric.hpp). Both providers: rxm
// (whose eager messages rxm copies without a bound) and shm.
TEST_CASE("libfabric: a sender far ahead of its receiver fails with limit_exceeded; one the receiver keeps up with does not",
          "[ofi][fabric]") {
  const std::string kind = GENERATE(as<std::string>{}, "ofi:tcp;ofi_rxm", "ofi:shm");
  INFO(kind);
  const std::size_t limit = std::size_t{3} << 19, m = 16 << 10;  // 1.5 MiB; 16 KiB messages, rxm's eager size
  testing::process_test_world w(kind, 2, {}, {.unexpected_peer_limit = limit});
  SECTION("kept up with: 8 MiB in 512 KiB chunks, each received before the next is sent") {
    auto res = w.run_all([&](communicator& c) -> task<result<void>> {
      auto& f = c.get_fabric();
      std::vector<std::byte> one(1), got(m);
      for (std::uint32_t chunk = 0; chunk < 16; ++chunk) {
        for (std::uint32_t i = 0; i < 32; ++i) {
          const tag t{7, chunk * 32 + i};
          if (c.rank() == 1) {
            if (auto r = co_await f.send(0, t, bytes(m, static_cast<int>(t.step))); !r) co_return fail(r.error());
          } else {
            if (auto r = co_await f.recv(1, t, got); !r) co_return fail(r.error());
            if (got != bytes(m, static_cast<int>(t.step))) co_return fail(errc::protocol_violation);
          }
        }
        auto r = c.rank() == 1 ? co_await f.recv(0, {8, chunk}, one) : co_await f.send(1, {8, chunk}, one);
        if (!r) co_return fail(r.error());
      }
      co_return result<void>{};
    });
    INFO(w.comms()[0].failure_detail() << " / " << w.comms()[1].failure_detail());
    CHECK(res[0]);
    CHECK(res[1]);
  }
  SECTION("far ahead: 4 MiB the receiver does not receive") {
    // rxm takes the sends (and would hold them all): the limit ends them. shm takes only
    // a few and then holds the sender back: the sends stall until their deadline. Either
    // way the sender never gets more than the limit ahead.
    auto old = set_log_sink([](log_level, std::string_view) {});
    int sent = 0;
    auto res = w.run_all([&](communicator& c) -> task<result<void>> {
      auto& f = c.get_fabric();
      std::vector<std::byte> one(1), big(m);
      const auto d = f.arm_deadline(c.rank() == 0 ? 9 : 7, c.rank() == 0 ? 8s : 3s);
      struct disarm {
        fabric& f;
        std::uint64_t d;
        ~disarm() { f.disarm_deadline(d); }
      } guard{f, d};
      if (c.rank() == 0) co_return as_void(co_await f.recv(1, {9, 0}, one));  // the note never comes
      for (std::uint32_t i = 0; i < 256; ++i, ++sent)
        if (auto r = co_await f.send(0, {7, i}, big); !r) {
          f.abort(r.error(), f.last_error());  // as a collective's failure does: every rank is told
          co_return fail(r.error());
        }
      co_return result<void>{};
    });
    set_log_sink(std::move(old));
    const auto why = w.comms()[1].failure_detail();
    INFO(why << "; " << sent << " sends completed");
    REQUIRE_FALSE(res[1]);
    CHECK(static_cast<std::size_t>(sent) * m <= limit);
    if (kind == "ofi:tcp;ofi_rxm") {
      CHECK(res[1].error() == errc::limit_exceeded);
      CHECK(why.find("rank 0 has confirmed receiving 0 of the") != std::string::npos);
      CHECK(why.find("OPTCAST_UNEXPECTED_PEER_LIMIT") != std::string::npos);
    } else {
      CHECK((res[1].error() == errc::limit_exceeded || res[1].error() == errc::timeout));
    }
    REQUIRE_FALSE(res[0]);  // told, with the cause
    CHECK(res[0].error() == res[1].error());
  }
}
