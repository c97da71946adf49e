// The Asio completion-token forms (optcast/asio.hpp): each kind of token on the local
// and TCP fabrics with every result checked, cancellation in the middle of a call, and
// the simulator's refusal.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include "optcast/asio.hpp"
#include "asio_loops.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;
using testing::run_on_loops;

namespace {

std::vector<std::int64_t> values(int r, std::size_t n) {
  std::vector<std::int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int64_t>(i) * 3 + r;
  return v;
}

const std::string secret_of_three = "the secret of a job of three ranks";

// p TCP ranks on the caller's `io` (bootstrapped without running it), meeting in `server`.
std::vector<communicator> ranks_on(asio::io_context& io, store::server& server, int p) {
  // Concurrently: a rank's connect returns once every rank has joined (the job's layout).
  std::vector<std::shared_ptr<fabric>> fabrics(static_cast<std::size_t>(p));
  std::vector<std::thread> joining;
  for (int r = 0; r < p; ++r)
    joining.emplace_back([&, r] {
      job_config c;
      c.rank = r;
      c.size = p;
      c.store = {"127.0.0.1", server.port()};
      c.host_store = false;
      c.secret = secret_of_three;
      fabrics[static_cast<std::size_t>(r)] = tcp::connect(io, c);
    });
  for (auto& t : joining) t.join();
  std::vector<communicator> comms;
  for (auto& f : fabrics) comms.emplace_back(std::move(f));
  return comms;
}

}  // namespace

TEST_CASE("every completion token, on the local and TCP fabrics", "[local][tcp][asio]") {
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  INFO(kind);
  const int p = 4;
  const std::size_t n = 5000;
  auto w = testing::make_asio_world(kind, p);
  auto& comms = w->comms();

  std::vector<std::int64_t> want_sum(n, 0);
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < n; ++i) want_sum[i] += values(r, n)[i];

  SECTION("use_awaitable, as_tuple and deferred, from asio::awaitable coroutines") {
    std::vector<std::vector<std::int64_t>> sums(p), gathered(p);
    std::vector<std::vector<std::byte>> bufs(p);
    std::vector<double> total(p, 0);
    std::vector<std::string> errors(p);
    std::vector<int> sub_sizes(p, 0);
    std::vector<std::atomic<bool>> finished(p);
    run_on_loops(*w, kind, [&](asio::io_context& io, int r) {
      asio::co_spawn(
          io,
          [&, r]() -> asio::awaitable<void> {
            auto& c = comms[static_cast<std::size_t>(r)];
            const auto R = static_cast<std::size_t>(r);
            try {
              const auto in = values(r, n);
              sums[R].assign(n, -1);
              co_await async_allreduce(c, std::span<const std::int64_t>(in), std::span(sums[R]), ops::sum,
                                       asio::use_awaitable);
              co_await async_barrier(c, asio::use_awaitable);
              bufs[R] = r == 2 ? testing::bytes(70000, 9) : std::vector<std::byte>(70000);
              auto [ec] = co_await async_broadcast(c, std::span(bufs[R]), 2, asio::experimental::as_tuple(asio::use_awaitable));
              if (ec) errors[R] += "broadcast: " + ec.message() + "; ";
              gathered[R].assign(static_cast<std::size_t>(p), -1);
              const std::int64_t mine = r * 10;
              auto op = async_allgather(c, std::span<const std::int64_t>(&mine, 1), std::span(gathered[R]),
                                        asio::experimental::deferred);
              co_await std::move(op)(asio::use_awaitable);
              // A value-returning call: the value is what co_await gives.
              total[R] = co_await async_run(c, summation<double>(c, 100, [](std::int64_t i) { return double(i); }, ops::sum),
                                            asio::use_awaitable);
              auto sub = co_await async_split(c, r % 2, r, asio::use_awaitable);
              sub_sizes[R] = sub ? sub->size() : -1;
            } catch (const std::system_error& e) {
              errors[R] += e.what();
            }
            finished[R] = true;
          },
          asio::detached);
    }, [&](int r) { return finished[static_cast<std::size_t>(r)].load(); });
    std::vector<std::int64_t> want_gather(p);
    for (int r = 0; r < p; ++r) want_gather[static_cast<std::size_t>(r)] = r * 10;
    for (int r = 0; r < p; ++r) {
      const auto R = static_cast<std::size_t>(r);
      INFO("rank " << r << ": " << errors[R]);
      CHECK(errors[R].empty());
      CHECK(sums[R] == want_sum);
      CHECK(bufs[R] == testing::bytes(70000, 9));
      CHECK(gathered[R] == want_gather);
      if (r == 0) CHECK(total[R] == 4950.0);  // the summation's result is the root's
      CHECK(sub_sizes[R] == 2);
    }
  }

  SECTION("plain callbacks, invoked from the loop, never inside the call") {
    std::vector<std::vector<std::int64_t>> sums(p);
    std::vector<int> calls(p, 0);
    std::vector<char> inline_call(p, 0), initiating(p, 0);
    std::vector<std::error_code> ecs(p);
    std::vector<std::atomic<bool>> finished(p);
    run_on_loops(*w, kind, [&](asio::io_context&, int r) {
      const auto R = static_cast<std::size_t>(r);
      auto in = std::make_shared<std::vector<std::int64_t>>(values(r, n));
      sums[R].assign(n, -1);
      initiating[R] = 1;
      async_allreduce(comms[R], std::span<const std::int64_t>(*in), std::span(sums[R]), ops::sum,
                      [&, R, in](std::error_code ec) {
                        if (initiating[R]) inline_call[R] = 1;
                        ecs[R] = ec;
                        ++calls[R];
                        finished[R] = true;
                      });
      initiating[R] = 0;
    }, [&](int r) { return finished[static_cast<std::size_t>(r)].load(); });
    for (int r = 0; r < p; ++r) {
      const auto R = static_cast<std::size_t>(r);
      INFO("rank " << r);
      CHECK(calls[R] == 1);
      CHECK_FALSE(inline_call[R]);
      CHECK_FALSE(ecs[R]);
      CHECK(sums[R] == want_sum);
    }
  }

  SECTION("use_future, waited for on another thread than the loop's") {
    std::vector<std::vector<std::int64_t>> sums(p);
    std::vector<std::vector<std::int64_t>> ins(p);
    std::vector<std::future<void>> futures;
    std::vector<std::thread> loops;
    std::vector<std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>>> guards;
    std::vector<asio::io_context*> ios;
    if (kind == "local")
      ios.push_back(&static_cast<testing::local_test_world&>(*w).world().io());
    else
      for (int r = 0; r < p; ++r) ios.push_back(&static_cast<testing::process_test_world&>(*w).io(r));
    for (auto* io : ios) {
      io->restart();
      guards.push_back(std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(io->get_executor()));
      loops.emplace_back([io] { io->run(); });
    }
    for (int r = 0; r < p; ++r) {
      const auto R = static_cast<std::size_t>(r);
      ins[R] = values(r, n);
      sums[R].assign(n, -1);
      futures.push_back(async_allreduce(comms[R], std::span<const std::int64_t>(ins[R]), std::span(sums[R]), ops::sum,
                                        asio::use_future));
    }
    std::vector<std::string> errors(p);
    for (int r = 0; r < p; ++r) {
      try {
        futures[static_cast<std::size_t>(r)].get();
      } catch (const std::system_error& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    }
    for (auto* io : ios) io->stop();  // the fabrics keep work pending: run() would not return
    for (auto& t : loops) t.join();
    guards.clear();
    for (int r = 0; r < p; ++r) {
      INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
      CHECK(errors[static_cast<std::size_t>(r)].empty());
      CHECK(sums[static_cast<std::size_t>(r)] == want_sum);
    }
  }
}

