// Messages held for receives not yet posted (net/tcp/held.hpp): found by tag in the order
// they came, one collective's looked up alone, emptied nodes reused; and the room the
// TCP fabric gives them by default (job_config::limits_for).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "optcast/net/tcp.hpp"
#include "tcp/held.hpp"
#include "worlds.hpp"

using namespace optcast;
using optcast::tcp::impl::held_message;
using optcast::tcp::impl::held_messages;

namespace {

held_message numbered(std::uint64_t n, std::size_t bytes = 0) {
  held_message m;
  m.arrival = n;
  m.data.resize(bytes, static_cast<std::byte>(n));
  return m;
}

}  // namespace

TEST_CASE("held messages of one tag come out in the order they came, others untouched", "[tcp][held]") {
  held_messages h;
  held_messages::spares s;
  for (std::uint64_t i = 0; i < 30; ++i) h.hold(tag{7, static_cast<std::uint32_t>(i % 3)}, numbered(i), s);
  REQUIRE(h.size() == 30);
  CHECK(h.find(tag{7, 3}) == nullptr);
  CHECK(h.find(tag{8, 0}) == nullptr);
  for (std::uint32_t step : {2u, 0u, 1u}) {
    std::uint64_t last = 0;
    for (int k = 0; k < 10; ++k) {
      REQUIRE(h.find(tag{7, step}) != nullptr);
      CHECK(h.find(tag{7, step})->arrival % 3 == step);
      const auto m = h.take(tag{7, step}, s);
      CHECK(m.arrival % 3 == step);
      if (k) CHECK(m.arrival == last + 3);
      last = m.arrival;
    }
    CHECK(h.find(tag{7, step}) == nullptr);
  }
  CHECK(h.empty());
}

TEST_CASE("one collective's held messages are looked up alone, the largest seq too", "[tcp][held]") {
  held_messages h;
  held_messages::spares s;
  const std::vector<std::uint32_t> seqs = {0, 1, 5, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};
  std::uint64_t n = 0;
  for (auto q : seqs)
    for (std::uint32_t step : {0u, 9u, 0xffffffffu}) h.hold(tag{q, step}, numbered(n++), s);
  for (auto q : seqs) {
    std::vector<std::uint32_t> steps;
    h.each_of(q, [&](tag t, const held_message&) {
      CHECK(t.seq == q);
      steps.push_back(t.step);
    });
    CHECK(steps == std::vector<std::uint32_t>{0, 9, 0xffffffffu});
  }
  int none = 0;
  h.each_of(2, [&](tag, const held_message&) { ++none; });
  h.each_of(0xfffffffdu, [&](tag, const held_message&) { ++none; });
  CHECK(none == 0);
}

TEST_CASE("a taken message's node is kept and used for the next, up to the spares' bound", "[tcp][held]") {
  held_messages h;
  held_messages::spares s;
  for (std::uint32_t i = 0; i < 1000; ++i) h.hold(tag{1, i}, numbered(i, 16), s);
  CHECK(s.nodes.empty());
  for (std::uint32_t i = 0; i < 1000; ++i) {
    const auto m = h.take(tag{1, i}, s);
    CHECK(m.data.size() == 16);
    CHECK(m.data[0] == static_cast<std::byte>(i));
  }
  CHECK(s.nodes.size() == held_messages::spares::most);
  // The spares carry no payload: the taken message took its buffer with it.
  for (const auto& nh : s.nodes) CHECK(nh.mapped().data.capacity() == 0);
  h.hold(tag{2, 0}, numbered(5), s);
  CHECK(s.nodes.size() == held_messages::spares::most - 1);
  REQUIRE(h.find(tag{2, 0}));
  CHECK(h.find(tag{2, 0})->arrival == 5);
}

TEST_CASE("the room for unexpected messages is a share of the host's memory unless set", "[tcp][held]") {
  const std::size_t memory = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t least = std::size_t{64} << 20, most = std::size_t{1} << 30;
  job_config c;
  std::size_t previous = most;
  for (int ranks : {1, 2, 3, 8, 64, 1000, 100000}) {
    const auto l = c.limits_for(ranks);
    INFO(ranks << " ranks on a host of " << memory << " B");
    CHECK(l.total == std::clamp(memory / 4 / static_cast<std::size_t>(ranks), least, most));
    CHECK(l.peer == l.total);
    CHECK(l.total <= previous);  // more ranks on the host, no more room each
    previous = l.total;
  }
  CHECK(c.limits_for(100000).total == least);
  CHECK(c.limits_for(0).total == c.limits_for(1).total);
  c.unexpected_limit = 12345;
  CHECK(c.limits_for(8).total == 12345);
  CHECK(c.limits_for(8).peer == 12345);
  c.unexpected_peer_limit = 99;
  CHECK(c.limits_for(8).peer == 99);
  // From the environment: 0 is automatic, as unset.
  job_config e;
  e.read_rank_env([](const char* n) -> const char* { return std::string_view(n) == "OPTCAST_UNEXPECTED_LIMIT" ? "0" : nullptr; });
  CHECK(e.limits_for(2).total == job_config{}.limits_for(2).total);
}

TEST_CASE("a TCP rank's room is its host's share among the job's ranks there", "[tcp][held]") {
  testing::tcp_test_world w(4);
  const auto want = job_config{}.limits_for(4);
  for (auto& c : w.comms()) {
    const auto got = tcp::unexpected_limits(c.get_fabric());
    CHECK(got.total == want.total);
    CHECK(got.peer == want.peer);
  }
  testing::tcp_test_world set(2, {}, {.unexpected_limit = std::size_t{3} << 20});
  CHECK(tcp::unexpected_limits(set.comms()[0].get_fabric()).total == std::size_t{3} << 20);
  CHECK(tcp::unexpected_limits(set.comms()[1].get_fabric()).peer == std::size_t{3} << 20);
}

TEST_CASE("many messages held under many tags each reach the receive of their own tag", "[tcp][held][fabric]") {
  // 3,000 messages of 3 collectives and 1,000 steps each from rank 0, received by rank 1
  // in the reverse order: every receive finds its own among all the others held.
  testing::tcp_test_world w(2);
  constexpr std::uint32_t steps = 1000;
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    std::array<std::uint32_t, 1> v{};
    if (c.rank() == 0) {
      for (std::uint32_t q = 1; q <= 3; ++q)
        for (std::uint32_t i = 0; i < steps; ++i) {
          v[0] = q * 100000 + i;
          if (auto r = co_await f.send(1, tag{seq_layout::p2p(0, q), i}, std::as_bytes(std::span(v))); !r) co_return fail(r.error());
        }
      if (auto r = co_await f.send(1, tag{seq_layout::p2p(0, 9), 0}, std::as_bytes(std::span(v))); !r) co_return fail(r.error());
    } else {
      // Everything is held once the last (on the same connection) is in.
      if (auto r = co_await f.recv(0, tag{seq_layout::p2p(0, 9), 0}, std::as_writable_bytes(std::span(v))); !r) co_return fail(r.error());
      for (std::uint32_t q = 3; q >= 1; --q)
        for (std::uint32_t i = steps; i-- > 0;) {
          if (auto r = co_await f.recv(0, tag{seq_layout::p2p(0, q), i}, std::as_writable_bytes(std::span(v))); !r) co_return fail(r.error());
          if (v[0] != q * 100000 + i) co_return fail(errc::protocol_violation);
        }
    }
    co_return result<void>{};
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
}
