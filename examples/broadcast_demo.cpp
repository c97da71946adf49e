// The demo: one broadcast among N processes over TCP, every byte verified on every
// rank, time and bandwidth printed by rank 0.
//
//   optcast-demo --np 8 --bytes 64MiB
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>


#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "measure.hpp"
#include <optcast/optcast.hpp>

namespace {

std::byte pattern(std::size_t i) { return static_cast<std::byte>((i * 2654435761u) >> 24); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Broadcasts a buffer among the ranks of a job and checks every byte on every rank.", "optcast-demo"};
  std::size_t bytes = std::size_t{64} << 20;
  int root = 0, blocks = 0, iterations = 5, np = 0;
  std::string alg_name = "automatic", fabric(optcast::fabric_table().front().name);
  app.add_option("--np", np, "start N ranks on this machine (without it: one rank of a launched job)")->check(CLI::Range(1, 4096));
  app.add_option("--bytes", bytes, "bytes to broadcast (up to this machine's memory)")->transform(optcast::cli::byte_size())->capture_default_str();
  app.add_option("--root", root, "the broadcasting rank")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--algorithm", alg_name, "automatic or a broadcast algorithm: " + optcast::algorithm_names(optcast::collective::broadcast))
      ->capture_default_str();
  app.add_option("--blocks", blocks, "pipelining depth (0: from the cost model)")->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("--iterations", iterations, "timed broadcasts; the median is reported")->check(CLI::Range(1, 1000))
      ->capture_default_str();
  optcast::cli::add_fabric(app, fabric);
  app.footer("Start it with --np N to run N ranks on this machine, or under a launcher that sets\n"
             "OPTCAST_RANK, OPTCAST_SIZE and OPTCAST_STORE (see docs/RUNNING.md).");
  optcast::result<optcast::algorithm> alg = optcast::algorithm::automatic;
  try {
    app.parse(argc, argv);
    alg = optcast::parse_algorithm(alg_name);
    if (!alg || (*alg != optcast::algorithm::automatic && !optcast::find(optcast::collective::broadcast, *alg)))
      throw CLI::ValidationError("--algorithm", "automatic or one of " + optcast::algorithm_names(optcast::collective::broadcast));
    if (np && root >= np) throw CLI::ValidationError("--root", "must be below --np");
    if (const auto why = optcast::cli::fits_memory(np, bytes); np && !why.empty()) throw CLI::ValidationError("--bytes", why);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto status = optcast::launch_local(argc, argv)) return *status;

  try {
    auto comm = optcast::join(fabric);
    if (root >= comm.size()) {
      std::fprintf(stderr, "optcast-demo: --root %d: the job has %d ranks\n", root, comm.size());
      return 2;
    }
    const optcast::broadcast_options opts{.alg = *alg, .blocks = blocks};
    std::vector<std::byte> buf(bytes);
    auto fail = [&](const char* what, std::error_code ec) {
      std::fprintf(stderr, "rank %d: %s failed: %s\n", comm.rank(),  what,
                   optcast::describe(ec, comm.failure_detail()).c_str());
      return 1;
    };

    std::vector<double> seconds;  // root's start to the last rank's end, on rank 0
    for (int it = 0; it <= iterations; ++it) {  // iteration 0 warms up connections
      if (comm.rank() == root)
        for (std::size_t i = 0; i < bytes; ++i) buf[i] = pattern(i);
      else
        std::fill(buf.begin(), buf.end(), std::byte{0});
      auto t = optcast::measure::timed(comm, root, [&] { return optcast::run(comm, optcast::broadcast(comm, std::span(buf), root, opts)); });
      if (!t) return fail("broadcast", t.error());
      for (std::size_t i = 0; i < bytes; ++i)
        if (buf[i] != pattern(i)) {
          std::fprintf(stderr, "rank %d: byte %zu differs after broadcast %d\n", comm.rank(), i, it);
          return 1;
        }
      if (it > 0) seconds.push_back(*t);
    }
    // Every rank checked its bytes above; one that found a difference exited non-zero and
    // the launcher reports it. No rank exits 0 unless every rank finished: the job's
    // outcome. Rank 0 prints the figures.
    if (auto r = comm.leave(); !r) return fail("the job", r.error());
    if (comm.rank() != 0) return 0;
    std::vector<double> slowest = seconds;
    std::sort(slowest.begin(), slowest.end());
    const double med = slowest[slowest.size() / 2];
    // What ran: the automatic choice resolved by the model (optcast/choose.hpp).
    const auto plan = optcast::plan_broadcast(comm, bytes, opts);
    const auto ran = plan ? plan->alg : *alg;
    std::printf("broadcast of %s from rank %d to %d ranks over %s, %s%s", optcast::format_bytes(bytes).c_str(), root,
                comm.size(), optcast::fabric_description(comm).c_str(), *alg == optcast::algorithm::automatic ? "automatic: " : "",
                std::string(optcast::to_string(ran)).c_str());
    if (plan && ran != optcast::algorithm::binomial && ran != optcast::algorithm::logp_tree) std::printf(" (n = %d blocks)", plan->blocks);
    std::printf("\n  every byte verified on all %d ranks, %d times\n", comm.size(), iterations + 1);
    std::printf("  time (root's start to the last rank's end, median of %d): %.3f ms   bandwidth: %.1f MB/s\n", iterations, med * 1e3,
                med > 0 ? static_cast<double>(bytes) / med / 1e6 : 0.0);
    return 0;
  } catch (const optcast::setup_error& e) {
    std::fprintf(stderr, "optcast-demo: %s\n", e.what());
    return 1;
  }
}