TEST_CASE("a cancelled call ends with cancelled, and every rank ends, told why", "[local][tcp][asio]") {
  using namespace asio::experimental::awaitable_operators;
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  INFO(kind);
  const int p = 3;
  auto w = testing::make_asio_world(kind, p);
  auto& comms = w->comms();
  std::vector<std::error_code> got(p);
  std::vector<int> winner(p, -1);
  std::vector<std::chrono::milliseconds> took(p);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::atomic<bool>> finished(p);
  run_on_loops(*w, kind, [&](asio::io_context& io, int r) {
    asio::co_spawn(
        io,
        [&, r]() -> asio::awaitable<void> {
          auto& c = comms[static_cast<std::size_t>(r)];
          std::vector<std::byte> buf(1000);
          // Nobody sends: rank 0 gives up after 200 ms; the others wait for what rank 0
          // never sends either, until its cancellation reaches them.
          if (r == 0) {
            asio::steady_timer timer(co_await asio::this_coro::executor, 200ms);
            auto which = co_await (async_recv(c, 1, 5, std::span(buf), asio::experimental::as_tuple(asio::use_awaitable)) ||
                                   timer.async_wait(asio::use_awaitable));
            winner[0] = static_cast<int>(which.index());
            got[0] = c.failure();
          } else {
            auto [ec] = co_await async_recv(c, 0, 6, std::span(buf), asio::experimental::as_tuple(asio::use_awaitable));
            got[static_cast<std::size_t>(r)] = ec;
          }
          took[static_cast<std::size_t>(r)] =
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
          finished[static_cast<std::size_t>(r)] = true;
        },
        asio::detached);
  }, [&](int r) { return finished[static_cast<std::size_t>(r)].load(); });
  CHECK(winner[0] == 1);  // the timer
  CHECK(got[0] == errc::cancelled);
  CHECK(comms[0].broken());
  CHECK(comms[0].failure_detail().find("cancelled by its caller") != std::string::npos);
  for (int r = 1; r < p; ++r) {
    INFO("rank " << r << ": " << comms[static_cast<std::size_t>(r)].failure_detail());
    CHECK(got[static_cast<std::size_t>(r)]);
    CHECK(took[static_cast<std::size_t>(r)] < 10s);  // not the 120 s deadline
    CHECK(comms[static_cast<std::size_t>(r)].failure_detail().find("cancelled by its caller") != std::string::npos);
  }
}

