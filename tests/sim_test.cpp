// The simulator's timing rules (sim.hpp) on cases worked out by hand, and its failure
// reports: port violations and deadlocks name ranks and rounds instead of hanging.
#include <catch2/catch.hpp>

#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "optcast/net/sim.hpp"
#include "traff/circulant.hpp"
#include "optcast/when_all.hpp"

using namespace optcast;

namespace {

using rank_body = std::function<task<result<void>>(fabric&, std::vector<std::byte>&)>;

// Runs `body` on every rank of a simulated world with a `bytes`-long buffer each.
sim::report simulate(int p, sim::model m, std::size_t bytes, const rank_body& body,
                     std::vector<result<void>>* results = nullptr, sim::world_options opts = {}) {
  sim::world w(p, m, opts);
  auto comms = optcast::communicators_of(w);
  std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(p), std::vector<std::byte>(bytes));
  auto res = optcast::run_all(comms, [&](communicator& c) {
    return body(c.get_fabric(), bufs[static_cast<std::size_t>(c.rank())]);
  });
  if (results) *results = res;
  return w.take_report();
}

result<void> ok(const result<std::size_t>& r) { return r ? result<void>{} : fail(r.error()); }

// Rank v forwards what it got from v - 1 to v + 1.
task<result<void>> chain(fabric& f, std::vector<std::byte>& buf) {
  const int v = f.rank();
  if (v > 0)
    if (auto r = co_await f.recv(v - 1, {0, 0}, buf); !r) co_return fail(r.error());
  if (v + 1 < f.size()) co_return ok(co_await f.send(v + 1, {0, 0}, buf));
  co_return result<void>{};
}

// Rank 0 sends to 1, 2, ... one after the other.
task<result<void>> star(fabric& f, std::vector<std::byte>& buf) {
  if (f.rank() != 0) co_return ok(co_await f.recv(0, {0, 0}, buf));
  for (int d = 1; d < f.size(); ++d)
    if (auto r = co_await f.send(d, {0, 0}, buf); !r) co_return fail(r.error());
  co_return result<void>{};
}

// Binomial tree from rank 0: v receives from v minus its lowest bit, then sends to
// v + 4, v + 2, v + 1 as far as it has zero bits (the broadcast_binomial order).
task<result<void>> binomial(fabric& f, std::vector<std::byte>& buf) {
  const int v = f.rank(), p = f.size();
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      if (auto r = co_await f.recv(v - mask, {0, 0}, buf); !r) co_return fail(r.error());
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p)
      if (auto r = co_await f.send(v + mask, {0, 0}, buf); !r) co_return fail(r.error());
  co_return result<void>{};
}

std::vector<double> finishes(const sim::report& r) {
  std::vector<double> out;
  for (const auto& s : r.ranks) out.push_back(s.finish);
  return out;
}

}  // namespace

TEST_CASE("LogP chain: every hop costs o + L + o", "[sim]") {
  // L = 6, o = 2, g = 4. Rank 1 has the item at 2 + 6 + 2 = 10, rank 2 at 20, rank 3 at
  // 30. A sender is done with its send after o: rank 0 at 2, rank 1 at 12, rank 2 at 22.
  const auto rep = simulate(4, sim::model::logp(6, 2, 4), 8, chain);
  CHECK(rep.finish_time == 30);
  CHECK(finishes(rep) == std::vector<double>{2, 12, 22, 30});
  CHECK(rep.messages == 3);
  CHECK(rep.bytes == 24);
  CHECK(rep.longest_chain == 3);
  CHECK(rep.unreceived == 0);
  CHECK_FALSE(rep.error);
}

