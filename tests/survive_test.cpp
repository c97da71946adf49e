// Surviving a failure (optcast/survive.hpp): revoke, agree and shrink on the in-process
// fabric and over TCP, and the agreement's one decision whatever point of it members die at.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <numeric>
#include <set>

#include <asio/io_context.hpp>

#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "optcast/net/tcp.hpp"
#include "optcast/survive.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

// Every rank's sum of `values[r]` over c: checks the new communicator carries data.
// 8 KiB a rank: above the test worlds' single-copy threshold (4 KiB).
task<result<void>> sum_check(communicator& c, std::int64_t mine, std::int64_t expected) {
  std::vector<std::int64_t> v(1024, mine);
  if (auto r = co_await allreduce(c, std::span<const std::int64_t>(v), std::span<std::int64_t>(v), ops::sum); !r)
    co_return fail(r.error());
  for (const auto x : v)
    if (x != expected) co_return fail(errc::protocol_violation);
  co_return result<void>{};
}

}  // namespace

namespace {

void revoke_case(const std::string& kind) {
  INFO(kind);
  const int p = 4;
  communicator_options o;
  o.timeout = 60s;
  auto w = testing::make_world(kind, p, o);
  std::vector<std::error_code> first(p), later(p);
  std::vector<char> revoked_before(p, 0);  // not vector<bool>: ranks on threads write their own
  std::vector<long long> waited_ms(p, -1);
  std::vector<agreement> decided(p);
  std::vector<int> shrunk_size(p, -1), shrunk_rank(p, -1);
  // tcp:shm moves large messages between ranks of the host by reference, but control
  // messages by value (the revocation, the agreements): counted before the last call.
  const bool by_reference = kind == "tcp:shm";
  std::vector<std::uint64_t> copies_before(p, 0), copies_after(p, 0);
  const auto copies = [](communicator& c) { return tcp::connections(c.get_fabric()).single_copies; };
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    // Rank 1 revokes once out of the barrier: a rank may still be in its last step then.
    auto warm = co_await barrier(c);
    const auto t0 = std::chrono::steady_clock::now();
    if (r == 1) {
      if (!warm) co_return warm;
      revoke(c, "a test's revocation");
    } else if (!warm) {
      first[static_cast<std::size_t>(r)] = warm.error();
      waited_ms[static_cast<std::size_t>(r)] = 0;
    } else {
      // Rank 1 never makes this call: only the revocation can end it. The revocation may
      // also come before the call (a later call: broken); no suspension lies between.
      revoked_before[static_cast<std::size_t>(r)] = c.failure() == errc::revoked;
      std::vector<std::byte> buf(64);
      auto b = co_await broadcast(c, std::span(buf), 1);
      first[static_cast<std::size_t>(r)] = b ? std::error_code() : b.error();
      waited_ms[static_cast<std::size_t>(r)] =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    }
    auto again = co_await barrier(c);
    later[static_cast<std::size_t>(r)] = again ? std::error_code() : again.error();
    auto a = co_await agree(c, r == 2 ? 0x6 : 0x7);
    if (!a) co_return fail(a.error());
    decided[static_cast<std::size_t>(r)] = *a;
    auto s = co_await shrink(c);
    if (!s) co_return fail(s.error());
    shrunk_size[static_cast<std::size_t>(r)] = s->size();
    shrunk_rank[static_cast<std::size_t>(r)] = s->rank();
    if (by_reference) copies_before[static_cast<std::size_t>(r)] = copies(c);
    auto sum = co_await sum_check(*s, r, p * (p - 1) / 2);
    if (by_reference) copies_after[static_cast<std::size_t>(r)] = copies(c);
    co_return sum;
  });
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r << ": " << (res[static_cast<std::size_t>(r)] ? "ok" : res[static_cast<std::size_t>(r)].error().message()) << " "
                  << w->comms()[static_cast<std::size_t>(r)].last_error());
    CHECK(res[static_cast<std::size_t>(r)]);
    if (r != 1) {
      CHECK(first[static_cast<std::size_t>(r)] == (revoked_before[static_cast<std::size_t>(r)] ? errc::broken : errc::revoked));
      CHECK(waited_ms[static_cast<std::size_t>(r)] < 10000);  // not the 60 s deadline
    }
    CHECK(later[static_cast<std::size_t>(r)] == errc::broken);
    CHECK(w->comms()[static_cast<std::size_t>(r)].failure() == errc::revoked);
    CHECK(w->comms()[static_cast<std::size_t>(r)].failure_detail().find("a test's revocation") != std::string::npos);
    CHECK(decided[static_cast<std::size_t>(r)].flag == 0x6);
    CHECK(decided[static_cast<std::size_t>(r)].failed.empty());
    CHECK(shrunk_size[static_cast<std::size_t>(r)] == p);
    CHECK(shrunk_rank[static_cast<std::size_t>(r)] == r);
    if (by_reference) {
      CHECK(copies_before[static_cast<std::size_t>(r)] == 0);
      CHECK(copies_after[static_cast<std::size_t>(r)] > 0);  // the allreduce's were by reference
    }
  }
}

}  // namespace