TEST_CASE("the simulator refuses asynchronous calls: it has no event loop to run them on", "[sim][asio]") {
  testing::sim_test_world w(2);
  std::vector<std::byte> buf(8);
  CHECK_THROWS_AS(async_broadcast(w.comms()[0], std::span(buf), 0, [](std::error_code) {}), std::logic_error);
}

TEST_CASE("ranks on the caller's io_context, run by 4 threads beside the service's own handlers", "[tcp][asio]") {
  // One io_context, as a service has, run by 4 threads; 3 TCP ranks on it (each fabric on
  // a strand of its own), called with the blocking run() from other threads and with
  // use_awaitable from coroutines on the loop, while unrelated handlers keep running.
  const int p = 3;
  const std::size_t n = 3000;
  store::server server("127.0.0.1", 0, p, 0x5eedull, secret_of_three);
  asio::io_context io;
  bool ran = false;
  asio::post(io, [&] { ran = true; });
  auto comms = ranks_on(io, server, p);
  CHECK_FALSE(ran);  // nothing of optcast's ran the loop
  auto guard = asio::make_work_guard(io);
  std::atomic<long> ticks{0};
  asio::steady_timer ticker(io);
  std::atomic<bool> ticking{true};
  std::function<void()> tick = [&] {
    ticker.expires_after(1ms);
    ticker.async_wait([&](std::error_code ec) {
      if (ec || !ticking) return;
      ++ticks;
      for (int i = 0; i < 4; ++i) asio::post(io, [&] { ++ticks; });
      tick();
    });
  };
  tick();
  std::vector<std::thread> loops;
  for (int t = 0; t < 4; ++t) loops.emplace_back([&] { io.run(); });

  std::vector<std::int64_t> want(n, 0);
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < n; ++i) want[i] += values(r, n)[i];
  const int rounds = 8;
  std::vector<int> right(p, 0);
  std::vector<std::string> errors(p);
  {
    std::vector<std::thread> ranks;
    for (int r = 0; r < p; ++r)
      ranks.emplace_back([&, r] {
        const auto R = static_cast<std::size_t>(r);
        auto& c = comms[R];
        const auto in = values(r, n);
        for (int k = 0; k < rounds; ++k) {
          std::vector<std::int64_t> sum(n, -1);
          auto res = run(c, allreduce(c, std::span<const std::int64_t>(in), std::span(sum), ops::sum));
          if (!res) errors[R] += "run: " + describe(res.error(), c.failure_detail()) + "; ";
          right[R] += res && sum == want;
          // And from a coroutine on the loop, through its completion token.
          std::promise<bool> done;
          asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            std::vector<std::int64_t> s(n, -1);
            auto [ec] = co_await async_allreduce(c, std::span<const std::int64_t>(in), std::span(s), ops::sum,
                                                 asio::experimental::as_tuple(asio::use_awaitable));
            done.set_value(!ec && s == want);
          }, asio::detached);
          right[R] += done.get_future().get();
        }
      });
    for (auto& t : ranks) t.join();
  }
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
    CHECK(right[static_cast<std::size_t>(r)] == 2 * rounds);
  }
  CHECK(ticks.load() > 0);

  // run() on one of the loop's threads would wait for itself: refused.
  std::promise<std::string> refused;
  asio::post(io, [&] {
    std::vector<std::int64_t> x(1);
    try {
      (void)run(comms[0], allreduce(comms[0], std::span<const std::int64_t>(x), std::span(x), ops::sum));
      refused.set_value("");
    } catch (const std::logic_error& e) {
      refused.set_value(e.what());
    }
  });
  CHECK_THAT(refused.get_future().get(), Catch::Contains("runs the communicator's io_context"));

  // The service stops its loop: optcast neither restarts it nor runs it.
  ticking = false;
  io.stop();
  for (auto& t : loops) t.join();
  std::vector<std::int64_t> x(1);
  CHECK_THROWS_WITH(run(comms[1], allreduce(comms[1], std::span<const std::int64_t>(x), std::span(x), ops::sum)),
                    Catch::Contains("is stopped"));
  CHECK(io.stopped());
  guard.reset();
  comms.clear();
}

