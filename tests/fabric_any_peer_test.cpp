// The fabric contract's receives from any peer (fabric.hpp's any_peer), on every fabric
// that takes them (the in-process ones and TCP: these cases run in the suite without
// libfabric, whose fabrics take none): each sender's message taken once and its sender
// named, a named receive posted first served first; and on every fabric of both runs,
// one without them refusing them.
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include "optcast/when_all.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

using testing::as_void;
using testing::bytes;

}  // namespace

TEST_CASE("a receive from any peer takes each sender's message once and names its sender", "[local][tcp][fabric]") {
  // Where a fabric cannot, it refuses (the case below).
  const auto kinds = testing::fabric_kinds_where([](const fabric& f) { return f.receives_from_any(); });
  REQUIRE(!kinds.empty());  // the in-process fabrics and TCP do
  const std::string kind = GENERATE_COPY(from_range(kinds));
  const bool posted_first = GENERATE(false, true);
  INFO("fabric " << kind << (posted_first ? ", receives posted before the sends" : ", messages arrived first"));
  const int p = 4;
  auto w = testing::make_world(kind, p);
  std::array<std::uint32_t, p - 1> got{};
  std::array<int, p - 1> from{};
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    const std::uint32_t mine = 1000u + static_cast<std::uint32_t>(c.rank());
    std::byte go{};
    if (c.rank() != 0) {
      if (posted_first)  // rank 0 says when its receives are posted
        if (auto r = co_await f.recv(0, {8, 1}, std::span(&go, 1)); !r) co_return fail(r.error());
      if (auto r = co_await f.send(0, {7, 0}, std::as_bytes(std::span(&mine, 1))); !r) co_return fail(r.error());
      // Sent after the message on the same connection: once rank 0 has it, the message is there.
      co_return as_void(co_await f.send(0, {8, 0}, std::span<const std::byte>()));
    }
    std::array<operation, p - 1> any;
    for (int i = 0; i < p - 1; ++i)
      any[static_cast<std::size_t>(i)] = f.recv(any_peer, {7, 0}, std::as_writable_bytes(std::span(&got[static_cast<std::size_t>(i)], 1)));
    if (posted_first) {
      std::array<operation, 2 * (p - 1)> all;
      for (int i = 0; i < p - 1; ++i) {
        all[static_cast<std::size_t>(i)] = any[static_cast<std::size_t>(i)];
        all[static_cast<std::size_t>(p - 1 + i)] = f.send(i + 1, {8, 1}, std::span<const std::byte>(&go, 1));
      }
      if (auto r = co_await when_all(std::span<operation>(all)); !r) co_return r;
      for (int i = 0; i < p - 1; ++i) from[static_cast<std::size_t>(i)] = all[static_cast<std::size_t>(i)].peer;
    } else {
      for (int s = 1; s < p; ++s)
        if (auto r = co_await f.recv(s, {8, 0}, std::span<std::byte>()); !r) co_return fail(r.error());
      for (int i = 0; i < p - 1; ++i) {  // one at a time, each awaited in place
        if (auto r = co_await when_all(std::span<operation>(&any[static_cast<std::size_t>(i)], 1)); !r) co_return r;
        from[static_cast<std::size_t>(i)] = any[static_cast<std::size_t>(i)].peer;
      }
    }
    if (posted_first)
      for (int s = 1; s < p; ++s)
        if (auto r = co_await f.recv(s, {8, 0}, std::span<std::byte>()); !r) co_return fail(r.error());
    co_return result<void>{};
  });
  for (const auto& r : res) REQUIRE(r);
  std::vector<int> senders(from.begin(), from.end());
  std::sort(senders.begin(), senders.end());
  CHECK(senders == std::vector<int>{1, 2, 3});
  for (int i = 0; i < p - 1; ++i) CHECK(got[static_cast<std::size_t>(i)] == 1000u + static_cast<std::uint32_t>(from[static_cast<std::size_t>(i)]));
}

TEST_CASE("a receive of a named peer posted before one from any peer takes that peer's first message", "[local][tcp][fabric]") {
  const auto kinds = testing::fabric_kinds_where([](const fabric& f) { return f.receives_from_any(); });
  REQUIRE(!kinds.empty());  // the in-process fabrics and TCP do
  const std::string kind = GENERATE_COPY(from_range(kinds));
  INFO("fabric " << kind);
  auto w = testing::make_world(kind, 2);
  std::uint32_t named = 0, any = 0;
  int any_from = -1;
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    std::byte go{};
    if (c.rank() == 0) {
      if (auto r = co_await f.recv(1, {3, 1}, std::span(&go, 1)); !r) co_return fail(r.error());
      for (std::uint32_t v : {1u, 2u})
        if (auto r = co_await f.send(1, {3, 0}, std::as_bytes(std::span(&v, 1))); !r) co_return fail(r.error());
      co_return result<void>{};
    }
    std::array<operation, 3> ops{f.recv(0, {3, 0}, std::as_writable_bytes(std::span(&named, 1))),
                                 f.recv(any_peer, {3, 0}, std::as_writable_bytes(std::span(&any, 1))),
                                 f.send(0, {3, 1}, std::span<const std::byte>(&go, 1))};
    if (auto r = co_await when_all(std::span<operation>(ops)); !r) co_return r;
    any_from = ops[1].peer;
    co_return result<void>{};
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
  CHECK(named == 1u);
  CHECK(any == 2u);
  CHECK(any_from == 0);
}

TEST_CASE("a fabric that cannot receive from any peer refuses it", "[local][tcp][fabrics][fabric]") {
  const std::string kind = GENERATE(from_range(testing::fabric_kinds()));
  INFO("fabric " << kind);
  auto w = testing::make_world(kind, 2);
  auto& f0 = w->comms()[0].get_fabric();
  std::uint32_t v = 0;
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    if (c.rank() == 1) co_return result<void>{};
    // A send to any peer means nothing anywhere.
    if (auto r = co_await c.get_fabric().send(any_peer, {2, 0}, std::as_bytes(std::span(&v, 1))); r || r.error() != errc::invalid_argument)
      co_return fail(errc::protocol_violation);
    if (c.get_fabric().receives_from_any()) co_return result<void>{};
    co_return as_void(co_await c.get_fabric().recv(any_peer, {2, 0}, std::as_writable_bytes(std::span(&v, 1))));
  });
  if (f0.receives_from_any()) {
    CHECK(res[0]);
  } else {
    REQUIRE_FALSE(res[0]);
    CHECK(res[0].error() == errc::invalid_argument);
  }
}
