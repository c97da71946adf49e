// optcast-bench flood: what a member of the job that floods another with messages nobody
// receives costs the rank it floods (memory) and the job (its pace), over TCP.
//
// Rank 1, a member like any other (it knows the job secret), sends rank 0 --frames empty
// messages under tags no call of the job's receives, while every rank, rank 1 too, runs
// 8-byte allreduces back to back. The job's pace is timed before the flood, during it,
// and after it, with every one of those messages held by rank 0; rank 0's resident memory
// before and after says what holding them took, beside the room its unexpected-message
// limit gives (OPTCAST_UNEXPECTED_LIMIT). A flood past that room ends the job with
// limit_exceeded: then the figure is the memory held when it did.
#include <fstream>
#include <coroutine>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <nlohmann/json.hpp>
#include <optcast/net/tcp.hpp>
#include <optcast/optcast.hpp>

#include "bench.hpp"

namespace optcast::bench {

namespace {

// Tags of point-to-point traffic no call of the benchmark receives, and its own marker.
constexpr std::uint32_t flood_seq = seq_layout::p2p(0, 777777);
constexpr std::uint32_t marker_tag = 4242;

std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

struct pace {
  int ops = 0;
  double seconds = 0;
  double us_per_op() const { return ops ? seconds / ops * 1e6 : 0; }
};

// Allreduces of (rank + 1, still flooding) until no rank floods (`flooding` null: `count`
// of them); every sum checked.
task<result<void>> allreduces(communicator& c, int count, const bool* flooding, pace& out, bool& wrong) {
  const int p = c.size();
  const auto t0 = clock_type::now();
  for (int i = 0;; ++i) {
    if (!flooding && i == count) break;
    std::array<float, 2> mine{static_cast<float>(c.rank() + 1), flooding && *flooding ? 1.f : 0.f}, sum{};
    if (auto r = co_await allreduce<float>(c, mine, sum, ops::sum); !r) {
      out.seconds = since(t0);  // the pace until the job failed
      co_return r;
    }
    ++out.ops;
    if (sum[0] != static_cast<float>(p * (p + 1) / 2)) wrong = true;
    if (flooding && sum[1] == 0) break;
  }
  out.seconds = since(t0);
  co_return result<void>{};
}

// Resumes the coroutine from the fabric's loop, after what is queued there: a send that
// completes at once never suspends, and a flood of them would keep this rank's own
// collectives from running until it ends.
struct yield_to_loop {
  const asio::any_io_executor& ex;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const { asio::post(ex, [h] { h.resume(); }); }
  void await_resume() const noexcept {}
};

task<result<void>> flood(communicator& c, std::uint64_t frames, bool& flooding, std::uint64_t& sent) {
  auto& f = c.get_fabric();
  for (std::uint64_t i = 0; i < frames; ++i) {
    if (i % 64 == 63) co_await yield_to_loop{*f.executor()};
    if (auto r = co_await f.send(0, tag{flood_seq, static_cast<std::uint32_t>(i)}, std::span<const std::byte>()); !r) {
      flooding = false;
      co_return fail(r.error());
    }
    ++sent;
  }
  flooding = false;
  co_return result<void>{};
}

}  // namespace

int flood_cmd(int argc, char** argv) {
  CLI::App app{"A member of the job floods rank 0 with empty messages nobody receives: rank 0's memory for them\n"
               "against its unexpected-message limit, and the job's pace of 8-byte allreduces before, during and\n"
               "after the flood (TCP, ranks on this machine).",
               "optcast-bench flood"};
  int np = 0, reps = 2000;
  std::uint64_t frames = 10'000'000;
  bool json = false;
  app.add_option("--np", np, "start N rank processes on this machine (at least 2; rank 1 floods rank 0)")->check(CLI::Range(2, 4096));
  app.add_option("--frames", frames, "empty messages rank 1 sends")->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32))->capture_default_str();
  app.add_option("--reps", reps, "allreduces timed before and after the flood")->check(CLI::Range(1, 10'000'000))->capture_default_str();
  app.add_flag("--json", json, "one JSON object");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto status = launch_local(argc, argv)) return *status;

  auto comm = tcp::join();
  const int rank = comm.rank();
  if (comm.size() < 2) {
    std::fputs("optcast-bench flood: needs at least 2 ranks (--np N, or a launcher's)\n", stderr);
    return 2;
  }
  const auto limits = tcp::unexpected_limits(comm.get_fabric());
  bool wrong = false;
  pace before, during, after;
  std::size_t rss0 = 0, rss1 = 0;
  std::uint64_t sent = 0;
  double flood_s = 0;
  const auto outcome = [&]() -> result<void> {
    if (auto r = run(comm, allreduces(comm, reps, nullptr, before, wrong)); !r) return r;
    rss0 = resident_bytes();
    bool flooding = rank == 1;
    std::vector<task<result<void>>> both;
    both.push_back(allreduces(comm, 0, &flooding, during, wrong));
    if (rank == 1) both.push_back(flood(comm, frames, flooding, sent));
    const auto t0 = clock_type::now();
    for (auto& r : run(comm, when_all_tasks(std::move(both))))
      if (!r) return r;
    // Rank 1's marker comes after the last of its flood on the same connection: every
    // message of it is held here once the marker is in.
    std::array<std::byte, 1> marker{};
    if (rank == 1)
      if (auto r = run(comm, send(comm, 0, marker_tag, marker)); !r) return r;
    if (rank == 0)
      if (auto r = run(comm, recv(comm, 1, marker_tag, marker)); !r) return r;
    flood_s = since(t0);
    rss1 = resident_bytes();
    return run(comm, allreduces(comm, reps, nullptr, after, wrong));
  }();
  if (!outcome) rss1 = resident_bytes();
  const bool refused = !outcome && comm.failure() == errc::limit_exceeded;
  if (!outcome && !refused) {
    std::fprintf(stderr, "optcast-bench flood: rank %d: %s\n", rank, describe(outcome.error(), comm.failure_detail()).c_str());
    return 1;
  }
  if (wrong) std::fprintf(stderr, "optcast-bench flood: rank %d: an allreduce's sum was wrong\n", rank);
  if (rank != 0) return wrong ? 1 : 0;

  const double growth = rss1 > rss0 ? static_cast<double>(rss1 - rss0) : 0;
  const double per_message = refused ? 0 : growth / static_cast<double>(frames);
  if (json) {
    nlohmann::ordered_json j = {{"benchmark", "flood"},
                                {"np", comm.size()},
                                {"frames", frames},
                                {"held_all", !refused},
                                {"limit_bytes", limits.total},
                                {"peer_limit_bytes", limits.peer},
                                {"counted_per_message", job_config::held_message_overhead},
                                {"rss_before_bytes", rss0},
                                {"rss_growth_bytes", growth},
                                {"bytes_per_message", per_message},
                                {"flood_s", flood_s},
                                {"before_us", before.us_per_op()},
                                {"during_us", during.us_per_op()},
                                {"during_ops", during.ops},
                                {"after_us", after.us_per_op()},
                                {"ok", !wrong}};
    if (refused) j["refused"] = comm.failure_detail();
    std::puts(j.dump().c_str());
    return wrong ? 1 : 0;
  }
  std::printf("# flood: np=%d, rank 1 sends rank 0 %llu empty messages nobody receives\n", comm.size(), static_cast<unsigned long long>(frames));
  std::printf("room for unexpected messages on rank 0: %.1f MiB (from one peer %.1f MiB), each counted at %zu B beside its payload\n",
              static_cast<double>(limits.total) / (1 << 20), static_cast<double>(limits.peer) / (1 << 20), job_config::held_message_overhead);
  if (refused)
    std::printf("the flood was refused: %s\nrank 0's memory grew %.1f MiB before it was\n", comm.failure_detail().c_str(), growth / (1 << 20));
  else
    std::printf("all held after %.2f s: rank 0's memory grew %.1f MiB, %.1f B a message\n", flood_s, growth / (1 << 20), per_message);
  std::printf("8-byte allreduce: %.1f us before, %.1f us during (%d of them)", before.us_per_op(), during.us_per_op(), during.ops);
  if (after.ops) std::printf(", %.1f us after (%.2fx before)", after.us_per_op(), after.us_per_op() / before.us_per_op());
  std::printf("%s\n", wrong ? "; a WRONG sum" : "");
  return wrong ? 1 : 0;
}

}  // namespace optcast::bench
