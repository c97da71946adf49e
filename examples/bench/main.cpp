// optcast-bench: speed figures.
//
//   optcast-bench broadcast --fabric local --p 8          P ranks in this process
//   optcast-bench broadcast --fabric tcp --np 8           P processes over TCP loopback
//   optcast-bench p2p                                     TCP point-to-point against a plain
//                                                         socket copy of the same bytes
//   optcast-bench model --fabric tcp --np 8               LogGP predictions beside measured
//                                                         times; automatic against fixed
//   optcast-bench coll --np 8                             every collective over a size list,
//                                                         in the peer benchmarks' format
//   optcast-bench rounds                                  multi-message broadcasts in the
//                                                         simulator's rounds model (1 and k
//                                                         ports) against the papers' bounds
//   optcast-bench sim                                     simulated messages per second on a
//                                                         fixed set of large simulated runs
//   optcast-bench chaos --np 8 --trials 100               kill -9 / SIGSTOP injected into
//                                                         running jobs: how survivors end;
//                                                         --mode none: a soak, no fault
//   optcast-bench flood --np 4                            a member floods rank 0 with messages
//                                                         nobody receives: memory and pace
//   optcast-bench percall --p 2                           a small collective's cost beyond its
//                                                         messages: ranks in one process
// Each prints a table (median over iterations, the slowest rank's time) or, with
// --json, one JSON object. Over TCP the ranks must share a host (one monotonic clock).
#include <cstdio>
#include <string>

#include <optcast/optcast.hpp>

#include "bench.hpp"

int main(int argc, char** argv) try {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "broadcast") return optcast::bench::broadcast_cmd(argc, argv);
  if (cmd == "p2p") return optcast::bench::p2p_cmd(argc, argv);
  if (cmd == "rounds") return optcast::bench::rounds_cmd(argc, argv);
  if (cmd == "model") return optcast::bench::model_cmd(argc, argv);
  if (cmd == "coll") return optcast::bench::coll_cmd(argc, argv);
  if (cmd == "chaos") return optcast::bench::chaos_cmd(argc, argv);
  if (cmd == "sim") return optcast::bench::sim_cmd(argc, argv);
  if (cmd == "flood") return optcast::bench::flood_cmd(argc, argv);
  if (cmd == "percall") return optcast::bench::percall_cmd(argc, argv);
  std::fputs("usage: optcast-bench broadcast [--fabric local|tcp|ofi] [--np N | --p P] [--sizes LIST] [--json]\n"
             "       optcast-bench p2p [--fabric tcp|ofi] [--bytes SIZE] [--count N] [--json]\n"
             "       optcast-bench rounds [--n LIST] [--m LIST] [--k LIST] [--every NMAX] [--json]\n"
             "       optcast-bench model --fabric tcp --np N [--calibrate] [--sizes LIST] [--json]\n"
             "       optcast-bench coll [--fabric tcp|ofi] [--np N] [--ops LIST] [--sizes LIST] [--timing sync|local] [--json]\n"
             "       optcast-bench sim [--runs LIST] [--repeat N] [--json]\n"
             "       optcast-bench chaos [--fabric tcp|ofi] [--np N] [--trials N] [--mode kill|stop|both|none] [--ops N] [--json]\n"
             "       optcast-bench flood --np N [--frames N] [--reps N] [--json]\n"
             "       optcast-bench percall [--p P] [--ops LIST] [--sizes LIST] [--calls K] [--json]\n"
             "Run 'optcast-bench <command> --help' for all options.\n",
             cmd == "--help" || cmd == "-h" ? stdout : stderr);
  return cmd == "--help" || cmd == "-h" ? 0 : 2;
} catch (const optcast::setup_error& e) {
  std::fprintf(stderr, "optcast-bench: %s\n", e.what());
  return 1;
}
