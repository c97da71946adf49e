// optcast calibrate: the LogGP parameters of a live fabric (optcast/calibrate.hpp).
#include <asio/io_context.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "simulate.hpp"
#include "cli.hpp"
#include "optcast/optcast.hpp"

namespace optcast::tools {

namespace {

void print(const calibration& c, const std::string& what) {
  std::printf("LogGP parameters of %s (%d ranks; median of the trials, min .. max)\n", what.c_str(), c.ranks);
  const bool virtual_time = c.fabric == "sim";
  const double scale = virtual_time ? 1 : 1e6;
  const char* unit = virtual_time ? "" : " us";
  const std::pair<const char*, const calibration::spread*> rows[] = {
      {"L  latency        ", &c.L}, {"o  overhead       ", &c.o}, {"g  gap            ", &c.g}};
  for (const auto& [name, s] : rows)
    std::printf("  %s %12.4f%s   (%.4f .. %.4f)\n", name, s->median * scale, unit, s->min * scale, s->max * scale);
  std::printf("  G  gap per byte    %12.6f%s   (%.6f .. %.6f)", c.G.median * (virtual_time ? 1 : 1e9),
              virtual_time ? "" : " ns", c.G.min * (virtual_time ? 1 : 1e9), c.G.max * (virtual_time ? 1 : 1e9));
  if (c.G.median > 0 && !virtual_time) std::printf("   %.0f MB/s", 1e-6 / c.G.median);
  std::printf("\n");
  if (!virtual_time) {
    std::printf("  gamma combine/byte %12.6f ns   (%.6f .. %.6f)", c.gamma.median * 1e9, c.gamma.min * 1e9, c.gamma.max * 1e9);
    if (c.gamma.median > 0) std::printf("   %.0f MB/s", 1e-6 / c.gamma.median);
    std::printf("   (sum of doubles; the reductions' compute)\n");
  }
}

}  // namespace

int cmd_calibrate(int argc, char** argv) {
  cli::parser args("optcast calibrate",
                   "Measures L, o, g and G between ranks 0 and 1 of a fabric with timing loops (Alexandrov et al.,\n"
                   "Section 3): ping-pong for L, spaced sends for o, streams of small and large messages for g and G;\n"
                   "and gamma, the time per byte to combine two operands (the reductions' compute, on rank 0).\n"
                   "Prints them with their spread over the trials; --output saves them as JSON, which\n"
                   "OPTCAST_CALIBRATION=FILE then gives every communicator of a job as its cost model.");
  args.option("fabric", "NAME", "local (ranks in this process), sim, tcp or ofi (one process per rank: start with --np 2)", "local")
      .option("np", "N", "with --fabric tcp or ofi: start N rank processes on this machine")
      .option("p", "P", "ranks of the local or simulated fabric", "2")
      .option("model", "SPEC", "for --fabric sim: loggp:L,o,g,G, logp:L,o,g or postal:L", "loggp:6,2,4,0.01")
      .option("trials", "T", "independent measurements of every parameter", "5")
      .option("repetitions", "R", "round trips and spaced sends per trial", "50")
      .option("stream", "N", "messages per streaming loop", "200")
      .option("big", "SIZE", "message size for G", "1MiB")
      .option("output", "FILE", "write the calibration as JSON to FILE")
      .flag("json", "print the calibration as one JSON object");
  args.parse(argc, argv, 2);
  const std::string fabric_name = args.get("fabric");
  if (fabric_name != "local" && fabric_name != "sim" && fabric_name != "tcp" && fabric_name != "ofi")
    args.die("--fabric: local, sim, tcp or ofi");
  if ((fabric_name == "local" || fabric_name == "sim") && args.has("np"))
    args.die("--np starts processes for --fabric tcp or ofi; the local and sim fabrics take --p");
  calibrate_options o;
  o.trials = static_cast<int>(args.get_int("trials", 1, 1000));
  o.repetitions = static_cast<int>(args.get_int("repetitions", 1, 1000000));
  o.stream = static_cast<int>(args.get_int("stream", 8, 1000000));
  o.big_bytes = static_cast<std::size_t>(args.get_size("big"));
  if (o.big_bytes < 2 || o.big_bytes > (std::size_t{1} << 30)) args.die("--big: 2 bytes to 1 GiB");
  const bool json = args.get_flag("json");
  if (auto status = launch_local(argc, argv)) return *status;

  result<calibration> got = fail(errc::invalid_argument);
  std::string what = fabric_name, why;
  bool report = true;
  const auto run_in_process = [&](auto& world, int p) {
    auto comms = world.communicators();
    std::vector<result<calibration>> res;
    for (int r = 0; r < p; ++r) res.push_back(fail(errc::invalid_argument));
    auto done = world.run_all(comms, [&](communicator& c) -> task<result<void>> {
      res[static_cast<std::size_t>(c.rank())] = co_await calibrate(c, o);
      co_return result<void>{};
    });
    got = std::move(res[0]);
    why = comms[0].last_error();
  };
  const int p = static_cast<int>(args.get_int("p", 1, 4096));
  if (fabric_name == "local") {
    local::world w(p);
    run_in_process(w, p);
  } else if (fabric_name == "sim") {
    std::string bad;
    auto m = sim::model::parse(args.get("model"), 1, &bad);
    if (!m) args.die("--model: " + bad);
    if (m->kind == sim::model_kind::rounds) args.die("--model: calibrate measures LogGP parameters; the rounds model has none");
    sim::world w(p, *m);
    what = "sim " + m->describe();
    run_in_process(w, p);
  } else {
    asio::io_context io;
    auto comm = join(io, fabric_name);
    what = fabric_description(comm);
    got = run(comm, calibrate(comm, o));
    why = comm.last_error();
    report = comm.rank() == 0;
  }
  if (!got) {
    std::fprintf(stderr, "optcast calibrate: %s\n", why.empty() ? got.error().message().c_str() : why.c_str());
    return 1;
  }
  if (!report) return 0;
  if (json)
    std::printf("%s\n", got->json().c_str());
  else
    print(*got, what);
  if (args.has("output")) {
    std::ofstream out(args.get("output"));
    out << got->json() << "\n";
    if (!out) {
      std::fprintf(stderr, "optcast calibrate: cannot write %s\n", args.get("output").c_str());
      return 1;
    }
    if (!json) std::printf("saved to %s (use it with OPTCAST_CALIBRATION=%s)\n", args.get("output").c_str(), args.get("output").c_str());
  }
  return 0;
}

}  // namespace optcast::tools
