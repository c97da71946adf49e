// The automatic broadcast choice (optcast/choose.hpp) against simulated runs: under
// LogGP models the algorithm it picks, with its block count, must be within 10% of the
// best of the candidates it considered when each runs with its own best block count;
// for the other circulant collectives, the block count the model picks against every n.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "optcast/choose.hpp"
#include "optcast/join.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

double simulated(algorithm alg, int p, std::size_t bytes, int blocks, const sim::model& m) {
  sim::world w(p, m, {.move_payload = false});
  auto comms = optcast::communicators_of(w);
  std::vector<std::byte> buf(bytes);
  auto res = optcast::run_all(comms, [&](communicator& c) { return broadcast(c, std::span(buf), 0, {.alg = alg, .blocks = blocks}); });
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
  collective_settings s;
  s.algorithm = "binomial";
  auto comm = make_communicator(w.fabric(0), cfg, s);
  CHECK(comm.options().broadcast_algorithm == algorithm::binomial);
  s.algorithm = "fastest";
  CHECK_THROWS_WITH(make_communicator(w2.fabric(0), cfg, s), Catch::Contains("OPTCAST_ALGORITHM='fastest'"));
  // An algorithm of another collective is refused when the job starts, not at its
  // first broadcast.
  local::world w3(1);
  s.algorithm = "split_tree";
  CHECK_THROWS_WITH(make_communicator(w3.fabric(0), cfg, s), Catch::Contains("not a broadcast algorithm"));
}

namespace {

enum class coll { allgather_even, allgather_skewed, allgather_one, reduce, allreduce };

const char* name(coll k) {
  switch (k) {
    case coll::allgather_even: return "allgather (even)";
    case coll::allgather_skewed: return "allgatherv (one rank 90%)";
    case coll::allgather_one: return "allgatherv (one rank all)";
    case coll::reduce: return "reduce";
    case coll::allreduce: return "allreduce";
  }
  return "?";
}

// Each rank's element counts for an all-roots run of `elems` elements in all.
std::vector<std::int64_t> counts_of(coll k, int p, std::int64_t elems) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(p), 0);
  if (k == coll::allgather_one) counts[0] = elems;
  else if (k == coll::allgather_skewed) {
    counts[0] = elems * 9 / 10;
    for (int r = 1; r < p; ++r) counts[static_cast<std::size_t>(r)] = (elems - counts[0]) / (p - 1);
  } else
    for (auto& x : counts) x = elems / p;
  return counts;
}

// The simulated time of one collective with n blocks (0: the automatic choice).
double simulated(coll k, int p, std::int64_t elems, int n, const sim::model& m) {
  sim::world w(p, m, {.move_payload = false});
  communicator_options co;
  co.min_block_bytes = 8;
  auto comms = optcast::communicators_of(w, co);
  const auto counts = counts_of(k, p, elems);
  std::int64_t total = 0;
  for (auto x : counts) total += x;
  std::vector<std::vector<std::int64_t>> in(static_cast<std::size_t>(p)), out(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    const auto R = static_cast<std::size_t>(r);
    const bool all_roots = k != coll::reduce && k != coll::allreduce;
    in[R].resize(static_cast<std::size_t>(all_roots ? counts[R] : elems));
    out[R].resize(static_cast<std::size_t>(all_roots ? total : elems));
  }
  const collective_options o{.alg = algorithm::circulant, .blocks = n};
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
    const auto R = static_cast<std::size_t>(c.rank());
    const std::span<const std::int64_t> mine(in[R]);
    switch (k) {
      case coll::reduce: return reduce(c, mine, std::span(out[R]), ops::sum, 0, o);
      case coll::allreduce: return allreduce(c, mine, std::span(out[R]), ops::sum, o);
      default: return allgatherv(c, mine, std::span(out[R]), std::span<const std::int64_t>(counts), o);
    }
  });
  for (auto& r : res)
    if (!r) return -1;
  return w.take_report().finish_time;
}

}  // namespace

