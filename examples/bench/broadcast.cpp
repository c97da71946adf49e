// optcast-bench broadcast: time and bandwidth of each broadcast algorithm for each size,
// on ranks in this process or one process per rank.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <optcast/optcast.hpp>
#include <optcast/progress.hpp>

#include "../measure.hpp"
#include "bench.hpp"
#include "cli.hpp"

namespace optcast::bench {

namespace {

struct row {
  std::string algorithm;
  std::size_t bytes;
  int blocks;
  double seconds;
};

void print_rows(const std::string& fabric_name, int p, const std::vector<row>& rows, bool json) {
  if (json) {
    nlohmann::ordered_json j = {{"benchmark", "broadcast"}, {"fabric", fabric_name}, {"p", p}};
    auto& out = j["results"] = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      out.push_back({{"algorithm", r.algorithm},
                     {"bytes", r.bytes},
                     {"blocks", r.blocks},
                     {"median_s", r.seconds},
                     {"bandwidth_MBps", r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e6 : 0.0}});
    std::puts(j.dump().c_str());
    return;
  }
  std::printf("broadcast on the %s fabric, p = %d (median time from the root's start to the last rank's end)\n", fabric_name.c_str(), p);
  std::printf("%-10s %12s %7s %14s %14s\n", "algorithm", "bytes", "blocks", "time", "bandwidth");
  for (const auto& r : rows)
    std::printf("%-10s %12zu %7d %11.3f ms %11.1f MB/s\n", r.algorithm.c_str(), r.bytes, r.blocks, r.seconds * 1e3,
                r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e6 : 0.0);
}

}  // namespace

// One timed broadcast per iteration; every rank verifies its bytes once per size.
int broadcast_cmd(int argc, char** argv) {
  CLI::App app{"Broadcast time and bandwidth for each size and algorithm.", "optcast-bench broadcast"};
  std::string fabric_name = "local";
  int p = 8, np = 0, blocks = 0, ports = 1, req_iter = 0;
  std::vector<std::size_t> sizes{8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20, 64 << 20};
  std::vector<std::string> alg_names{"circulant", "binomial"};
  bool json = false, quiet = false;
  cli::add_fabric(app, fabric_name, {"local"});
  app.add_option("--p", p, "ranks of the local fabric")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--np", np, "with --fabric tcp or ofi: start N rank processes on this machine")->check(CLI::Range(1, 4096));
  add_sizes(app, sizes, "bytes to broadcast");
  app.add_option("--algorithms", alg_names, "broadcast algorithms: " + algorithm_names(collective::broadcast))
      ->delimiter(',')->capture_default_str();
  app.add_option("--blocks", blocks, "block count (0: automatic)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--ports", ports, "ports per rank (k-port algorithms ktree and rotation need 2 or more)")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--iterations", req_iter, "timed runs per size (0: by size)")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_flag("--json", json, "one JSON object");
  app.add_flag("--quiet", quiet, "no progress line (shown only on a terminal)");
  std::vector<algorithm> algs;
  app.callback([&] {
    for (const auto& name : alg_names) {
      const auto a = parse_algorithm(name);
      if (!a || !find(collective::broadcast, *a))
        throw CLI::ValidationError("--algorithms", "'" + name + "': broadcast algorithms are " + algorithm_names(collective::broadcast));
      algs.push_back(*a);
    }
    if (fabric_name == "local" && np) throw CLI::ValidationError("--np", "starts processes for --fabric tcp or ofi; the local fabric takes --p");
  });
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // The rank processes read their port count from the environment (OPTCAST_PORTS).
  if (app.count("--ports")) ::setenv("OPTCAST_PORTS", std::to_string(ports).c_str(), 1);
  if (auto status = launch_local(argc, argv)) return *status;

  std::vector<row> rows;
  const std::size_t total = algs.size() * sizes.size();
  const auto step = [&](progress_line& pl, algorithm alg, std::size_t bytes) {
    if (pl.on())
      pl.show("broadcast: " + std::string(to_string(alg)) + " " + format_bytes(bytes) + " (" + std::to_string(rows.size() + 1) + " of " +
              std::to_string(total) + ")");
  };
  if (fabric_name == "local") {
    progress_line progress(quiet || json);
    local::world w(p, ports);
    auto comms = optcast::communicators_of(w);
    for (auto alg : algs)
      for (auto bytes : sizes) {
        std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(p), std::vector<std::byte>(bytes, std::byte{1}));
        step(progress, alg, bytes);
        const auto plan = plan_broadcast(comms[0], bytes, {.alg = alg, .blocks = blocks});
        const int n = plan ? plan->blocks : blocks;  // a refusal is reported by the run
        std::vector<double> times;
        for (int it = 0; it < iterations_for(bytes, req_iter) + 1; ++it) {
          const auto t0 = clock_type::now();
          auto res = optcast::run_all(comms, [&](communicator& c) {
            return optcast::broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0, {.alg = alg, .blocks = n});
          });
          const double s = since(t0);
          for (auto& r : res)
            if (!r) {
              std::fprintf(stderr, "broadcast failed: %s\n", describe(r.error(), comms[0].failure_detail()).c_str());
              return 1;
            }
          if (it > 0) times.push_back(s);
        }
        rows.push_back({std::string(to_string(alg)), bytes, n, median(times)});
      }
    progress.clear();
    print_rows(fabric_name, p, rows, json);
    return 0;
  }

  auto comm = join(fabric_name);
  progress_line progress(quiet || json || comm.rank() != 0);
  for (auto alg : algs)
    for (auto bytes : sizes) {
      step(progress, alg, bytes);
      std::vector<std::byte> buf(bytes, std::byte{1});
      const auto plan = plan_broadcast(comm, bytes, {.alg = alg, .blocks = blocks});
      const int n = plan ? plan->blocks : blocks;  // a refusal is reported by the run
      const int iters = iterations_for(bytes, req_iter);
      std::vector<double> times;
      for (int it = 0; it < iters + 1; ++it) {
        auto t = measure::timed(comm, 0, [&] { return run(comm, optcast::broadcast(comm, std::span(buf), 0, {.alg = alg, .blocks = n})); });
        if (!t) {
          std::fprintf(stderr, "rank %d: %s\n", comm.rank(), describe(t.error(), comm.failure_detail()).c_str());
          return 1;
        }
        if (it > 0) times.push_back(*t);
      }
      if (comm.rank() != 0) continue;
      rows.push_back({std::string(to_string(alg)), bytes, n, median(times)});
    }
  progress.clear();
  if (comm.rank() == 0) print_rows(fabric_description(comm), comm.size(), rows, json);
  return 0;
}

}  // namespace optcast::bench
