// The TCP fabric's links through shared memory (net/tcp/memory.cpp): the ranks of a test
// world share a host, so with shared memory on every link between them goes through rings
// (and messages of the threshold and more by single copy), with it off none does; a rank
// that has it off is reached over TCP by ranks that have it on. Counted through
// tcp::connections, the data checked on every rank.
#include <catch2/catch.hpp>

#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/net/tcp.hpp"
#include "optcast/when_all.hpp"
#include "common/cores.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

// Every rank sends `n` bytes to every other and checks what each sent it.
task<result<void>> all_to_all(communicator& c, std::size_t n, std::vector<std::vector<std::byte>>& got) {
  auto& f = c.get_fabric();
  const int p = c.size(), me = c.rank();
  std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(p));
  got.assign(static_cast<std::size_t>(p), std::vector<std::byte>(n));
  std::vector<operation> ops;
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    out[static_cast<std::size_t>(q)] = optcast::testing::bytes(n, me * 16 + q);
    ops.push_back(f.send(q, {1, 0}, out[static_cast<std::size_t>(q)]));
    ops.push_back(f.recv(q, {1, 0}, got[static_cast<std::size_t>(q)]));
  }
  if (auto r = co_await when_all(std::span<operation>(ops)); !r) co_return r;
  for (int q = 0; q < p; ++q)
    if (q != me && got[static_cast<std::size_t>(q)] != optcast::testing::bytes(n, q * 16 + me)) co_return fail(errc::protocol_violation);
  co_return result<void>{};
}

// all_to_all on every rank of w: 100 B (through the rings) and 64 KiB (by single copy:
// the test worlds' threshold is 4 KiB).
void all_to_all_twice(optcast::testing::test_world& w, int p) {
  std::vector<std::vector<std::vector<std::byte>>> got(static_cast<std::size_t>(p));
  for (std::size_t n : {std::size_t{100}, std::size_t{65536}}) {
    auto res = w.run_all([&](communicator& c) { return all_to_all(c, n, got[static_cast<std::size_t>(c.rank())]); });
    for (int r = 0; r < p; ++r) REQUIRE(res[static_cast<std::size_t>(r)]);
  }
}

}  // namespace

TEST_CASE("the ranks of a host talk through shared memory, and over loopback TCP with it off", "[tcp][shm][fabric]") {
  const std::string kind = GENERATE("tcp:shm", "tcp");
  INFO(kind);
  const int p = 4;
  auto w = optcast::testing::make_world(kind, p);
  all_to_all_twice(*w, p);
  for (int r = 0; r < p; ++r) {
    const auto n = tcp::connections(w->comms()[static_cast<std::size_t>(r)].get_fabric());
    INFO("rank " << r << ": " << n.outgoing << " out, " << n.incoming << " in, " << n.in_memory << " in memory, " << n.single_copies
                 << " single copies");
    CHECK(n.outgoing + n.incoming >= p - 1);
    if (kind == "tcp:shm") {
      CHECK(n.in_memory == n.outgoing + n.incoming);
      CHECK(n.single_copies >= static_cast<std::uint64_t>(p - 1));
    } else {
      CHECK(n.in_memory == 0);
      CHECK(n.single_copies == 0);
    }
  }
}

TEST_CASE("a rank with shared memory off is reached over TCP; the others still meet in memory", "[tcp][shm][fabric]") {
  const int p = 3;
  optcast::testing::job_options jo;
  jo.adjust = [](int r, job_config& c) { c.shm = r != 0; };
  auto w = std::make_unique<optcast::testing::process_test_world>("tcp", p, communicator_options{}, jo);
  all_to_all_twice(*w, p);
  const auto n0 = tcp::connections(w->comms()[0].get_fabric()), n1 = tcp::connections(w->comms()[1].get_fabric()),
             n2 = tcp::connections(w->comms()[2].get_fabric());
  CHECK(n0.in_memory == 0);
  // Ranks 1 and 2 each have one or two links between them (in memory) and those with rank 0 (not).
  CHECK(n1.in_memory >= 1);
  CHECK(n2.in_memory >= 1);
  CHECK(n1.in_memory + n2.in_memory <= 4);
  CHECK(n1.outgoing + n1.incoming > n1.in_memory);
  CHECK(n2.outgoing + n2.incoming > n2.in_memory);
}