TEST_CASE("a revoke interrupts every member's pending and later calls at once; agree and shrink go on", "[local][tcp][survive]") {
  revoke_case(GENERATE(as<std::string>{}, "local", "tcp", "tcp:shm"));
}

// A fabric without a survival face (the simulator's) fails as a whole: agree and shrink
// refuse with the reason, and a revocation fails the fabric itself. A split's view of a
// fabric that survives hands on its job fabric's face.
TEST_CASE("a fabric that does not survive refuses agree and shrink; a split hands on the face", "[local][survive]") {
  const int p = 3;
  auto sim = testing::make_world("sim", p, {});
  for (auto& c : sim->comms()) CHECK(c.get_fabric().survival() == nullptr);
  std::vector<std::error_code> agreed(p), shrunk(p);
  std::vector<std::string> why(p);
  sim->run_all([&](communicator& c) -> task<result<void>> {
    const auto R = static_cast<std::size_t>(c.rank());
    auto a = co_await agree(c, 1);
    agreed[R] = a ? std::error_code() : a.error();
    why[R] = c.last_error();
    auto s = co_await shrink(c);
    shrunk[R] = s ? std::error_code() : s.error();
    co_return result<void>{};
  });
  for (int r = 0; r < p; ++r) {
    const auto R = static_cast<std::size_t>(r);
    CHECK(agreed[R] == errc::invalid_argument);
    CHECK(shrunk[R] == errc::invalid_argument);
    CHECK_THAT(why[R], Catch::Contains("cannot agree among survivors"));
  }
  // The revocation fails the whole fabric, not one communicator of it.
  auto& c0 = sim->comms()[0];
  revoke(c0, "no survivors here");
  CHECK(c0.get_fabric().failure() == errc::revoked);
  CHECK_THAT(c0.failure_detail(), Catch::Contains("no survivors here"));

  auto local = testing::make_world("local", p, {});
  std::vector<const survivable*> job_face(p), split_face(p);
  auto res = local->run_all([&](communicator& c) -> task<result<void>> {
    const auto R = static_cast<std::size_t>(c.rank());
    job_face[R] = c.get_fabric().survival();
    auto sub = co_await split(c, c.rank() % 2, c.rank());
    if (!sub) co_return fail(sub.error());
    if (*sub) split_face[R] = (*sub)->get_fabric().survival();
    co_return result<void>{};
  });
  for (int r = 0; r < p; ++r) {
    const auto R = static_cast<std::size_t>(r);
    CHECK(res[R]);
    CHECK(job_face[R] != nullptr);
    CHECK(split_face[R] == job_face[R]);
  }
}

