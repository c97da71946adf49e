// One rank of a multi-process test job (started by process_test through --np), over
// TCP or libfabric (--fabric ofi; the provider from FI_PROVIDER).
// Broadcasts a pattern, checks every byte, and writes "ok" or "error <code> <text>" to
// <report>/rank-<r>.txt. With --die-rank D --die-after K, rank D exits abruptly (no
// goodbye, sockets dropped by the kernel) just before its K-th fabric operation.
#include <cstdio>
#include <fstream>
#include <unistd.h>
#include <vector>

#include <asio/io_context.hpp>

#include "cli.hpp"
#include "fault_fabric.hpp"
#include "optcast/optcast.hpp"

int main(int argc, char** argv) try {
  if (auto status = optcast::launch_local(argc, argv)) return *status;
  optcast::cli::parser args("tcp_rank_helper", "A rank of a multi-process broadcast test.");
  args.option("root", "R", "root", "0").option("bytes", "SIZE", "bytes", "1000").option("blocks", "N", "blocks", "0")
      .option("algorithm", "A", "algorithm", "circulant").option("report", "DIR", "where each rank writes its outcome", ".")
      .option("die-rank", "D", "rank that dies", "-1").option("die-after", "K", "operations before it dies", "0")
      .option("timeout-ms", "T", "collective deadline", "60000")
      .option("fabric", "NAME", "tcp or ofi", "tcp");
  args.parse(argc, argv);
  asio::io_context io;
  auto cfg = optcast::ofi::config::from_env();
  auto fab = args.get("fabric") == "ofi" ? optcast::ofi::connect(io, cfg) : optcast::tcp::connect(io, cfg);
  const int die_rank = static_cast<int>(args.get_int("die-rank", -1, 1 << 20));
  if (cfg.rank == die_rank)
    fab = std::make_shared<optcast::testing::fault_fabric>(fab, static_cast<int>(args.get_int("die-after", 0, 1 << 30)),
                                                            [] { ::_exit(3); });
  optcast::communicator comm(fab);
  const int root = static_cast<int>(args.get_int("root", 0, cfg.size - 1));
  const std::size_t bytes = args.get_size("bytes");
  std::vector<std::byte> buf(bytes);
  auto pattern = [&](std::size_t i) { return static_cast<std::byte>((i * 7 + static_cast<std::size_t>(root) * 13 + (i >> 11)) & 0xff); };
  if (cfg.rank == root)
    for (std::size_t i = 0; i < bytes; ++i) buf[i] = pattern(i);
  auto r = optcast::run(comm, optcast::broadcast(comm, std::span(buf), root,
                                                 {.alg = *optcast::parse_algorithm(args.get("algorithm")),
                                                  .blocks = static_cast<int>(args.get_int("blocks", 0, 1 << 20)),
                                                  .timeout = std::chrono::milliseconds(args.get_int("timeout-ms", 1, 1 << 30))}));
  std::ofstream report(args.get("report") + "/rank-" + std::to_string(cfg.rank) + ".txt");
  if (!r) {
    report << "error " << r.error().value() << " " << optcast::describe(r.error(), comm.failure_detail()) << "\n";
    return 1;
  }
  for (std::size_t i = 0; i < bytes; ++i)
    if (buf[i] != pattern(i)) {
      report << "error 0 byte " << i << " differs\n";
      return 1;
    }
  report << "ok\n";
  return 0;
} catch (const optcast::setup_error& e) {
  std::fprintf(stderr, "tcp_rank_helper: %s\n", e.what());
  return 1;
}
