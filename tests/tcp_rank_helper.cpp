// One rank of a multi-process test job (started by process_test through --np), over
// TCP or libfabric (--fabric ofi; the provider from FI_PROVIDER).
// Broadcasts a pattern, checks every byte, and writes "ok" or "error <code> <text>" to
// <report>/rank-<r>.txt. With --die-rank D --die-after K, rank D exits abruptly (no
// goodbye, sockets dropped by the kernel) just before its K-th fabric operation; with
// --odd-rank K --odd-root R rank K names root R (a mismatched call); with --stall-rank S
// --stall-ms T rank S sleeps T ms first. The report's second line: milliseconds from
// start to exit. A rank reports "ok" only if the whole job succeeded (comm.leave()).
#include <chrono>
#include <cstdio>
#include <thread>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <asio/io_context.hpp>
#include <CLI/CLI.hpp>

#include "fault_fabric.hpp"
#include "optcast/optcast.hpp"

int main(int argc, char** argv) try {
  CLI::App app{"A rank of a multi-process broadcast test.", "tcp_rank_helper"};
  const auto started = std::chrono::steady_clock::now();
  int np = 0, root = 0, blocks = 0, die_rank = -1, die_after = 0, timeout_ms = 60000;
  int odd_rank = -1, odd_root = 0, stall_rank = -1, stall_ms = 0;
  std::size_t bytes = 1000;
  std::string alg_name = "circulant", report_dir = ".", fabric = "tcp";
  app.add_option("--np", np, "ranks to start on this machine")->check(CLI::Range(1, 4096));
  app.add_option("--root", root, "root")->check(CLI::NonNegativeNumber);
  app.add_option("--bytes", bytes, "bytes")->transform(CLI::AsSizeValue(true));
  app.add_option("--blocks", blocks, "blocks")->check(CLI::Range(0, 1 << 20));
  app.add_option("--algorithm", alg_name, "algorithm");
  app.add_option("--report", report_dir, "where each rank writes its outcome");
  app.add_option("--die-rank", die_rank, "rank that dies")->check(CLI::Range(-1, 1 << 20));
  app.add_option("--die-after", die_after, "operations before it dies")->check(CLI::Range(0, 1 << 30));
  app.add_option("--timeout-ms", timeout_ms, "collective deadline")->check(CLI::Range(1, 1 << 30));
  app.add_option("--fabric", fabric, "tcp or ofi")->check(CLI::IsMember({"tcp", "ofi"}));
  app.add_option("--odd-rank", odd_rank, "rank that names another root (a mismatched call)")->check(CLI::Range(-1, 1 << 20));
  app.add_option("--odd-root", odd_root, "the root --odd-rank names")->check(CLI::NonNegativeNumber);
  app.add_option("--stall-rank", stall_rank, "rank that sleeps before its broadcast")->check(CLI::Range(-1, 1 << 20));
  app.add_option("--stall-ms", stall_ms, "how long it sleeps")->check(CLI::Range(0, 1 << 30));
  optcast::result<optcast::algorithm> alg = optcast::algorithm::automatic;
  try {
    app.parse(argc, argv);
    alg = optcast::parse_algorithm(alg_name);
    if (!alg) throw CLI::ValidationError("--algorithm", "unknown: " + alg_name);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto status = optcast::launch_local(argc, argv)) return *status;
  auto cfg = optcast::ofi::config::from_env();
  auto fab = fabric == "ofi" ? optcast::ofi::connect(cfg) : optcast::tcp::connect(cfg);
  if (cfg.rank == die_rank)
    fab = std::make_shared<optcast::testing::fault_fabric>(fab, die_after,
                                                            [] { ::_exit(3); });
  optcast::communicator comm(fab);
  if (root >= cfg.size) {
    std::fprintf(stderr, "tcp_rank_helper: --root %d: the job has %d ranks\n", root, cfg.size);
    return 2;
  }
  std::vector<std::byte> buf(bytes);
  auto pattern = [&](std::size_t i) { return static_cast<std::byte>((i * 7 + static_cast<std::size_t>(root) * 13 + (i >> 11)) & 0xff); };
  if (cfg.rank == root)
    for (std::size_t i = 0; i < bytes; ++i) buf[i] = pattern(i);
  if (cfg.rank == stall_rank) std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
  auto r = optcast::run(comm, optcast::broadcast(comm, std::span(buf), cfg.rank == odd_rank ? odd_root : root,
                                                 {.alg = *alg, .blocks = blocks, .timeout = std::chrono::milliseconds(timeout_ms)}));
  std::ofstream report(report_dir + "/rank-" + std::to_string(cfg.rank) + ".txt");
  if (r) r = comm.leave();  // the job's outcome, not only this rank's
  const auto elapsed = [&] {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
  };
  if (!r) {
    report << "error " << r.error().value() << " " << optcast::describe(r.error(), comm.failure_detail()) << "\n" << elapsed() << "\n";
    return 1;
  }
  for (std::size_t i = 0; i < bytes; ++i)
    if (buf[i] != pattern(i)) {
      report << "error 0 byte " << i << " differs\n";
      return 1;
    }
  report << "ok\n" << elapsed() << "\n";
  return 0;
} catch (const optcast::setup_error& e) {
  std::fprintf(stderr, "tcp_rank_helper: %s\n", e.what());
  return 1;
}