TEST_CASE("on libfabric's rxm, a revoke interrupts every member's calls; agree and shrink go on", "[ofi][survive]") {
  revoke_case("ofi:tcp;ofi_rxm");
}

TEST_CASE("survivors of a killed rank fail naming it, agree on it, and shrink to a communicator that works", "[local][survive]") {
  const int p = 5, victim = 3;
  testing::local_test_world w(p);
  std::vector<std::error_code> lost(p);
  std::vector<std::string> why(p);
  std::vector<std::vector<int>> failed(p);
  std::vector<int> new_rank(p, -2), new_size(p, -2);
  std::vector<std::error_code> evens_after(p), odds_after(p);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    auto half = co_await split(c, r % 2, r);
    if (!half) co_return fail(half.error());
    if (auto s = co_await sum_check(c, r, p * (p - 1) / 2); !s) co_return s;
    if (r == 0) w.world().kill(victim);  // before its part in the next call
    auto s = co_await sum_check(c, r, p * (p - 1) / 2);
    lost[static_cast<std::size_t>(r)] = s ? std::error_code() : s.error();
    why[static_cast<std::size_t>(r)] = c.failure_detail();
    // The halves: the one without the victim goes on; the other is broken.
    auto h = co_await sum_check(**half, r, r % 2 == 0 ? 0 + 2 + 4 : 1 + 3);
    (r % 2 == 0 ? evens_after : odds_after)[static_cast<std::size_t>(r)] = h ? std::error_code() : h.error();
    auto a = co_await agree(c);
    if (!a) co_return fail(a.error());
    failed[static_cast<std::size_t>(r)] = a->failed;
    auto n = co_await shrink(c);
    if (!n) co_return fail(n.error());
    new_rank[static_cast<std::size_t>(r)] = n->rank();
    new_size[static_cast<std::size_t>(r)] = n->size();
    // Twice, and a broadcast from the last rank: the new numbering holds.
    if (auto x = co_await sum_check(*n, r, p * (p - 1) / 2 - victim); !x) co_return x;
    std::vector<std::byte> buf(10000, std::byte{0});
    if (n->rank() == n->size() - 1) std::fill(buf.begin(), buf.end(), std::byte{0x5a});
    if (auto b = co_await broadcast(*n, std::span(buf), n->size() - 1); !b) co_return b;
    if (buf[9999] != std::byte{0x5a}) co_return fail(errc::protocol_violation);
    co_return co_await sum_check(*n, r, p * (p - 1) / 2 - victim);
  });
  CHECK_FALSE(res[victim]);
  for (int r = 0; r < p; ++r) {
    if (r == victim) continue;
    INFO("rank " << r << ": " << (res[static_cast<std::size_t>(r)] ? "ok" : res[static_cast<std::size_t>(r)].error().message()) << " "
                  << w.comms()[static_cast<std::size_t>(r)].last_error());
    CHECK(res[static_cast<std::size_t>(r)]);
    // In the call when the victim died, or told before it began (broken, its cause kept).
    const auto l = lost[static_cast<std::size_t>(r)], o = odds_after[static_cast<std::size_t>(r)];
    CHECK((l == errc::peer_lost || l == errc::broken));
    CHECK(w.comms()[static_cast<std::size_t>(r)].failure() == errc::peer_lost);
    CHECK(why[static_cast<std::size_t>(r)].find("rank 3 died") != std::string::npos);
    if (r % 2 == 0) CHECK_FALSE(evens_after[static_cast<std::size_t>(r)]);
    else CHECK((o == errc::peer_lost || o == errc::broken));
    CHECK(failed[static_cast<std::size_t>(r)] == std::vector<int>{victim});
    CHECK(new_size[static_cast<std::size_t>(r)] == p - 1);
    CHECK(new_rank[static_cast<std::size_t>(r)] == (r < victim ? r : r - 1));
  }
}