TEST_CASE("circulant collectives: the model's block count against simulated runs", "[choose][sim][full]") {
  struct params {
    double L, o, g, G;
  };
  std::string failure;
  int checked = 0, within = 0;
  for (auto m : {params{20, 2, 4, 0.001}, params{5, 1, 2, 0.01}, params{100, 5, 10, 0.0001}})
    for (int p : {7, 33})
      for (std::int64_t elems : {std::int64_t{33 * 100}, std::int64_t{33 * 4000}})
        for (coll k : {coll::allgather_even, coll::allgather_skewed, coll::allgather_one, coll::reduce, coll::allreduce}) {
          if (!failure.empty()) continue;
          const auto model = sim::model::loggp(m.L, m.o, m.g, m.G, 1);
          const loggp_params lp{m.L, m.o, m.g, m.G};
          const auto counts = counts_of(k, p, elems);
          const auto [least, most] = std::minmax_element(counts.begin(), counts.end());
          std::size_t total = 0;
          for (auto x : counts) total += static_cast<std::size_t>(x) * 8;
          const auto what = k == coll::reduce      ? circulant_collective::reduce
                            : k == coll::allreduce ? circulant_collective::allreduce
                                                   : circulant_collective::all_roots;
          const std::size_t bytes = what == circulant_collective::all_roots ? total : static_cast<std::size_t>(elems) * 8;
          const auto ch = choose_circulant_blocks(what, p, bytes, static_cast<std::size_t>(*most) * 8,
                                                  static_cast<std::size_t>(*least) * 8, lp, 8);
          const double automatic = simulated(k, p, elems, 0, model);
          const double chosen = simulated(k, p, elems, ch.blocks, model);
          double best = chosen;
          int best_n = ch.blocks;
          for (int n : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128})
            if (const double t = simulated(k, p, elems, n, model); t >= 0 && t < best) best = t, best_n = n;
          std::printf("%-26s p %2d %8zu B  L %3g o %g g %2g G %g: n = %3d predicted %9.0f simulated %9.0f (%.2f); best n = %3d %9.0f\n",
                      name(k), p, bytes, m.L, m.o, m.g, m.G, ch.blocks, ch.predicted, chosen, chosen / ch.predicted, best_n, best);
          ++checked;
          // The collectives run with the model's block count when the caller gives none.
          if (automatic != chosen)
            failure = std::string(name(k)) + ": automatic took " + std::to_string(automatic) + ", n = " +
                      std::to_string(ch.blocks) + " takes " + std::to_string(chosen);
          if (chosen < 0) failure = std::string(name(k)) + " failed";
          if (chosen <= 1.1 * best) ++within;
          // The rule counts every round as a full hop; a one-holder start is a broadcast,
          // whose first rounds the simulator overlaps. Even parts it predicts exactly.
          if (chosen < 0.6 * ch.predicted || chosen > 1.25 * ch.predicted)
            failure = std::string(name(k)) + " p " + std::to_string(p) + ": predicted " + std::to_string(ch.predicted) +
                      ", simulated " + std::to_string(chosen);
          if (k == coll::allgather_even || k == coll::allreduce) {
            CHECK(ch.blocks == 1);
            CHECK(chosen == Approx(ch.predicted).epsilon(0.01));
          }
          if (chosen > 1.5 * best)
            failure = std::string(name(k)) + " p " + std::to_string(p) + ": n = " + std::to_string(ch.blocks) + " simulated " +
                      std::to_string(chosen) + ", n = " + std::to_string(best_n) + " " + std::to_string(best);
        }
  std::printf("the model's block count within 10%% of the best n in %d of %d cases\n", within, checked);
  CHECK(failure == "");
  CHECK(checked == 60);
  CHECK(within >= 54);
}

