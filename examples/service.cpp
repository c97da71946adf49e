// A replicated service with optcast inside: each replica (one process) serves clients over
// TCP on its own asio::io_context, run by two threads, while a background
// asio::awaitable coroutine on the same loop allreduces the replicas' request counters and
// takes a configuration blob broadcast by the leader (rank 0). Each replica also runs a
// client that measures its request latency, first with the collectives paused, then
// with them running. When a replica dies (--kill-rank, kill -9 of itself), the others
// report the lost peer, keep serving, shrink to a communicator of themselves and go on
// agreeing on their totals.
//
//   optcast-service --np 4 --duration-ms 4000
//   optcast-service --np 4 --kill-rank 3 --kill-after-ms 2500
//
// The protocol: a client sends "GET\n"; the replica answers
// "replica R served N total T config V\n" (T: the job's total at the last round).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <CLI/CLI.hpp>

#include <optcast/asio.hpp>
#include <optcast/optcast.hpp>

namespace {

using asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct replica_state {
  std::atomic<std::int64_t> served{0};
  std::atomic<std::int64_t> total{0};   // the job's, at the last round
  std::atomic<std::int64_t> config{0};  // the leader's configuration version
  std::atomic<bool> syncing{false};     // the client's phase: collectives running
  std::atomic<bool> lost{false};        // the collectives failed: a peer is gone
  std::atomic<bool> synced{false};      // the collectives' loop has ended (agreed, or lost)
  std::atomic<std::int64_t> served_at_loss{0};
  std::atomic<int> rounds{0}, inconsistent{0}, rounds_after{0};  // rounds_after: after the loss, among the others
  std::atomic<bool> regrouped{false};  // shrunk to the survivors after the loss
  std::mutex mu;
  std::string why;  // of the loss
};

asio::awaitable<void> serve_one(tcp::socket s, int rank, replica_state& st) {
  asio::streambuf in;
  for (;;) {
    auto [ec, n] = co_await asio::async_read_until(s, in, '\n', asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    in.consume(n);
    const auto served = ++st.served;
    std::string reply = "replica " + std::to_string(rank) + " served " + std::to_string(served) + " total " +
                        std::to_string(st.total.load()) + " config " + std::to_string(st.config.load()) + "\n";
    auto [wec, wn] = co_await asio::async_write(s, asio::buffer(reply), asio::experimental::as_tuple(asio::use_awaitable));
    if (wec) co_return;
  }
}

asio::awaitable<void> accept_loop(tcp::acceptor& acc, int rank, replica_state& st) {
  for (;;) {
    auto [ec, s] = co_await acc.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    asio::co_spawn(acc.get_executor(), serve_one(std::move(s), rank, st), asio::detached);
  }
}

// Every period: the job's total of requests served (allreduce), checked to be the same on
// every replica (max and min of it), and every fifth round the leader's configuration.
// When to stop is agreed in the same allreduce (any replica past stop_at): every replica
// makes the same calls, and none leaves while another still waits for it in a round.
// When a round fails (a replica died), the others shrink to a communicator of themselves
// (optcast::async_shrink, on the same loop and connections) and go on with the rounds.
asio::awaitable<void> sync_loop(optcast::communicator& job, replica_state& st, std::chrono::milliseconds period,
                                clock_type::time_point start_at, clock_type::time_point stop_at) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(start_at);
  co_await timer.async_wait(asio::use_awaitable);
  std::deque<optcast::communicator> shrunk;  // kept: the loop's reference stays valid
  optcast::communicator* comm = &job;
  for (int round = 0;; ++round) {
    std::error_code failed;
    try {
      const std::int64_t mine = st.served.load();
      std::int64_t total = 0;
      co_await optcast::async_allreduce(*comm, std::span<const std::int64_t>(&mine, 1), std::span(&total, 1),
                                        optcast::ops::sum, asio::use_awaitable);
      const std::array<std::int64_t, 3> both{total, -total, clock_type::now() >= stop_at ? 1 : 0};
      std::array<std::int64_t, 3> most{};
      co_await optcast::async_allreduce(*comm, std::span<const std::int64_t>(both), std::span<std::int64_t>(most), optcast::ops::max,
                                        asio::use_awaitable);
      if (most[0] != -most[1]) ++st.inconsistent;  // some replica saw another total
      st.total = total;
      if (round % 5 == 0) {
        std::array<char, 64> blob{};
        if (comm->rank() == 0) std::snprintf(blob.data(), blob.size(), "config version %d", round / 5 + 1);
        co_await optcast::async_broadcast(*comm, std::span<char>(blob), 0, asio::use_awaitable);
        int version = 0;
        if (std::sscanf(blob.data(), "config version %d", &version) == 1) st.config = version;
      }
      ++st.rounds;
      if (st.lost) ++st.rounds_after;
      if (most[2]) break;
    } catch (const std::system_error& e) {
      failed = e.code();
    }
    if (failed) {  // a coroutine awaits nothing inside a handler: the shrink comes here
      if (!st.lost) st.served_at_loss = st.served.load();
      {
        std::lock_guard lock(st.mu);
        st.why = optcast::describe(failed, comm->failure_detail());
      }
      st.lost = true;
      std::printf("replica %d: collectives stopped (%s); still serving, shrinking\n", job.rank(), st.why.c_str());
      std::fflush(stdout);
      auto [ec, s] = co_await optcast::async_shrink(*comm, asio::experimental::as_tuple(asio::use_awaitable));
      if (ec || !s) {
        std::printf("replica %d: could not shrink (%s); serving without collectives\n", job.rank(),
                    optcast::describe(ec, comm->last_error()).c_str());
        break;
      }
      shrunk.push_back(std::move(*s));
      comm = &shrunk.back();
      std::string members;
      for (int r = 0; r < comm->size(); ++r) members += (r ? "," : "") + std::to_string(optcast::job_rank(*comm, r));
      std::printf("replica %d: going on with replicas {%s}\n", job.rank(), members.c_str());
      std::fflush(stdout);
      st.regrouped = true;
      continue;  // the next round at once
    }
    timer.expires_after(period);
    co_await timer.async_wait(asio::use_awaitable);
  }
  st.synced = true;
}

std::int64_t percentile(std::vector<std::int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A replicated TCP service that allreduces its counters and broadcasts its configuration with optcast "
               "while serving, and measures its request latency with and without the collectives.",
               "optcast-service"};
  int np = 0, kill_rank = -1;
  long duration_ms = 4000, period_ms = 20, kill_after_ms = 0;
  app.add_option("--np", np, "start N replicas on this machine (without it: one replica of a launched job)")
      ->check(CLI::Range(1, 256));
  app.add_option("--duration-ms", duration_ms, "how long each replica serves")->check(CLI::Range(500, 3600000))
      ->capture_default_str();
  app.add_option("--period-ms", period_ms, "pause between two rounds of collectives")->check(CLI::Range(0, 60000))
      ->capture_default_str();
  app.add_option("--kill-rank", kill_rank, "this replica kills itself (SIGKILL) after --kill-after-ms")
      ->check(CLI::Range(0, 255));
  app.add_option("--kill-after-ms", kill_after_ms, "when --kill-rank dies (default: two thirds of the duration)")
      ->check(CLI::Range(0, 3600000));
  app.footer("The first third of the run serves with the collectives paused, the rest with them running;\n"
             "each replica prints its request latency (p50/p99) in both phases. Start it with --np N,\n"
             "or under a launcher that sets OPTCAST_RANK, OPTCAST_SIZE and OPTCAST_STORE (see docs/RUNNING.md).");
  try {
    app.parse(argc, argv);
    if (np && kill_rank >= np) throw CLI::ValidationError("--kill-rank", "must be below --np");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto status = optcast::launch_local(argc, argv)) return *status;