namespace {

// One agreement among p in-process ranks, with `victims` killed after `steps` of the
// world's event loop each (in order), driven by hand. Each rank's outcome: its decision's
// (flag, failed), or nothing (it failed).
struct agreement_run {
  std::vector<std::optional<agreement>> decided;
  std::size_t handlers = 0;  // the loop's handlers until every rank had returned
};

agreement_run run_agreement(int p, const std::vector<std::pair<int, std::size_t>>& kills) {
  // Declared before the world: a task still running at the end is told as its fabric goes.
  agreement_run out;
  out.decided.resize(static_cast<std::size_t>(p));
  int done = 0;
  asio::io_context io(1);
  local::world w(p, io);
  auto comms = communicators_of(w);
  for (int r = 0; r < p; ++r)
    spawn([](communicator& c, std::uint64_t flag) -> task<result<agreement>> { co_return co_await agree(c, flag); }(
              comms[static_cast<std::size_t>(r)], ~(std::uint64_t{1} << r)),
          [&, r](std::optional<result<agreement>> v, std::exception_ptr) {
            if (v && *v) out.decided[static_cast<std::size_t>(r)] = **v;
            ++done;
          });
  std::size_t k = 0;
  auto next_kill = kills.begin();
  while (done < p) {
    while (next_kill != kills.end() && next_kill->second <= k) w.kill((next_kill++)->first);
    if (io.run_one() == 0) break;
    ++k;
  }
  while (next_kill != kills.end()) w.kill((next_kill++)->first);
  out.handlers = k;
  io.restart();
  io.poll();  // the messages still on their way, for the sessions that stay after returning
  return out;
}

}  // namespace

TEST_CASE("an agreement decides one thing on every survivor, wherever members die in it", "[local][survive]") {
  const int p = 6;
  const auto calm = run_agreement(p, {});
  for (const auto& d : calm.decided) {
    REQUIRE(d);
    CHECK(d->flag == (~std::uint64_t{0} << p));  // every rank's bit cleared by itself
    CHECK(d->failed.empty());
  }
  INFO("an undisturbed agreement takes " << calm.handlers << " handlers");
  REQUIRE(calm.handlers > 0);
  int runs = 0;
  // One death at every step, of the first coordinator, a middle rank and the last; then
  // two, the second during what the first set off (the next coordinator among them).
  std::vector<std::vector<std::pair<int, std::size_t>>> plans;
  for (std::size_t k = 0; k <= calm.handlers + 1; ++k)
    for (int v : {0, 2, p - 1}) plans.push_back({{v, k}});
  for (std::size_t k = 0; k <= calm.handlers + 1; ++k)
    for (std::size_t d : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
      plans.push_back({{0, k}, {1, k + d}});
      plans.push_back({{1, k}, {0, k + d}});
      plans.push_back({{3, k}, {0, k + d}});
    }
  for (const auto& plan : plans) {
    const auto got = run_agreement(p, plan);
    std::set<int> killed;
    for (auto [v, k] : plan) killed.insert(v);
    std::optional<agreement> first;
    std::string where = "kills:";
    for (auto [v, k] : plan) where += " rank " + std::to_string(v) + " at step " + std::to_string(k);
    INFO(where);
    for (int r = 0; r < p; ++r) {
      if (killed.count(r)) continue;
      INFO("survivor " << r);
      REQUIRE(got.decided[static_cast<std::size_t>(r)]);
      const auto& d = *got.decided[static_cast<std::size_t>(r)];
      if (!first) first = d;
      CHECK(d == *first);
      // The failed are among the killed; the flag has every survivor's bit cleared.
      for (int f : d.failed) CHECK(killed.count(f) == 1);
      for (int s = 0; s < p; ++s)
        if (!killed.count(s)) CHECK((d.flag >> s & 1) == 0);
    }
    ++runs;
  }
  CHECK(runs == static_cast<int>(plans.size()));
}
