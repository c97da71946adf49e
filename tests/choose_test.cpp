// The automatic broadcast choice (optcast/choose.hpp) against simulated runs: under
// LogGP models the algorithm it picks, with its block count, must be within 10% of the
// best of the candidates it considered when each runs with its own best block count.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "optcast/choose.hpp"
#include "optcast/net/job.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

double simulated(algorithm alg, int p, std::size_t bytes, int blocks, const sim::model& m) {
  sim::world w(p, m, {.move_payload = false});
  auto comms = w.communicators();
  std::vector<std::byte> buf(bytes);
  auto res = w.run_all(comms, [&](communicator& c) { return broadcast(c, std::span(buf), 0, {.alg = alg, .blocks = blocks}); });
  for (auto& r : res)
    if (!r) return -1;
  return w.take_report().finish_time;
}

}  // namespace

TEST_CASE("automatic broadcast: within 10% of the best candidate in the simulator", "[choose][sim]") {
  struct params {
    double L, o, g, G;
    int ports;
  };
  std::string failure;
  int checked = 0, within = 0;
  for (auto m : {params{20, 2, 4, 0.001, 1}, params{5, 1, 2, 0.01, 1}, params{100, 5, 10, 0.0001, 1}, params{20, 2, 4, 0.001, 3}})
    for (int p : {2, 7, 33, 100})
      for (std::size_t bytes : {std::size_t{8}, std::size_t{10000}, std::size_t{1000000}}) {
        const auto model = sim::model::loggp(m.L, m.o, m.g, m.G, m.ports);
        const auto ch = choose_broadcast(p, bytes, {m.L, m.o, m.g, m.G}, m.ports, 1);
        double best = 1e300, chosen = -1;
        for (const auto& c : ch.considered) {
          const double t = simulated(c.alg, p, bytes, c.blocks, model);
          if (t < 0) failure = std::string(to_string(c.alg)) + " failed";
          best = std::min(best, t);
          if (c.alg == ch.alg) chosen = t;
        }
        ++checked;
        if (chosen <= 1.1 * best) ++within;
        else
          std::printf("automatic not within 10%%: p %d, %zu B, L %g o %g g %g G %g, %d ports: %s; simulated %g, best %g\n", p, bytes,
                      m.L, m.o, m.g, m.G, m.ports, ch.explain().c_str(), chosen, best);
        // The rule is a model of round-based schedules; the simulator's LogGP runs them
        // without round barriers. Never far off, and usually within 10%.
        if (chosen > 1.5 * best)
          failure = "p " + std::to_string(p) + " bytes " + std::to_string(bytes) + " L " + std::to_string(m.L) + ": chose " +
                    ch.explain() + ", simulated " + std::to_string(chosen) + " against the best " + std::to_string(best);
        if (!failure.empty()) break;
      }
  CHECK(failure == "");
  CHECK(checked == 48);
  CHECK(within >= 40);
}

TEST_CASE("automatic broadcast: the choice follows the model", "[choose]") {
  const loggp_params m{20e-6, 2e-6, 4e-6, 1 / 1.5e9};
  // A few bytes: no pipelining pays.
  auto small = choose_broadcast(64, 8, m, 1, 1);
  CHECK(small.blocks == 1);
  // Megabytes on many ranks: pipelined, many blocks.
  auto big = choose_broadcast(64, 64 << 20, m, 1, 8192);
  CHECK(big.blocks > 8);
  CHECK((big.alg == algorithm::circulant || big.alg == algorithm::fibonacci));
  // The caller's block count is kept.
  CHECK(choose_broadcast(64, 64 << 20, m, 1, 8192, 5).blocks == 5);
  // With 3 ports a k-port algorithm wins for large messages.
  auto k3 = choose_broadcast(64, 64 << 20, m, 3, 8192);
  CHECK((k3.alg == algorithm::ktree || k3.alg == algorithm::rotation));
  CHECK(k3.predicted < big.predicted);
  // The explanation names every candidate and marks the choice.
  CHECK(k3.explain().find("*" + std::string(to_string(k3.alg))) != std::string::npos);
  CHECK(k3.explain().find("circulant") != std::string::npos);
}

TEST_CASE("OPTCAST_ALGORITHM overrides the automatic choice; a bad name is refused", "[choose][local]") {
  local::world w(1), w2(1);
  job_config cfg;
  cfg.algorithm = "binomial";
  auto comm = make_communicator(w.fabric(0), cfg);
  CHECK(comm.options().broadcast_algorithm == algorithm::binomial);
  cfg.algorithm = "fastest";
  CHECK_THROWS_WITH(make_communicator(w2.fabric(0), cfg), Catch::Contains("OPTCAST_ALGORITHM='fastest'"));
}