TEST_CASE("plan_broadcast: what broadcast runs, refusals with the reason", "[choose][sim]") {
  const auto model = sim::model::loggp(20, 2, 4, 0.001, 1);
  sim::world w(33, model, {.move_payload = false});
  auto comms = optcast::communicators_of(w);
  for (auto& c : comms) c.options().min_block_bytes = 1;
  const std::size_t bytes = 1 << 20;
  const loggp_params lp{20, 2, 4, 0.001};
  // Automatic: the choice of choose_broadcast under the fabric's model.
  const auto expect = choose_broadcast(33, bytes, lp, 1, 1);
  auto plan = plan_broadcast(comms[0], bytes);
  REQUIRE(plan);
  CHECK(plan->alg == expect.alg);
  CHECK(plan->blocks == expect.blocks);
  // A fixed algorithm without blocks: its own best n from the rule, and broadcast runs
  // exactly that (same simulated time as with the n given).
  auto fib = plan_broadcast(comms[0], bytes, {.alg = algorithm::fibonacci});
  REQUIRE(fib);
  CHECK(fib->alg == algorithm::fibonacci);
  bool found = false;
  for (const auto& cand : expect.considered)
    if (cand.alg == algorithm::fibonacci) {
      found = true;
      CHECK(fib->blocks == cand.blocks);
      CHECK(fib->predicted == cand.predicted);
    }
  CHECK(found);
  CHECK(fib->blocks > 1);
  const auto time_of = [&](collective_options o) {
    sim::world w2(33, model, {.move_payload = false});
    auto cs = optcast::communicators_of(w2);
    for (auto& c : cs) c.options().min_block_bytes = 1;
    std::vector<std::byte> buf(bytes);
    auto res = optcast::run_all(cs, [&](communicator& c) { return broadcast(c, std::span(buf), 0, o); });
    for (auto& r : res) REQUIRE(r);
    return w2.take_report().finish_time;
  };
  CHECK(time_of({.alg = algorithm::fibonacci}) == time_of({.alg = algorithm::fibonacci, .blocks = fib->blocks}));
  CHECK(time_of({.alg = algorithm::fibonacci}) != time_of({.alg = algorithm::fibonacci, .blocks = fib->blocks + 7}));
  // The caller's n is kept; binomial moves the whole message.
  CHECK(plan_broadcast(comms[0], bytes, {.alg = algorithm::circulant, .blocks = 9})->blocks == 9);
  CHECK(plan_broadcast(comms[0], bytes, {.alg = algorithm::binomial})->blocks == 1);
  // Refusals, with what broadcast would say.
  std::string why;
  CHECK_FALSE(plan_broadcast(comms[0], bytes, {.alg = algorithm::ktree}, &why));
  CHECK(why.find("needs at least 2 ports") != std::string::npos);
  CHECK_FALSE(plan_broadcast(comms[0], bytes, {.alg = algorithm::split_tree}, &why));
  CHECK(why.find("the algorithms are") != std::string::npos);
  CHECK_FALSE(plan_broadcast(comms[0], bytes, {.blocks = -1}, &why));
  CHECK(why.find("negative") != std::string::npos);
  CHECK_FALSE(plan_broadcast(comms[0], bytes, {.model = loggp_params{-1, 0, 0, 0}}, &why));
  CHECK(why.find("model parameters") != std::string::npos);
}