  try {
    asio::io_context io;
    auto comm = optcast::join(io);  // on the service's loop: optcast never runs it itself
    const int rank = comm.rank();
    replica_state st;
    tcp::acceptor acc(io, {asio::ip::make_address("127.0.0.1"), 0});
    const auto port = acc.local_endpoint().port();
    asio::co_spawn(io, accept_loop(acc, rank, st), asio::detached);

    const auto t0 = clock_type::now();
    const auto sync_from = t0 + std::chrono::milliseconds(duration_ms / 3);
    const auto end = t0 + std::chrono::milliseconds(duration_ms);
    const auto kill_at = t0 + std::chrono::milliseconds(kill_after_ms ? kill_after_ms : duration_ms * 2 / 3);
    asio::co_spawn(io, sync_loop(comm, st, std::chrono::milliseconds(period_ms), sync_from, end), asio::detached);

    std::vector<std::thread> loop;
    for (int i = 0; i < 2; ++i) loop.emplace_back([&] { io.run(); });

    // The client: one request at a time on one connection, its latency by phase.
    std::vector<std::int64_t> quiet_us, busy_us;
    std::int64_t after_loss = 0;
    {
      asio::io_context client_io;
      tcp::socket s(client_io);
      s.connect({asio::ip::make_address("127.0.0.1"), port});
      s.set_option(tcp::no_delay(true));
      asio::streambuf in;
      const std::string get = "GET\n";
      while (clock_type::now() < end) {
        if (rank == kill_rank && clock_type::now() >= kill_at) {
          std::printf("replica %d: killing itself (SIGKILL)\n", rank);
          std::fflush(stdout);
          std::raise(SIGKILL);
        }
        const auto t = clock_type::now();
        asio::write(s, asio::buffer(get));
        const auto n = asio::read_until(s, in, '\n');
        in.consume(n);
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - t).count();
        (t < sync_from ? quiet_us : busy_us).push_back(us);
        if (st.lost) ++after_loss;
      }
    }
    // The collectives end in the round every replica agreed on (or with a lost peer): none
    // is left in flight for a peer to wait on when this one leaves.
    while (!st.synced && clock_type::now() < end + std::chrono::seconds(30)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    io.stop();  // leave() below touches the fabric: no thread may be running the loop
    for (auto& t : loop) t.join();

    std::printf("replica %d: served %lld requests; latency p50/p99 %lld/%lld us without collectives, "
                "%lld/%lld us with them; %d rounds, %d inconsistent totals, config version %lld\n",
                rank, static_cast<long long>(st.served.load()), static_cast<long long>(percentile(quiet_us, 0.5)),
                static_cast<long long>(percentile(quiet_us, 0.99)), static_cast<long long>(percentile(busy_us, 0.5)),
                static_cast<long long>(percentile(busy_us, 0.99)), st.rounds.load(), st.inconsistent.load(),
                static_cast<long long>(st.config.load()));
    if (st.lost) {
      std::printf("replica %d: served %lld requests after losing a peer; %d rounds among the others after it\n", rank,
                  static_cast<long long>(after_loss), st.rounds_after.load());
      std::fflush(stdout);
      if (!st.regrouped) return after_loss > 0 ? 0 : 1;  // it kept serving
    }
    std::fflush(stdout);
    auto left = comm.leave();
    if (!left) {
      std::fprintf(stderr, "replica %d: %s\n", rank, optcast::describe(left.error(), comm.failure_detail()).c_str());
      return 1;
    }
    std::printf("replica %d: the job ended well\n", rank);
    std::fflush(stdout);
    return st.inconsistent.load() == 0 && st.rounds.load() > 0 && (!st.lost || (after_loss > 0 && st.rounds_after > 0)) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optcast-service: %s\n", e.what());
    return 1;
  }
}