TEST_CASE("compute: the model charges local work, real fabrics do not wait", "[sim]") {
  // The chain again, each forwarding rank computing 3 units after its receive: rank 1
  // has the item at 10, sends at 13 (done 15); rank 2 has it at 23, sends at 26 (done
  // 28); rank 3 has it at 36.
  auto computing_chain = [](fabric& f, std::vector<std::byte>& buf) -> task<result<void>> {
    const int v = f.rank();
    if (v > 0) {
      if (auto r = co_await f.recv(v - 1, {0, 0}, buf); !r) co_return fail(r.error());
      if (v + 1 < f.size())
        if (auto r = co_await f.compute(3); !r) co_return fail(r.error());
    }
    if (v + 1 < f.size()) co_return ok(co_await f.send(v + 1, {0, 0}, buf));
    co_return result<void>{};
  };
  auto rep = simulate(4, sim::model::logp(6, 2, 4), 8, computing_chain);
  CHECK(finishes(rep) == std::vector<double>{2, 15, 28, 36});
  CHECK(rep.messages == 3);
  // Under the rounds model too: 3 rounds of work.
  rep = simulate(3, sim::model::rounds(), 8, computing_chain);
  CHECK(finishes(rep) == std::vector<double>{1, 5, 5});
  // A negative duration fails the operation, with the reason.
  std::vector<result<void>> res;
  rep = simulate(1, sim::model::logp(6, 2, 4), 0, [](fabric& f, std::vector<std::byte>&) -> task<result<void>> {
    co_return ok(co_await f.compute(-1));
  }, &res);
  REQUIRE_FALSE(res[0]);
  CHECK(res[0].error() == errc::invalid_argument);
  // Elsewhere it finishes at once.
  optcast::local::world lw(2);
  auto comms = optcast::communicators_of(lw);
  auto lres = optcast::run_all(comms, [](communicator& c) -> task<result<void>> {
    co_return ok(co_await c.get_fabric().compute(1e9));
  });
  CHECK(lres[0]);
  CHECK(lres[1]);
}

TEST_CASE("choosing receivers take the receive posted first, not the message first in", "[sim]") {
  // postal(2): ranks 0 and 1 send to 2 at time 0; both arrive at 2. Rank 2 posts its
  // receive from 1 first, then from 0, and forwards what it got from 1 to rank 3 at
  // once. Arrival order (0's message was sent first) gives rank 2 that one at 2 and
  // 1's at 3, so rank 3 has it at 5; a choosing receiver takes 1's at 2: rank 3 at 4.
  auto body = [](fabric& f, std::vector<std::byte>& buf) -> task<result<void>> {
    const int v = f.rank();
    if (v < 2) co_return ok(co_await f.send(2, {0, static_cast<std::uint32_t>(v)}, buf));
    if (v == 3) co_return ok(co_await f.recv(2, {0, 9}, buf));
    std::vector<std::byte> other(buf.size());
    posted_op from1, from0;
    from1.start(f.recv(1, {0, 1}, buf));
    from0.start(f.recv(0, {0, 0}, other));
    if (auto r = co_await from1.finished(); !r) co_return fail(r.error());
    if (auto r = co_await f.send(3, {0, 9}, buf); !r) co_return fail(r.error());
    co_return ok(co_await from0.finished());
  };
  auto fifo = simulate(4, sim::model::postal(2), 8, body);
  CHECK(finishes(fifo) == std::vector<double>{0, 0, 3, 5});
  auto chosen = simulate(4, sim::model::postal(2).choosing(), 8, body);
  CHECK(finishes(chosen) == std::vector<double>{0, 0, 3, 4});
  CHECK(chosen.model == "postal:2 (1 port, choosing receivers)");
  CHECK_FALSE(chosen.error);
  CHECK(chosen.unreceived == 0);
}

TEST_CASE("LogP star: consecutive sends g apart, or o apart when o > g", "[sim]") {
  // g >= o (L = 6, o = 2, g = 4): sends start at 0, 4, 8, 12 and arrive 10 later; these
  // are the labels of the root's children in Karp et al.'s universal tree, t + ig + L + 2o.
  auto rep = simulate(5, sim::model::logp(6, 2, 4), 1, star);
  CHECK(finishes(rep) == std::vector<double>{14, 10, 14, 18, 22});
  CHECK(rep.longest_chain == 1);
  // o > g (L = 6, o = 5, g = 2): the sending overhead is the bottleneck; sends start at
  // 0, 5, 10, 15 and each arrives 5 + 6 + 5 = 16 after it started.
  rep = simulate(5, sim::model::logp(6, 5, 2), 1, star);
  CHECK(finishes(rep) == std::vector<double>{20, 16, 21, 26, 31});
}