TEST_CASE("encrypted frames and a job secret's proofs work over the rings too", "[tcp][shm][fabric]") {
  const int p = 3;
  optcast::testing::job_options jo;
  jo.adjust = [](int, job_config& c) { c.shm = true; };
  auto w = std::make_unique<optcast::testing::process_test_world>("tcp:encrypt", p, communicator_options{}, jo);
  all_to_all_twice(*w, p);
  for (int r = 0; r < p; ++r) {
    const auto n = tcp::connections(w->comms()[static_cast<std::size_t>(r)].get_fabric());
    CHECK(n.in_memory == n.outgoing + n.incoming);
    CHECK(n.in_memory > 0);
  }
}

TEST_CASE("a message no reduction combines goes by reference from the lower threshold, where ranks have a core each", "[tcp][shm][fabric]") {
  const int p = 2;
  optcast::testing::job_options jo;
  jo.adjust = [](int, job_config& c) {
    c.shm = true;
    c.shm_copy_min = std::size_t{1} << 20;
    c.shm_move_min = 4096;
  };
  auto w = std::make_unique<optcast::testing::process_test_world>("tcp", p, communicator_options{}, jo);
  auto copies = [&] {
    std::uint64_t n = 0;
    for (auto& c : w->comms()) n += tcp::connections(c.get_fabric()).single_copies;
    return n;
  };
  const std::size_t count = 16 << 10;  // 64 KiB of floats: between the two thresholds
  std::vector<std::vector<float>> buf(p, std::vector<float>(count, 1.0f)), sum(p, std::vector<float>(count));
  auto moved = w->run_all([&](communicator& c) -> task<result<void>> {
    co_return co_await broadcast(c, std::span(buf[static_cast<std::size_t>(c.rank())]), 0);
  });
  for (auto& r : moved) REQUIRE(r);
  const auto after_broadcast = copies();
  auto combined = w->run_all([&](communicator& c) -> task<result<void>> {
    const auto r = static_cast<std::size_t>(c.rank());
    co_return co_await allreduce(c, std::span<const float>(buf[r]), std::span(sum[r]), ops::sum);
  });
  for (auto& r : combined) REQUIRE(r);
  for (auto& s : sum) CHECK(s == std::vector<float>(count, 2.0f));
  // A reduction's partial results go through the rings below shm_copy_min always.
  CHECK(copies() == after_broadcast);
  if (detail::usable_cores() >= p) {
    CHECK(after_broadcast >= 1);
  } else {
    CHECK(after_broadcast == 0);  // ranks share a core: the receipt would wait for a turn on it
  }
}

TEST_CASE("frames larger than a read through the rings: bodies read in parts, the next frames after them", "[tcp][shm][fabric]") {
  const int p = 3;
  optcast::testing::job_options jo;
  jo.adjust = [](int, job_config& c) {
    c.shm = true;
    c.shm_copy_min = c.shm_move_min = std::size_t{1} << 30;  // nothing by reference
  };
  auto w = std::make_unique<optcast::testing::process_test_world>("tcp", p, communicator_options{}, jo);
  for (std::size_t count : {std::size_t{3}, std::size_t{40000}, std::size_t{250000}, std::size_t{7}}) {
    INFO(count << " elements");
    std::vector<std::vector<std::int64_t>> in(p), out(p, std::vector<std::int64_t>(count));
    std::vector<std::int64_t> want(count, 0);
    for (int r = 0; r < p; ++r) {
      in[static_cast<std::size_t>(r)].resize(count);
      for (std::size_t i = 0; i < count; ++i) want[i] += in[static_cast<std::size_t>(r)][i] = static_cast<std::int64_t>(i * 7 + static_cast<std::size_t>(r) * 1000003);
    }
    for (int rep = 0; rep < 3; ++rep) {
      auto res = w->run_all([&](communicator& c) -> task<result<void>> {
        const auto r = static_cast<std::size_t>(c.rank());
        co_return co_await allreduce(c, std::span<const std::int64_t>(in[r]), std::span(out[r]), ops::sum);
      });
      for (int r = 0; r < p; ++r) {
        REQUIRE(res[static_cast<std::size_t>(r)]);
        CHECK(out[static_cast<std::size_t>(r)] == want);
      }
    }
  }
  for (auto& c : w->comms()) CHECK(tcp::connections(c.get_fabric()).single_copies == 0);
}
