// optcast-bench percall: what a small collective costs beyond moving its bytes between
// processes. P ranks in this process on the in-process fabric, one loop: each rank makes
// K calls back to back, and the loop's time / K / P is one rank's share of one call (the
// entry checks, planning, the coroutine frames, the fabric's queues and an in-memory
// copy per message; no system call). The floor under every collective on a real
// transport: a call between processes costs this plus its messages' trips.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <optcast/net/local.hpp>
#include <optcast/optcast.hpp>

#include "bench.hpp"
#include "cli.hpp"

namespace optcast::bench {

namespace {

struct rank_buffers {
  std::vector<std::byte> in, out;
};

std::byte pattern(int r, std::size_t i) { return static_cast<std::byte>(r * 29 + static_cast<int>(i % 251) + 1); }

// Inputs whose every call gives the same, checkable results: floats rank + 1 to sum (exact
// in float for these ranks), a pattern per rank to broadcast (root 0) or gather.
void init(const std::string& op, rank_buffers& b, int r, int p, std::size_t m) {
  const std::size_t room = std::max<std::size_t>(m, sizeof(float));
  b.in.assign(room, std::byte{0});
  b.out.assign(room * static_cast<std::size_t>(p), std::byte{0});
  if (op == "allreduce" || op == "reduce") {
    for (std::size_t i = 0; i < m / sizeof(float); ++i) {
      const float v = static_cast<float>(r + 1);
      std::memcpy(b.in.data() + i * sizeof(float), &v, sizeof v);
    }
  } else {
    for (std::size_t i = 0; i < m; ++i) b.in[i] = pattern(r, i);
    if (op == "bcast" && r == 0) std::copy_n(b.in.begin(), m, b.out.begin());
  }
}

bool check(const std::string& op, const rank_buffers& b, int r, int p, std::size_t m) {
  if (op == "barrier" || (op == "reduce" && r != 0)) return true;
  if (op == "allreduce" || op == "reduce") {
    const float want = static_cast<float>(p) * static_cast<float>(p + 1) / 2;
    for (std::size_t i = 0; i < m / sizeof(float); ++i) {
      float v;
      std::memcpy(&v, b.out.data() + i * sizeof(float), sizeof v);
      if (v != want) return false;
    }
    return true;
  }
  const int blocks = op == "allgather" ? p : 1;
  for (int k = 0; k < blocks; ++k)
    for (std::size_t i = 0; i < m; ++i)
      if (b.out[static_cast<std::size_t>(k) * m + i] != pattern(op == "allgather" ? k : 0, i)) return false;
  return true;
}

task<result<void>> one_call(communicator& c, const std::string& op, rank_buffers& b, std::size_t m) {
  const std::size_t p = static_cast<std::size_t>(c.size()), n = m / sizeof(float);
  if (op == "barrier") return barrier(c);
  if (op == "bcast") return broadcast(c, std::span(b.out.data(), m), 0);
  if (op == "allgather") return allgather<std::byte>(c, std::span(b.in.data(), m), std::span(b.out.data(), m * p));
  const std::span<const float> in(reinterpret_cast<const float*>(b.in.data()), n);
  const std::span<float> out(reinterpret_cast<float*>(b.out.data()), n);
  if (op == "reduce") return reduce<float>(c, in, out, ops::sum, 0);
  return allreduce<float>(c, in, out, ops::sum);
}

task<result<void>> calls(communicator& c, const std::string& op, rank_buffers& b, std::size_t m, int k) {
  for (int i = 0; i < k; ++i)
    if (auto r = co_await one_call(c, op, b, m); !r) co_return fail(r.error());
  co_return result<void>{};
}

}  // namespace

int percall_cmd(int argc, char** argv) {
  CLI::App app{"What a small collective costs beyond moving its bytes: P ranks in this process on the in-process\n"
               "fabric, each making K calls back to back on one loop; prints the loop's time / K / P, one rank's share\n"
               "of one call (median of the repetitions), every rank's results checked.",
               "optcast-bench percall"};
  int p = 2, k = 2000, reps = 7;
  std::vector<std::string> ops{"allreduce", "allgather", "bcast", "reduce", "barrier"};
  std::vector<std::size_t> sizes{8};
  bool json = false;
  app.add_option("--p", p, "ranks in this process")->check(CLI::Range(2, 1024))->capture_default_str();
  app.add_option("--calls,-K", k, "calls back to back per rank and repetition")->check(CLI::Range(1, 10000000))->capture_default_str();
  app.add_option("--reps", reps, "repetitions (the median is printed)")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--ops,-o", ops, "collectives: allreduce, allgather, bcast, reduce, barrier")->delimiter(',')
      ->check(CLI::IsMember({"allreduce", "allgather", "bcast", "reduce", "barrier"}))->capture_default_str();
  add_sizes(app, sizes, "bytes per call (allgather: per rank)");
  app.add_flag("--json", json, "one JSON object instead of the table");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  local::world w(p);
  auto comms = communicators_of(w);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  bool all_ok = true;
  if (!json)
    std::printf("one rank's share of one call, us (%d ranks in one process on the local fabric, %d calls back to back, median of %d)\n"
                "  %-10s %10s %12s\n",
                p, k, reps, "op", "bytes", "us/call");
  for (const auto& op : ops)
    for (const std::size_t m : sizes) {
      std::vector<rank_buffers> bufs(static_cast<std::size_t>(p));
      for (int r = 0; r < p; ++r) init(op, bufs[static_cast<std::size_t>(r)], r, p, m);
      std::vector<double> t;
      for (int rep = 0; rep <= reps; ++rep) {  // the first warms up
        const auto t0 = clock_type::now();
        auto res = run_all(comms, [&](communicator& c) { return calls(c, op, bufs[static_cast<std::size_t>(c.rank())], m, k); });
        const double s = since(t0);
        for (auto& r : res)
          if (!r) {
            std::fprintf(stderr, "optcast-bench percall: %s: %s\n", op.c_str(), describe(r.error(), comms[0].failure_detail()).c_str());
            return 1;
          }
        if (rep > 0) t.push_back(s / k / p * 1e6);
      }
      // Every call gives the same results: the last ones, checked on every rank.
      bool ok = true;
      for (int r = 0; r < p; ++r) ok &= check(op, bufs[static_cast<std::size_t>(r)], r, p, m);
      const double us = median(t);
      rows.push_back({{"op", op}, {"bytes", m}, {"us_per_call", us}, {"ok", ok}});
      all_ok &= ok;
      if (!json) {
        std::printf("  %-10s %10zu %12.3f %s\n", op.c_str(), m, us, ok ? "ok" : "FAIL");
        std::fflush(stdout);
      }
    }
  if (json)
    std::puts(nlohmann::ordered_json{{"benchmark", "percall"}, {"p", p}, {"calls", k}, {"reps", reps}, {"results", rows}}.dump().c_str());
  return all_ok ? 0 : 1;
}

}  // namespace optcast::bench