TEST_CASE("automatic allreduce: circulant pair or combining broadcast, against simulated runs", "[choose][sim][full]") {
  struct params {
    double L, o, g, G;
  };
  const auto run = [](int p, std::size_t elems, const sim::model& m, collective_options o) {
    sim::world w(p, m, {.move_payload = false});
    communicator_options co;
    co.min_block_bytes = 8;
    auto comms = optcast::communicators_of(w, co);
    std::vector<std::vector<std::int64_t>> buf(static_cast<std::size_t>(p), std::vector<std::int64_t>(elems));
    auto res = optcast::run_all(comms, [&](communicator& c) {
      auto& b = buf[static_cast<std::size_t>(c.rank())];
      return allreduce(c, std::span<const std::int64_t>(b), std::span(b), ops::sum, o);
    });
    for (auto& r : res)
      if (!r) return -1.0;
    return w.take_report().finish_time;
  };
  int checked = 0, within = 0, combining = 0;
  std::string failure;
  for (auto m : {params{20, 2, 4, 0.001}, params{5, 1, 2, 0.01}, params{100, 5, 10, 0.0001}})
    for (int p : {7, 33, 64})
      for (std::size_t elems : {std::size_t{1}, std::size_t{128}, std::size_t{8192}, std::size_t{131072}}) {
        const auto model = sim::model::loggp(m.L, m.o, m.g, m.G, 1);
        const auto ch = choose_allreduce(p, elems * 8, {m.L, m.o, m.g, m.G}, 8);
        const double automatic = run(p, elems, model, {});
        double best = run(p, elems, model, {.alg = algorithm::combining});
        const double comb = best;
        for (int n : {1, 2, 4, 8, 16})
          best = std::min(best, run(p, elems, model, {.alg = algorithm::circulant, .blocks = n}));
        std::printf("allreduce p %2d %7zu B  L %3g o %g g %2g G %g: %s (circulant %.0f, combining %.0f predicted; combining %.0f "
                    "simulated); automatic %.0f, best %.0f\n",
                    p, elems * 8, m.L, m.o, m.g, m.G, std::string(to_string(ch.alg)).c_str(), ch.circulant, ch.combining, comb,
                    automatic, best);
        ++checked;
        if (ch.alg == algorithm::combining) ++combining;
        if (automatic < 0) failure = "automatic allreduce failed";
        if (automatic <= 1.1 * best) ++within;
        if (automatic > 1.5 * best)
          failure = "p " + std::to_string(p) + " " + std::to_string(elems * 8) + " B: automatic " + std::to_string(automatic) +
                    ", best " + std::to_string(best);
        // The combining prediction against its simulated run.
        if (comb < 0.75 * ch.combining || comb > 1.1 * ch.combining)
          failure = "combining p " + std::to_string(p) + " " + std::to_string(elems * 8) + " B: predicted " +
                    std::to_string(ch.combining) + ", simulated " + std::to_string(comb);
      }
  std::printf("automatic allreduce within 10%% of the best in %d of %d cases; combining chosen in %d\n", within, checked, combining);
  CHECK(failure == "");
  CHECK(checked == 36);
  CHECK(within >= 32);
  // Both are chosen somewhere: small vectors on many ranks combine, large ones pipeline.
  CHECK(combining > 0);
  CHECK(combining < checked);
  CHECK(choose_allreduce(64, 8, {20, 2, 4, 0.001}, 8).alg == algorithm::combining);
  // A floating-point sum never combines there (ranks would get different bits): the
  // least of the candidates that give every rank the same bits, recursive doubling, runs.
  {
    const auto model = sim::model::loggp(20, 2, 4, 0.001, 1);
    const auto time_of = [&](collective_options o) {
      sim::world w(64, model, {.move_payload = false});
      auto comms = optcast::communicators_of(w);
      std::vector<double> x(1, 1.5);
      auto res = optcast::run_all(comms, [&](communicator& c) { return allreduce(c, std::span<const double>(x), std::span(x), ops::sum, o); });
      for (auto& r : res) REQUIRE(r);
      return w.take_report().finish_time;
    };
    CHECK(time_of({}) == time_of({.alg = algorithm::recursive_doubling}));
    CHECK(time_of({}) < time_of({.alg = algorithm::circulant}));
    CHECK(time_of({}) > time_of({.alg = algorithm::combining}));
  }
  CHECK(choose_allreduce(64, 1 << 20, {20, 2, 4, 0.001}, 8).alg == algorithm::circulant);
}

TEST_CASE("automatic choice on a real network: the ring where shared links cost, trees for latency", "[choose][sim]") {
  // The simulator's model has no sharing: Träff's schedules (fewer rounds) win there.
  sim::world sw(8, sim::model::loggp(20, 2, 4, 0.01));
  auto sim_comms = communicators_of(sw);
  sim::world sw6(6, sim::model::loggp(20, 2, 4, 0.01));
  auto sim6_comms = communicators_of(sw6);
  // A live network's default model: sharing 0.35 (communicator.hpp).
  const communicator_options live;
  REQUIRE(live.model.sharing > 0);
  sim::world lw(8, sim::model::rounds());
  auto live_comms = communicators_of(lw);
  const std::size_t big = 64 << 20, small = 8;
  for (auto coll : {collective::reduce, collective::allreduce, collective::allgather, collective::reduce_scatter_block}) {
    INFO(to_string(coll));
    const call_shape large{.bytes = big, .largest = big / 8, .smallest = big / 8};
    const call_shape tiny{.bytes = small * 8, .largest = small, .smallest = small};
    auto in_sim = plan_collective(sim_comms[0], coll, large);
    REQUIRE(in_sim);
    // Allreduce and allgather: recursive halving and doubling move the circulant schedules'
    // bytes in as many rounds on a power of two, and take the tie; on 6 ranks the fold
    // costs two rounds more.
    const algorithm pairwise = coll == collective::allreduce   ? algorithm::recursive_halving
                               : coll == collective::allgather ? algorithm::recursive_doubling
                                                               : algorithm::circulant;
    CHECK(in_sim->alg == pairwise);
    if (coll == collective::allreduce) {
      auto in_sim6 = plan_collective(sim6_comms[0], coll, large);
      REQUIRE(in_sim6);
      CHECK(in_sim6->alg == algorithm::circulant);
    }
    // The live model given explicitly (the rounds world has no LogGP model of its own).
    auto on_wire = plan_collective(live_comms[0], coll, large, {.model = live.model});
    REQUIRE(on_wire);
    CHECK(on_wire->alg == algorithm::ring);
    auto few = plan_collective(live_comms[0], coll, tiny, {.model = live.model});
    REQUIRE(few);
    CHECK(few->alg != algorithm::ring);  // p - 1 latencies lose to ceil(log2 p)
  }
  auto b = choose_broadcast(8, big, live.model, 1, 8192);
  CHECK(b.alg == algorithm::ring);
  CHECK(choose_broadcast(8, big, loggp_params{20e-6, 2e-6, 4e-6, 1 / 1.5e9, 1e-9, 0}, 1, 8192).alg != algorithm::ring);
  CHECK(choose_broadcast(8, small, live.model, 1, 8192).alg != algorithm::ring);
}

