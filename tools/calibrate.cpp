// optcast calibrate: the LogGP parameters of a live fabric (optcast/calibrate.hpp).

#include <cstdio>
#include <fstream>
#include <string>

#include "tools.hpp"
#include "optcast/optcast.hpp"
#include "optcast/progress.hpp"
#include "cli.hpp"

namespace optcast::tools {

namespace {

void print(const calibration& c, const std::string& what) {
  std::printf("LogGP parameters of %s (%d ranks; median of the trials, min .. max)\n", what.c_str(), c.ranks);
  const bool virtual_time = c.fabric == "sim";
  const double scale = virtual_time ? 1 : 1e6;
  const char* unit = virtual_time ? "" : " us";
  const double byte_scale = virtual_time ? 1 : 1e9;
  // L, o, g and G of one link, the network's or the host's.
  const auto link = [&](const calibration::spread& L, const calibration::spread& o, const calibration::spread& g,
                        const calibration::spread& G) {
    const std::pair<const char*, const calibration::spread*> rows[] = {
        {"L  latency        ", &L}, {"o  overhead       ", &o}, {"g  gap            ", &g}};
    for (const auto& [name, s] : rows)
      std::printf("  %s %12.4f%s   (%.4f .. %.4f)\n", name, s->median * scale, unit, s->min * scale, s->max * scale);
    std::printf("  G  gap per byte    %12.6f%s   (%.6f .. %.6f)", G.median * byte_scale, virtual_time ? "" : " ns",
                G.min * byte_scale, G.max * byte_scale);
    if (G.median > 0 && !virtual_time) std::printf("   %.0f MB/s", 1e-6 / G.median);
    std::printf("\n");
  };
  link(c.L, c.o, c.g, c.G);
  std::printf("  round, all ranks   %12.4f%s   (%.4f .. %.4f)   (a dissemination barrier, every rank at once: the least a round takes)\n",
              c.round.median * scale, unit, c.round.min * scale, c.round.max * scale);
  if (!virtual_time) {
    std::printf("  gamma combine/byte %12.6f ns   (%.6f .. %.6f)", c.gamma.median * 1e9, c.gamma.min * 1e9, c.gamma.max * 1e9);
    if (c.gamma.median > 0) std::printf("   %.0f MB/s", 1e-6 / c.gamma.median);
    std::printf("   (sum of doubles; the reductions' compute)\n");
    if (c.ranks >= 3)
      std::printf("  sharing            %12.4f      (%.4f .. %.4f)   (circulant against ring broadcast, all ranks)\n",
                  c.sharing.median, c.sharing.min, c.sharing.max);
    else
      std::printf("  sharing            %12.4f      (the default: measuring it needs 3 ranks)\n", c.model.sharing);
  }
  if (c.model.host) {
    std::printf("  within a host (L, o, g, G above: between hosts, one rail)\n");
    link(c.host_L, c.host_o, c.host_g, c.host_G);
  }
}

}  // namespace

int cmd_calibrate(int argc, char** argv) {
  CLI::App app{"Measures L, o, g and G between ranks 0 and 1 of a fabric with timing loops (Alexandrov et al.,\n"
               "Section 3): ping-pong for L, spaced sends for o, streams of small and large messages for g and G;\n"
               "and gamma, the time per byte to combine two operands (the reductions' compute, on rank 0);\n"
               "with 3 or more ranks, sharing: what pipelined schedules whose links change partners every round\n"
               "lose on this network (a circulant against a ring broadcast over every rank).\n"
               "Prints them with their spread over the trials; --output saves them as JSON, which\n"
               "OPTCAST_CALIBRATION=FILE then gives every communicator of a job as its cost model.",
               "optcast calibrate"};
  std::string fabric_name = "local", model_spec = "loggp:6,2,4,0.01", output;
  int np = 0, p = 2;
  bool json = false;
  calibrate_options o;
  cli::add_fabric(app, fabric_name, {"local", "sim"});
  app.add_option("--np", np, "with --fabric tcp or ofi: start N rank processes on this machine")->check(CLI::Range(1, 4096));
  app.add_option("--p", p, "ranks of the local or simulated fabric")->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--model", model_spec, "for --fabric sim: loggp:L,o,g,G, logp:L,o,g or postal:L")->capture_default_str();
  app.add_option("--trials", o.trials, "independent measurements of every parameter")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--repetitions", o.repetitions, "round trips and spaced sends per trial")->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--stream", o.stream, "messages per streaming loop")->check(CLI::Range(8, 1000000))->capture_default_str();
  app.add_option("--big", o.big_bytes, "message size for G (2 bytes to 1 GiB)")
      ->transform(cli::byte_size(2, std::uint64_t{1} << 30))->capture_default_str();
  app.add_option("--output", output, "write the calibration as JSON to FILE");
  app.add_flag("--json", json, "print the calibration as one JSON object");
  sim::model model = sim::model::rounds();
  app.callback([&] {
    if ((fabric_name == "local" || fabric_name == "sim") && np)
      throw CLI::ValidationError("--np", "starts processes for --fabric tcp or ofi; the local and sim fabrics take --p");
    std::string bad;
    auto m = sim::model::parse(model_spec, 1, &bad);
    if (!m) throw CLI::ValidationError("--model", bad);
    if (m->kind == sim::model_kind::rounds)
      throw CLI::ValidationError("--model", "calibrate measures LogGP parameters; the rounds model has none");
    model = *m;
  });
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto status = launch_local(argc, argv)) return *status;
  progress_line progress(json);
  o.progress = [&](const std::string& what) { progress.show("calibrate: " + what); };

  result<calibration> got = fail(errc::invalid_argument);
  std::string what = fabric_name, why;
  bool report = true;
  const auto run_in_process = [&](auto& world) {
    auto comms = optcast::communicators_of(world);
    std::vector<result<calibration>> res;
    for (int r = 0; r < p; ++r) res.push_back(fail(errc::invalid_argument));
    auto done = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
      res[static_cast<std::size_t>(c.rank())] = co_await calibrate(c, o);
      co_return result<void>{};
    });
    got = std::move(res[0]);
    why = comms[0].last_error();
  };
  if (fabric_name == "local") {
    local::world w(p);
    run_in_process(w);
  } else if (fabric_name == "sim") {
    sim::world w(p, model);
    what = "sim " + model.describe();
    run_in_process(w);
  } else {
    auto comm = join(fabric_name);
    what = fabric_description(comm);
    got = run(comm, calibrate(comm, o));
    why = comm.last_error();
    report = comm.rank() == 0;
  }
  progress.clear();
  if (!got) {
    std::fprintf(stderr, "optcast calibrate: %s\n", why.empty() ? got.error().message().c_str() : why.c_str());
    return 1;
  }
  if (!report) return 0;
  if (json)
    std::printf("%s\n", got->json().c_str());
  else
    print(*got, what);
  if (!output.empty()) {
    std::ofstream out(output);
    out << got->json() << "\n";
    if (!out) {
      std::fprintf(stderr, "optcast calibrate: cannot write %s\n", output.c_str());
      return 1;
    }
    if (!json) std::printf("saved to %s (use it with OPTCAST_CALIBRATION=%s)\n", output.c_str(), output.c_str());
  }
  return 0;
}

}  // namespace optcast::tools
