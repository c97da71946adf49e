// Losing a rank and taking in its replacement (optcast/survive.hpp), as a job manager
// built on Asio would (the completion-token forms of optcast/asio.hpp, on the program's
// own io_context): every rank runs allreduces until one fails (a rank was killed), the
// survivors shrink to a communicator of themselves, and grow again once a process
// started in the dead rank's place (same OPTCAST_RANK, OPTCAST_REJOIN=1) has joined
// through the store; the replacement waits to be admitted. All then check an allreduce
// of every job rank on the grown communicator, print what they saw, and leave.
//
// The store must run apart from the ranks (`optcast store`, OPTCAST_STORE_EXTERNAL=1)
// for any rank to be replaceable; with rank 0 hosting it, ranks 1 and up are.
//   optcast store --np 4 --port 29600 &
//   export OPTCAST_SIZE=4 OPTCAST_STORE=127.0.0.1:29600 OPTCAST_STORE_EXTERNAL=1
//   for r in 0 1 2 3; do OPTCAST_RANK=$r grow --marker /tmp/shrunk & done
//   kill -9 <rank 2's pid>; wait for /tmp/shrunk-*; then
//   OPTCAST_RANK=2 OPTCAST_REJOIN=1 grow
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <CLI/CLI.hpp>

#include <optcast/asio.hpp>
#include <optcast/optcast.hpp>

namespace {

std::string members(const optcast::communicator& c) {
  std::string s;
  for (int r = 0; r < c.size(); ++r) s += (r ? "," : "") + std::to_string(optcast::job_rank(c, r));
  return s;
}

constexpr auto tuple = asio::experimental::as_tuple(asio::use_awaitable);

// Every member's job rank, summed: right only if the communicator holds them all.
asio::awaitable<bool> check_sum(optcast::communicator& c, std::chrono::milliseconds timeout) {
  std::int64_t v = optcast::job_rank(c, c.rank()), want = 0;
  for (int r = 0; r < c.size(); ++r) want += optcast::job_rank(c, r);
  auto [ec] = co_await optcast::async_allreduce(c, std::span<const std::int64_t>(&v, 1), std::span<std::int64_t>(&v, 1),
                                                optcast::ops::sum, optcast::collective_options{.timeout = timeout}, tuple);
  co_return !ec && v == want;
}

struct settings {
  std::string marker;
  std::chrono::milliseconds timeout, wait;
  bool rejoin = false;
  int rank = 0;
};

// The rank's whole life in the job; its exit status.
asio::awaitable<int> life(optcast::communicator& world, std::optional<optcast::communicator>& shrunk,
                          std::optional<optcast::communicator>& grown, const settings& s) {
  const auto started = std::chrono::steady_clock::now();
  const auto ms = [&] {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
  };
  if (s.rejoin) {
    auto [ec, a] = co_await optcast::async_admitted(world, s.wait, tuple);
    if (ec) {
      std::fprintf(stderr, "grow: rank %d (replacement): %s\n", s.rank, optcast::describe(ec, world.last_error()).c_str());
      co_return 1;
    }
    grown = std::move(*a);
    std::printf("rank %d: replacement admitted after %lld ms into {%s}\n", s.rank, ms(), members(*grown).c_str());
  } else {
    long calls = 0;
    while (co_await check_sum(world, s.timeout))  // until a rank dies
      // This rank is in the job and computing: whoever kills a rank to see the others
      // shrink waits for every rank's word (a rank killed while the job is still being
      // joined fails the bootstrap instead).
      if (++calls == 1 && !s.marker.empty()) std::ofstream(s.marker + "-up-" + std::to_string(s.rank)) << "\n";
    auto [ec, sh] = co_await optcast::async_shrink(world, tuple);
    if (ec) {
      std::fprintf(stderr, "grow: rank %d: shrink: %s\n", s.rank, optcast::describe(ec, world.last_error()).c_str());
      co_return 1;
    }
    shrunk = std::move(*sh);
    std::printf("rank %d: after %ld allreduces a rank failed; shrunk to {%s}\n", s.rank, calls, members(*shrunk).c_str());
    std::fflush(stdout);
    if (!s.marker.empty()) std::ofstream(s.marker + "-" + std::to_string(s.rank)) << members(*shrunk) << "\n";
    auto [gec, g] = co_await optcast::async_grow(*shrunk, tuple);
    if (gec) {
      std::fprintf(stderr, "grow: rank %d: grow: %s\n", s.rank, optcast::describe(gec, shrunk->last_error()).c_str());
      co_return 1;
    }
    grown = std::move(*g);
    std::printf("rank %d: grown to {%s} after %lld ms\n", s.rank, members(*grown).c_str(), ms());
  }
  if (!co_await check_sum(*grown, s.timeout)) {
    std::fprintf(stderr, "grow: rank %d: the allreduce on the grown communicator failed or was wrong: %s\n", s.rank,
                 grown->last_error().c_str());
    co_return 1;
  }
  std::printf("rank %d: allreduce on {%s} right\n", s.rank, members(*grown).c_str());
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Lose a rank, shrink, and grow again with its replacement.", "grow"};
  std::string marker;
  int timeout_ms = 20000, wait_ms = 30000;
  app.add_option("--marker", marker, "a rank writes MARKER-up-RANK after its first allreduce, and a survivor MARKER-RANK once it has shrunk (for whoever kills a rank and starts the replacement)");
  app.add_option("--timeout-ms", timeout_ms, "each collective's deadline, and how long grow waits for the replacement")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--wait-ms", wait_ms, "how long a replacement waits to be admitted")->check(CLI::Range(1, 1 << 30));
  CLI11_PARSE(app, argc, argv);
  auto cfg = optcast::job_config::from_env();
  cfg.timeout = std::chrono::milliseconds(timeout_ms);
  const settings s{marker, cfg.timeout, std::chrono::milliseconds(wait_ms), cfg.rejoin, cfg.rank};
  asio::io_context io;
  optcast::communicator world = optcast::make_communicator(optcast::tcp::connect(io, cfg), cfg);
  // Declared after world: the communicators made of its fabric go first.
  std::optional<optcast::communicator> shrunk, grown;
  int status = 1;
  asio::co_spawn(io, life(world, shrunk, grown, s), [&](std::exception_ptr e, int st) {
    status = st;
    if (e) try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::fprintf(stderr, "grow: rank %d: %s\n", s.rank, x.what());
        status = 1;
      }
    io.stop();  // the fabric's sockets keep the loop busy; leave() below runs without it
  });
  io.run();
  if (status != 0) return status;
  if (auto left = grown->leave(); !left) {
    std::fprintf(stderr, "grow: rank %d: the job's outcome: %s\n", cfg.rank, optcast::describe(left.error(), grown->failure_detail()).c_str());
    return 1;
  }
  std::printf("rank %d: the job ended well\n", cfg.rank);
  return 0;
} catch (const optcast::setup_error& e) {
  std::fprintf(stderr, "grow: %s\n", e.what());
  return 1;
}
