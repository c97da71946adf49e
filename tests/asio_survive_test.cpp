// The completion-token forms of survive.hpp (optcast/asio.hpp): async_revoke from a thread
// that is no rank's, async_agree and async_shrink, on the local and TCP fabrics.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include "asio_loops.hpp"
#include "optcast/asio.hpp"

using namespace optcast;
using namespace std::chrono_literals;
using testing::run_on_loops;

TEST_CASE("async_revoke from another thread ends every member's call; async_agree and async_shrink go on", "[local][tcp][asio][survive]") {
  const std::string kind = GENERATE(as<std::string>{}, "local", "tcp");
  INFO(kind);
  const int p = 4;
  auto w = testing::make_asio_world(kind, p);
  auto& comms = w->comms();
  std::vector<std::error_code> pending(p), agreed_ec(p), shrunk_ec(p), sum_ec(p);
  // A loop 100 ms late makes the call a later one. Not vector<bool>: ranks on threads write their own.
  std::vector<char> revoked_before(p, 0);
  std::vector<agreement> agreed(p);
  std::vector<int> new_size(p, -1);
  std::vector<std::int64_t> sum(p, -1);
  std::vector<std::atomic<bool>> finished(p);
  std::atomic<bool> revoked{false};
  std::thread outsider;
  run_on_loops(*w, kind, [&](asio::io_context& io, int r) {
    if (r == 1)  // neither a task nor a loop's thread: a service's other thread
      outsider = std::thread([&] {
        std::this_thread::sleep_for(100ms);
        async_revoke(comms[1], "revoked by another thread", asio::use_future).get();
        revoked = true;
      });
    asio::co_spawn(
        io,
        [&, r]() -> asio::awaitable<void> {
          auto& c = comms[static_cast<std::size_t>(r)];
          const auto R = static_cast<std::size_t>(r);
          if (r == 1) {
            asio::steady_timer t(co_await asio::this_coro::executor);
            while (!revoked) {
              t.expires_after(5ms);
              co_await t.async_wait(asio::use_awaitable);
            }
          } else {
            std::vector<std::byte> buf(100);  // rank 1 never broadcasts: the revocation ends it
            revoked_before[R] = c.failure() == errc::revoked;
            std::tie(pending[R]) = co_await async_broadcast(c, std::span(buf), 1, asio::experimental::as_tuple(asio::use_awaitable));
          }
          std::tie(agreed_ec[R], agreed[R]) =
              co_await async_agree(c, std::uint64_t{r == 3 ? 1u : 3u}, asio::experimental::as_tuple(asio::use_awaitable));
          auto [ec, s] = co_await async_shrink(c, asio::experimental::as_tuple(asio::use_awaitable));
          shrunk_ec[R] = ec;
          if (s) {
            new_size[R] = s->size();
            std::int64_t v = r;
            std::tie(sum_ec[R]) = co_await async_allreduce(*s, std::span<const std::int64_t>(&v, 1), std::span(&sum[R], 1), ops::sum,
                                                           asio::experimental::as_tuple(asio::use_awaitable));
            // Its fabric is c's: it ends on c's loop before the test drops c.
          }
          finished[R] = true;
        },
        asio::detached);
  }, [&](int r) { return finished[static_cast<std::size_t>(r)].load(); });
  outsider.join();
  for (int r = 0; r < p; ++r) {
    const auto R = static_cast<std::size_t>(r);
    INFO("rank " << r << ": " << comms[R].failure_detail());
    if (r != 1) CHECK(pending[R] == (revoked_before[R] ? errc::broken : errc::revoked));
    CHECK(comms[R].failure() == errc::revoked);
    CHECK(comms[R].failure_detail().find("revoked by another thread") != std::string::npos);
    CHECK_FALSE(agreed_ec[R]);
    CHECK(agreed[R].flag == 1);
    CHECK(agreed[R].failed.empty());
    CHECK_FALSE(shrunk_ec[R]);
    CHECK(new_size[R] == p);
    CHECK_FALSE(sum_ec[R]);
    CHECK(sum[R] == p * (p - 1) / 2);
  }
}