TEST_CASE("LogP with two ports: two channels send at once", "[sim]") {
  // L = 6, o = 2, g = 4, k = 2. Rank 0 starts four sends at once: both channels start one
  // at 0 (ranks 1, 2 have it at 10), and the next ones g later at 4 (ranks 3, 4 at 14);
  // rank 0's last sends complete at 4 + o = 6.
  const auto rep = simulate(5, sim::model::logp(6, 2, 4, 2), 1, [](fabric& f, std::vector<std::byte>& b) -> task<result<void>> {
    if (f.rank() != 0) co_return ok(co_await f.recv(0, {0, 0}, b));
    op_batch<4> all;
    for (int d = 1; d < 5; ++d) all.add(f.send(d, {0, 0}, b));
    co_return co_await all;
  });
  CHECK(finishes(rep) == std::vector<double>{6, 10, 10, 14, 14});
  CHECK(rep.ranks[0].steps == 1);
}

TEST_CASE("postal star and receive gap: one reception per time step", "[sim]") {
  // postal(3): the root sends at 0, 1, 2, 3 (g = 1), each arrives 3 later.
  auto rep = simulate(5, sim::model::postal(3), 1, star);
  CHECK(finishes(rep) == std::vector<double>{3, 3, 4, 5, 6});
  // Four ranks send to rank 0 at time 0: the network hands them over 1 apart.
  rep = simulate(5, sim::model::postal(3), 1, [](fabric& f, std::vector<std::byte>& b) -> task<result<void>> {
    if (f.rank() != 0) co_return ok(co_await f.send(0, {0, 0}, b));
    std::vector<std::vector<std::byte>> in(4, std::vector<std::byte>(1));
    for (int s = 1; s < 5; ++s)
      if (auto r = co_await f.recv(s, {0, 0}, in[static_cast<std::size_t>(s - 1)]); !r) co_return fail(r.error());
    co_return result<void>{};
  });
  CHECK(rep.ranks[0].finish == 6);  // arrivals at 3, 4, 5, 6
  CHECK(rep.ranks[0].received == 4);
}

TEST_CASE("binomial tree under LogP", "[sim]") {
  // P = 8, L = 6, o = 2, g = 4. Rank 0 sends to 4, 2, 1 starting at 0, 4, 8 (its second
  // send is posted when the first completes at 2 and waits for the gap): they have the
  // item at 10, 14, 18. Rank 4 sends to 6 at 10 and to 5 at 14: 20, 24. Rank 2 sends to
  // 3 at 14: 24. Rank 6 sends to 7 at 20: 30. (Karp et al.'s optimal tree takes 24.)
  const auto rep = simulate(8, sim::model::logp(6, 2, 4), 4, binomial);
  CHECK(finishes(rep) == std::vector<double>{10, 18, 16, 24, 16, 24, 22, 30});
  CHECK(rep.finish_time == 30);
  CHECK(rep.longest_chain == 3);
  CHECK(rep.messages == 7);
}

TEST_CASE("binomial tree under LogGP: long messages follow Figure 1", "[sim]") {
  // L = 6, o = 2, g = 4, G = 0.5, 9-byte messages: (9 - 1) G = 4, so one message takes
  // o + 4 + L + o = 14. Rank 0: first send starts at 0, its last byte leaves at 6 (the
  // send completes), the next may start at 6 + g - o = 8 (Figure 1: the next first byte
  // enters g after the last one, at o + (k-1)G + g = 10). So rank 4 has it at 14, rank 2
  // at 8 + 14 = 22, rank 1 at 16 + 14 = 30 (rank 0 done at 16 + 6 = 22). Rank 4: to 6 at
  // 14 -> 28, done at 20; to 5 at max(20, 20 + 4 - 2) = 22 -> 36, done at 28. Rank 2:
  // to 3 at 22 -> 36, done at 28. Rank 6: to 7 at 28 -> 42, done at 34.
  const auto rep = simulate(8, sim::model::loggp(6, 2, 4, 0.5), 9, binomial);
  CHECK(finishes(rep) == std::vector<double>{22, 30, 28, 36, 28, 36, 34, 42});
  CHECK(rep.bytes == 7 * 9);
}