TEST_CASE("leave() and the destructor from any thread while 4 threads run the caller's loop", "[tcp][asio]") {
  // The fabric's state is closed on its strand, the job's outcome awaited off it: from
  // threads of the service's (ranks 0, 1), from a handler on the loop itself (rank 2),
  // and by destroying the communicators while the loop still runs.
  const int p = 3;
  for (const bool by_destructor : {false, true}) {
    INFO((by_destructor ? "destructor" : "leave()"));
    store::server server("127.0.0.1", 0, p, 0x5eedull, secret_of_three);
    asio::io_context io;
    auto comms = ranks_on(io, server, p);
    auto guard = asio::make_work_guard(io);
    std::vector<std::thread> loops;
    for (int t = 0; t < 4; ++t) loops.emplace_back([&] { io.run(); });
    std::vector<std::thread> ranks;
    std::vector<int> summed(p, 0);
    for (int r = 0; r < p; ++r)
      ranks.emplace_back([&, r] {
        auto& c = comms[static_cast<std::size_t>(r)];
        std::vector<std::int64_t> x(100, r + 1);
        summed[static_cast<std::size_t>(r)] =
            run(c, allreduce(c, std::span<const std::int64_t>(x), std::span(x), ops::sum)) && x[99] == 6;
      });
    for (auto& t : ranks) t.join();
    CHECK(summed == std::vector<int>(p, 1));
    if (by_destructor) {
      std::vector<std::thread> gone;
      for (int r = 0; r < 2; ++r)
        gone.emplace_back([c = std::move(comms[static_cast<std::size_t>(r)])]() mutable { communicator dropped = std::move(c); });
      std::promise<void> done;
      asio::post(io, [&done, c = std::move(comms[2])]() mutable {
        { communicator dropped = std::move(c); }
        done.set_value();
      });
      done.get_future().get();
      for (auto& t : gone) t.join();
      CHECK(server.wait_all_done(10s));
      CHECK_FALSE(server.failed());
    } else {
      std::vector<result<void>> out(p);
      std::vector<std::thread> leaving;
      for (int r = 0; r < 2; ++r) leaving.emplace_back([&, r] { out[static_cast<std::size_t>(r)] = comms[static_cast<std::size_t>(r)].leave(); });
      std::promise<void> done;
      asio::post(io, [&] {
        out[2] = comms[2].leave();  // on a thread of the loop, not the fabric's strand
        done.set_value();
      });
      done.get_future().get();
      for (auto& t : leaving) t.join();
      for (int r = 0; r < p; ++r) {
        INFO("rank " << r << ": " << comms[static_cast<std::size_t>(r)].failure_detail());
        CHECK(out[static_cast<std::size_t>(r)]);
      }
      comms.clear();
    }
    guard.reset();
    io.stop();
    for (auto& t : loops) t.join();
  }
}

TEST_CASE("run() on an io_context that no thread runs ends at the deadline, saying why", "[tcp][asio]") {
  // The spelling that worked before optcast borrowed the caller's loop: join on the
  // program's own io_context, then the blocking run(), with no thread running the loop.
  const int p = 2;
  store::server server("127.0.0.1", 0, p, 0x5eedull, secret_of_three);
  asio::io_context io;
  auto comms = ranks_on(io, server, p);
  for (auto& c : comms) c.options().timeout = 1s;
  std::vector<std::thread> ranks;
  std::vector<result<void>> got(p);
  std::vector<double> took(p);
  for (int r = 0; r < p; ++r)
    ranks.emplace_back([&, r] {
      const auto R = static_cast<std::size_t>(r);
      std::vector<std::int64_t> in(100, r), out(100);
      const auto t0 = std::chrono::steady_clock::now();
      got[R] = run(comms[R], allreduce(comms[R], std::span<const std::int64_t>(in), std::span(out), ops::sum));
      took[R] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < p; ++r) {
    const auto R = static_cast<std::size_t>(r);
    INFO("rank " << r << ": " << comms[R].last_error());
    REQUIRE_FALSE(got[R]);
    CHECK(got[R].error() == errc::timeout);
    CHECK(took[R] >= 0.9);
    CHECK(took[R] < 10);
    CHECK_THAT(comms[R].last_error(), Catch::Contains("nothing ran the communicator's io_context") && Catch::Contains("never started"));
  }
  // The loop run afterwards does not start the abandoned calls (their run() has
  // returned).
  std::thread loop([&] {
    auto guard = asio::make_work_guard(io);
    io.run_for(300ms);
  });
  loop.join();
  // Closing them: the first call finds the loop unrun after two seconds, the calls after it
  // know at once (each of the six waited its own two seconds before: 12 s).
  const auto t0 = std::chrono::steady_clock::now();
  comms.clear();
  CHECK(std::chrono::steady_clock::now() - t0 < 4s);
}