TEST_CASE("the ring allreduce pipelines where combining costs time, and not in the simulator", "[choose][sim]") {
  sim::world w(8, sim::model::rounds());
  auto comms = communicators_of(w);
  const communicator_options live;
  REQUIRE(live.model.gamma > 0);
  auto free_combining = live.model;
  free_combining.gamma = 0;
  for (std::size_t bytes : {std::size_t{16} << 20, std::size_t{64} << 20}) {
    INFO(bytes << " bytes");
    const call_shape shape{.bytes = bytes};
    auto costly = plan_collective(comms[0], collective::allreduce, shape, {.alg = algorithm::ring, .model = live.model});
    auto free = plan_collective(comms[0], collective::allreduce, shape, {.alg = algorithm::ring, .model = free_combining});
    REQUIRE(costly);
    REQUIRE(free);
    CHECK(costly->blocks > 1);
    CHECK(free->blocks == 1);  // the ring's proven (p - 1) rounds per phase
    // The blocks chosen beat one block under the model that chose them, and the
    // prediction of one block is what it was before pipelining: gamma (bytes - bytes/p).
    const double one = predict_ring(circulant_collective::allreduce, 8, bytes, 0, 0, 1, live.model);
    CHECK(predict_ring(circulant_collective::allreduce, 8, bytes, 0, 0, costly->blocks, live.model) < one);
    CHECK(one - predict_ring(circulant_collective::allreduce, 8, bytes, 0, 0, 1, free_combining) ==
          Approx(live.model.gamma * static_cast<double>(bytes - bytes / 8)).epsilon(1e-9));
  }
  // Given blocks win over the rule.
  auto given = plan_collective(comms[0], collective::allreduce, {.bytes = std::size_t{64} << 20},
                               {.alg = algorithm::ring, .blocks = 3, .model = live.model});
  REQUIRE(given);
  CHECK(given->blocks == 3);
}

TEST_CASE("two ranks on a live network: the pairwise exchange, whose one link never changes hands", "[choose][sim]") {
  sim::world w(2, sim::model::rounds());
  auto comms = communicators_of(w);
  const communicator_options live;
  REQUIRE(live.model.sharing > 0);
  for (std::size_t b : {std::size_t{8}, std::size_t{64} << 10, std::size_t{16} << 20}) {
    INFO(b << " bytes a rank");
    // The circulant schedule's round on 2 ranks costs what the ring's step costs: same
    // partner, same message, no sharing charged.
    CHECK(predict_circulant(circulant_collective::all_roots, 2, 2 * b, b, b, 1, live.model) ==
          Approx(predict_ring(circulant_collective::all_roots, 2, 2 * b, b, b, 1, live.model)).epsilon(1e-12));
    auto plan = plan_collective(comms[0], collective::allgather, {.bytes = 2 * b, .largest = b, .smallest = b}, {.model = live.model});
    REQUIRE(plan);
    CHECK(plan->alg == algorithm::recursive_doubling);  // the tie goes to the pairwise row
  }
}