TEST_CASE("rounds: a circulant broadcast takes n - 1 + ceil(log2 p) rounds", "[sim]") {
  for (int p : {2, 3, 17, 64, 100}) {
    for (int n : {1, 4, 9}) {
      INFO("p " << p << " n " << n);
      sim::world w(p, sim::model::rounds());
      auto comms = optcast::communicators_of(w);
      std::vector<std::vector<int>> bufs(static_cast<std::size_t>(p), std::vector<int>(50));
      for (int i = 0; i < 50; ++i) bufs[3 % static_cast<std::size_t>(p)][static_cast<std::size_t>(i)] = i * 7 + 1;
      auto res = optcast::run_all(comms, [&](communicator& c) {
        return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 3 % p,
                         {.alg = algorithm::circulant, .blocks = n});
      });
      for (auto& r : res) REQUIRE(r);
      for (auto& b : bufs) CHECK(b == bufs[3 % static_cast<std::size_t>(p)]);
      const auto rep = w.take_report();
      CHECK(rep.rounds == static_cast<std::uint64_t>(n - 1 + circulant::ceil_log2(p)));
      CHECK_FALSE(rep.error);
      CHECK(rep.unreceived == 0);
    }
  }
}

TEST_CASE("rounds: two sends at once on one port is a port violation", "[sim]") {
  std::vector<result<void>> res;
  const auto rep = simulate(3, sim::model::rounds(), 4, [](fabric& f, std::vector<std::byte>& b) -> task<result<void>> {
    if (f.rank() == 0) co_return co_await when_all(f.send(1, {0, 0}, b), f.send(2, {0, 0}, b));
    co_return ok(co_await f.recv(0, {0, 0}, b));
  }, &res);
  REQUIRE(rep.error == errc::port_violation);
  CHECK(rep.error_detail.find("round 0") != std::string::npos);
  CHECK(rep.error_detail.find("rank 0 -> 2") != std::string::npos);
  CHECK(rep.error_detail.find("rank 0 already sends") != std::string::npos);
  for (auto& r : res) {
    REQUIRE_FALSE(r);
    CHECK(r.error() == errc::port_violation);
  }
  // Two ports allow it, in one round.
  const auto two = simulate(3, sim::model::rounds(2), 4, [](fabric& f, std::vector<std::byte>& b) -> task<result<void>> {
    if (f.rank() == 0) co_return co_await when_all(f.send(1, {0, 0}, b), f.send(2, {0, 0}, b));
    co_return ok(co_await f.recv(0, {0, 0}, b));
  });
  CHECK_FALSE(two.error);
  CHECK(two.rounds == 1);
}

TEST_CASE("rounds: two messages into one port in one round is a port violation", "[sim]") {
  const auto rep = simulate(3, sim::model::rounds(), 4, [](fabric& f, std::vector<std::byte>& b) -> task<result<void>> {
    if (f.rank() != 0) co_return ok(co_await f.send(0, {0, 0}, b));
    std::vector<std::byte> other(4);
    co_return co_await when_all(f.recv(1, {0, 0}, b), f.recv(2, {0, 0}, other));
  });
  REQUIRE(rep.error == errc::port_violation);
  CHECK(rep.error_detail.find("rank 0 already receives") != std::string::npos);
}

TEST_CASE("a deadlock is reported with the waiting ranks, not a hang", "[sim]") {
  std::vector<result<void>> res;
  // Ranks 0 and 1 each wait for the other first; rank 2 has nothing to do.
  const auto rep = simulate(3, sim::model::logp(5, 1, 2), 4, [](fabric& f, std::vector<std::byte>& b) -> task<result<void>> {
    if (f.rank() == 2) co_return result<void>{};
    const int other = 1 - f.rank();
    if (auto r = co_await f.recv(other, {7, 3}, b); !r) co_return fail(r.error());
    co_return ok(co_await f.send(other, {7, 3}, b));
  }, &res);
  REQUIRE(rep.error == errc::deadlock);
  CHECK(rep.error_detail.find("rank 0 waits for receive of 4 B from rank 1 (collective 7, step 3)") != std::string::npos);
  CHECK(rep.error_detail.find("rank 1 waits for receive of 4 B from rank 0 (collective 7, step 3)") != std::string::npos);
  CHECK(res[0].error() == errc::deadlock);
  CHECK(res[1].error() == errc::deadlock);
  CHECK(res[2]);
}

TEST_CASE("a message nobody receives is counted", "[sim]") {
  const auto rep = simulate(2, sim::model::rounds(), 4, [](fabric& f, std::vector<std::byte>& b) -> task<result<void>> {
    if (f.rank() == 0) co_return ok(co_await f.send(1, {0, 0}, b));
    co_return result<void>{};
  });
  CHECK(rep.unreceived == 1);
  CHECK_FALSE(rep.error);
}

