// One rank of a multi-process test job (started by process_test through --np), over
// TCP or libfabric (--fabric ofi; the provider from FI_PROVIDER).
// Broadcasts a pattern, checks every byte, and writes "ok" or "error <code> <text>" to
// <report>/rank-<r>.txt. --roots and --bytes may list several (or --roots all): the job
// then runs one broadcast for each root and size in turn, in one world, every one checked
// (a job's start-up, libfabric's above all, costs more than its broadcasts). A rank that
// finds wrong bytes goes on through the list, so the others are not left waiting for it.
// With --die-rank D --die-after K, rank D exits abruptly (no goodbye, sockets dropped by
// the kernel) just before its K-th fabric operation; with --odd-rank K --odd-root R rank K
// names root R (a mismatched call); with --stall-rank S --stall-ms T rank S sleeps T ms
// first. The report's second line: milliseconds from start to exit, the third (after
// "ok") how many broadcasts it checked, the fourth how many messages it received by
// single copy from ranks of its host (TCP). A rank reports "ok" only if the whole job
// succeeded (comm.leave()).
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
#include "cli.hpp"

int main(int argc, char** argv) try {
  CLI::App app{"A rank of a multi-process broadcast test.", "tcp_rank_helper"};
  const auto started = std::chrono::steady_clock::now();
  int np = 0, blocks = 0, die_rank = -1, die_after = 0, timeout_ms = 60000;
  int odd_rank = -1, odd_root = 0, stall_rank = -1, stall_ms = 0;
  std::vector<std::string> root_names{"0"};
  std::vector<std::size_t> sizes{1000};
  std::string alg_name = "circulant", report_dir = ".", fabric = "tcp";
  app.add_option("--np", np, "ranks to start on this machine")->check(CLI::Range(1, 4096));
  app.add_option("--root,--roots", root_names, "root, a list of them (0,3), or all")->delimiter(',');
  app.add_option("--bytes", sizes, "bytes, or a list of sizes")->delimiter(',')->transform(optcast::cli::byte_size());
  app.add_option("--blocks", blocks, "blocks")->check(CLI::Range(0, 1 << 20));
  app.add_option("--algorithm", alg_name, "algorithm");
  app.add_option("--report", report_dir, "where each rank writes its outcome");
  app.add_option("--die-rank", die_rank, "rank that dies")->check(CLI::Range(-1, 1 << 20));
  app.add_option("--die-after", die_after, "operations before it dies")->check(CLI::Range(0, 1 << 30));
  app.add_option("--timeout-ms", timeout_ms, "collective deadline")->check(CLI::Range(1, 1 << 30));
  optcast::cli::add_fabric(app, fabric);
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
  const auto cfg = optcast::job_config::from_env();
  std::vector<int> roots;
  for (const auto& name : root_names) {
    if (name == "all") {
      for (int r = 0; r < cfg.size; ++r) roots.push_back(r);
      continue;
    }
    char* end = nullptr;
    const long r = std::strtol(name.c_str(), &end, 10);
    if (name.empty() || *end || r < 0 || r >= cfg.size) {
      std::fprintf(stderr, "tcp_rank_helper: --root %s: the job has ranks 0 to %d\n", name.c_str(), cfg.size - 1);
      return 2;
    }
    roots.push_back(static_cast<int>(r));
  }
  // A rank still connecting when the job fails is told why by connect(): that is its
  // outcome, so it reports it (uneven_rank_helper does the same for join()).
  std::shared_ptr<optcast::fabric> fab;
  try {
    fab = optcast::find_fabric(fabric)->connect(nullptr, cfg, {});
  } catch (const optcast::setup_error& e) {
    std::ofstream(report_dir + "/rank-" + std::to_string(cfg.rank) + ".txt")
        << "error " << e.code().value() << " " << optcast::describe(e.code(), e.what()) << "\n";
    throw;
  }
  const auto tcp_fabric = fab;
  if (cfg.rank == die_rank)
    fab = std::make_shared<optcast::testing::fault_fabric>(fab, die_after,
                                                            [] { ::_exit(3); });
  optcast::communicator comm(fab);
  if (cfg.rank == stall_rank) std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
  std::vector<std::byte> buf;
  std::string wrong;  // the first broadcast whose bytes differ
  int checked = 0;    // broadcasts whose every byte was right
  optcast::result<void> r;
  for (const int root : roots)
    for (const std::size_t bytes : sizes) {
      // Every byte a rank holds before the broadcast differs from the one it must hold after.
      auto pattern = [&](std::size_t i) { return static_cast<std::byte>((i * 7 + static_cast<std::size_t>(root) * 13 + (i >> 11) + bytes) & 0xff); };
      buf.resize(bytes);
      for (std::size_t i = 0; i < bytes; ++i) buf[i] = cfg.rank == root ? pattern(i) : ~pattern(i);
      r = optcast::run(comm, optcast::broadcast(comm, std::span(buf), cfg.rank == odd_rank ? odd_root : root,
                                                {.alg = *alg, .blocks = blocks, .timeout = std::chrono::milliseconds(timeout_ms)}));
      if (!r) break;
      std::size_t i = 0;
      while (i < bytes && buf[i] == pattern(i)) ++i;
      if (i == bytes) {
        ++checked;
      } else if (wrong.empty()) {
        wrong = "byte " + std::to_string(i) + " differs (root " + std::to_string(root) + ", " +
                std::to_string(bytes) + " B)";
      }
    }
  std::ofstream report(report_dir + "/rank-" + std::to_string(cfg.rank) + ".txt");
  if (r) r = comm.leave();  // the job's outcome, not only this rank's
  const auto elapsed = [&] {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
  };
  if (!r) {
    report << "error " << r.error().value() << " " << optcast::describe(r.error(), comm.failure_detail()) << "\n" << elapsed() << "\n";
    return 1;
  }
  if (!wrong.empty()) {
    report << "error 0 " << wrong << "\n" << elapsed() << "\n";
    return 1;
  }
  const auto links = optcast::tcp::connections(*tcp_fabric);
  report << "ok\n" << elapsed() << "\n" << checked << "\n" << links.single_copies << "\n" << links.in_memory << "\n";
  return 0;
} catch (const optcast::setup_error& e) {
  std::fprintf(stderr, "tcp_rank_helper: %s\n", e.what());
  return 1;
}