TEST_CASE("the same program gives the same trace", "[sim]") {
  auto once = [] {
    sim::world w(37, sim::model::loggp(3, 1, 2, 0.25));
    auto comms = optcast::communicators_of(w);
    std::vector<std::vector<std::byte>> bufs(37, std::vector<std::byte>(1000));
    optcast::run_all(comms, [&](communicator& c) {
      return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 5, {.alg = algorithm::circulant, .blocks = 7});
    });
    return w.take_report().json();
  };
  CHECK(once() == once());
}

TEST_CASE("reset starts the clock and the statistics again", "[sim]") {
  sim::world w(4, sim::model::postal(2));
  auto comms = optcast::communicators_of(w);
  std::vector<std::vector<std::byte>> bufs(4, std::vector<std::byte>(10));
  auto bcast = [&](communicator& c) {
    return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0, {.alg = algorithm::binomial});
  };
  optcast::run_all(comms, bcast);
  const auto first = w.take_report();
  w.reset();
  CHECK(w.now() == 0);
  optcast::run_all(comms, bcast);
  const auto second = w.take_report();
  CHECK(first.json() == second.json());
  // postal(2), binomial from 0 on 4 ranks: 0 -> 2 at 0 (arrives 2), 0 -> 1 at 1 (3),
  // 2 -> 3 at 2 (4).
  CHECK(second.finish_time == 4);
}

TEST_CASE("model specifications parse, and bad ones say why", "[sim]") {
  std::string why;
  auto m = sim::model::parse("loggp:6,2,4,0.5", 2, &why);
  REQUIRE(m);
  CHECK(m->kind == sim::model_kind::loggp);
  CHECK(m->G == 0.5);
  CHECK(m->ports == 2);
  CHECK(sim::model::parse("postal:3", 1)->L == 3);
  CHECK(sim::model::parse("rounds", 1)->kind == sim::model_kind::rounds);
  for (const char* bad : {"logp:1,2", "logp:1,x,3", "postal:0", "loggp:1,2,3,-1", "hypercube", "rounds:3", "logp:1,0,0"}) {
    INFO(bad);
    why.clear();
    CHECK_FALSE(sim::model::parse(bad, 1, &why));
    CHECK_FALSE(why.empty());
  }
  CHECK_FALSE(sim::model::parse("rounds", 0, &why));
}

TEST_CASE("100,000 simulated ranks broadcast one block", "[sim][scale]") {
  const int p = 100000;
  sim::world w(p, sim::model::rounds(), {.move_payload = false});
  auto comms = optcast::communicators_of(w);
  std::vector<std::byte> shared(8);  // timing only: every rank may use one buffer
  auto res = optcast::run_all(comms, [&](communicator& c) {
    return broadcast(c, std::span(shared), 0, {.alg = algorithm::circulant, .blocks = 1});
  });
  for (auto& r : res) REQUIRE(r);
  const auto rep = w.take_report();
  CHECK(rep.rounds == 17);
  CHECK(rep.messages == static_cast<std::uint64_t>(p - 1));
}

TEST_CASE("recorded messages carry the times of each phase, as the rules give them", "[sim]") {
  const sim::world_options rec{.record = true};
  SECTION("LogP star: the second send waits for the gap") {
    // L = 6, o = 2, g = 4. Rank 0 posts the send to 1 at 0: overhead 0..2, first = last
    // = 2 (G = 0), next start max(0 + 2, 2 + 4 - 2) = 4. Rank 1's window opens at 8 and
    // its overhead ends at 10. The send to 2, posted when the first completed (2), starts
    // at 4: window 12, available 14.
    const auto r = simulate(3, sim::model::logp(6, 2, 4), 8, star, nullptr, rec);
    REQUIRE(r.log.size() == 2);
    const auto& a = r.log[0];
    const auto& b = r.log[1];
    CHECK((a.src == 0 && a.dst == 1 && b.src == 0 && b.dst == 2));
    CHECK((a.posted == 0 && a.start == 0 && a.first == 2 && a.last == 2 && a.window == 8 && a.rx_start == 8 &&
           a.available == 10 && a.received == 10));
    CHECK((b.posted == 2 && b.start == 4 && b.first == 6 && b.window == 12 && b.available == 14 && b.received == 14));
    CHECK((a.bytes == 8 && a.src_data != 0 && a.dst_data != 0));
    CHECK(r.local.empty());
  }
  SECTION("LogP: two messages for one receiver, the second waits g in the network") {
    // Ranks 1 and 2 send to 0 at 0; both reach it at 8. The first window is [8, 8], the
    // next one opens g = 4 later: 12, overhead to 14.
    const auto r = simulate(3, sim::model::logp(6, 2, 4), 8, [](fabric& f, std::vector<std::byte>& buf) -> task<result<void>> {
      if (f.rank() != 0) co_return ok(co_await f.send(0, {0, 0}, buf));
      for (int s = 1; s < 3; ++s)
        if (auto x = co_await f.recv(s, {0, 0}, buf); !x) co_return fail(x.error());
      co_return result<void>{};
    }, nullptr, rec);
    REQUIRE(r.log.size() == 2);
    std::vector<double> windows{r.log[0].window, r.log[1].window}, avail{r.log[0].available, r.log[1].available};
    std::sort(windows.begin(), windows.end());
    std::sort(avail.begin(), avail.end());
    CHECK(windows == std::vector<double>{8, 12});
    CHECK(avail == std::vector<double>{10, 14});
  }
  SECTION("rounds: a chain moves one hop a round; idle rounds are recorded") {
    const auto r = simulate(3, sim::model::rounds(), 8, [](fabric& f, std::vector<std::byte>& buf) -> task<result<void>> {
      if (f.rank() == 2) (void)co_await f.idle_round();
      co_return co_await chain(f, buf);
    }, nullptr, rec);
    REQUIRE(r.log.size() == 2);
    CHECK((r.log[0].start == 0 && r.log[0].available == 1 && r.log[1].start == 1 && r.log[1].available == 2));
    REQUIRE(r.local.size() == 1);
    CHECK((r.local[0].rank == 2 && !r.local[0].compute && r.local[0].start == 0 && r.local[0].end == 1));
  }
  SECTION("rounds: a run of idle rounds lasts as many rounds, recorded one by one") {
    // Rank 1 idles 3 rounds in one wait, then receives: the message, sent in round 0
    // (done at 1), waits for it and is taken when the receive is posted, at 3.
    const auto r = simulate(2, sim::model::rounds(), 8, [](fabric& f, std::vector<std::byte>& buf) -> task<result<void>> {
      if (f.rank() == 0) co_return ok(co_await f.send(1, {0, 0}, buf));
      if (auto x = co_await f.idle_rounds(3); !x) co_return fail(x.error());
      co_return ok(co_await f.recv(0, {0, 0}, buf));
    }, nullptr, rec);
    CHECK(finishes(r) == std::vector<double>{1, 3});
    REQUIRE(r.local.size() == 3);
    for (int i = 0; i < 3; ++i) {
      const auto& l = r.local[static_cast<std::size_t>(i)];
      CHECK((l.rank == 1 && !l.compute && l.start == i && l.end == i + 1));
    }
    // Under LogP an idle round takes no time.
    const auto q = simulate(1, sim::model::logp(6, 2, 4), 0, [](fabric& f, std::vector<std::byte>&) -> task<result<void>> {
      co_return ok(co_await f.idle_rounds(5));
    });
    CHECK(finishes(q) == std::vector<double>{0});
  }
  SECTION("off by default") {
    const auto r = simulate(3, sim::model::logp(6, 2, 4), 8, star);
    CHECK(r.log.empty());
    CHECK(r.messages == 2);
  }
}

TEST_CASE("run_all: when making a task throws, the tasks already started fail and finish before it rethrows", "[sim]") {
  sim::world w(4, sim::model::rounds());
  auto comms = optcast::communicators_of(w);
  std::vector<std::vector<std::byte>> bufs(4, std::vector<std::byte>(16));
  int made = 0;
  CHECK_THROWS_AS(optcast::run_all(comms,
                                   [&](communicator& c) {
                                     if (c.rank() == 2) throw std::runtime_error("no task for rank 2");
                                     ++made;
                                     return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0, {});
                                   }),
                  std::runtime_error);
  CHECK(made == 2);
  // Ranks 0 and 1 had operations queued: failed, not left to point into freed frames.
  for (int r : {0, 1}) CHECK(comms[static_cast<std::size_t>(r)].failure() == make_error_code(errc::cancelled));
}
