// The registry (optcast/algorithm.hpp) walked row by row: every algorithm runs in the
// simulator through optcast::sim::simulate (what `optcast simulate` prints) on a small
// grid of p, roots, block counts and models, its results verified on every rank, and reaches the time its paper
// proves wherever the row states one; it is refused exactly where its requirements say;
// and no algorithm runs a collective it does not serve.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "optcast/algorithm.hpp"
#include "optcast/collectives.hpp"
#include "optcast/net/sim.hpp"
#include "optcast/simulate.hpp"

using namespace optcast;

namespace {

// Every kind of model the simulator has, one port and three.
const std::vector<sim::model> models = {
    sim::model::rounds(),          sim::model::rounds(3),         sim::model::postal(3),
    sim::model::postal(3).choosing(), sim::model::postal(2),      sim::model::logp(5, 1, 2),
    sim::model::logp(3, 2, 1),     sim::model::loggp(6, 2, 4, 1), sim::model::loggp(5, 0, 3, 1),
};

// Bytes per collective: small enough for a quick run, large enough to cut in blocks.
std::uint64_t bytes_for(collective c, int p) {
  switch (c) {
    case collective::reduce_scatter_block: return 12 * static_cast<std::uint64_t>(p);
    case collective::summation: return 40;
    case collective::barrier: return 0;
    case collective::scatter:
    case collective::gather:
    case collective::alltoall:
    case collective::stream: return 3;
    default: return 60;
  }
}

}  // namespace

TEST_CASE("every registry row runs in the simulator and reaches the time its paper proves", "[registry][sim]") {
  std::map<std::string, int> stated;  // row -> runs where it states a time
  int runs = 0, refusals = 0, violations = 0;
  for (const auto& row : registry()) {
    const std::string name = std::string(to_string(row.coll)) + " " + std::string(to_string(row.alg));
    stated[name];
    for (const auto& m : models)
      for (int p : {2, 3, 5, 8, 13, 20})
        for (int blocks : {1, 4})
          for (int root : {0, p - 1}) {
            sim::run_request req{.coll = row.coll, .alg = row.alg, .p = p, .bytes = bytes_for(row.coll, p),
                                 .blocks = blocks, .root = root, .model = m};
            // A row that decomposes by host runs on hosts of one rank with a rail per port
            // (the k-port model's ports made rails), or on hosts of two ranks; with neither
            // (one port, p odd) it is refused, saying why.
            if (row.needs.lanes && m.ports >= 2) req.rails = m.ports;
            else if (row.needs.lanes && p % 2 == 0 && p > 2) req.per_host = 2;
            // The lanes take equal parts only (irregular counts: multi_lane_test).
            if (row.needs.lanes && row.coll == collective::reduce_scatter) req.bytes = 12 * static_cast<std::uint64_t>(p);
            INFO(name << ", p " << p << ", n " << blocks << ", root " << root << ", " << m.describe());
            std::string why;
            const auto o = sim::simulate(req, &why);
            INFO(why);
            if (row.needs.lanes && req.rails == 1 && req.per_host == 1) {
              CHECK_FALSE(o);
              CHECK(why.find("needs hosts of several ranks or several rails") != std::string::npos);
              ++refusals;
              continue;
            }
            if (m.ports < row.needs.ports) {
              // Refused where its requirements say, with the reason.
              CHECK_FALSE(o);
              CHECK(why.find("needs at least " + std::to_string(row.needs.ports) + " ports") != std::string::npos);
              ++refusals;
              continue;
            }
            REQUIRE(o);
            INFO(o->error);
            if (m.kind == sim::model_kind::rounds && row.model != paper_model::rounds && !o->ok) {
              // A LogP or LogGP schedule lets messages meet at a port, which its model
              // queues and the strict rounds model reports; never wrong data.
              CHECK(o->rep.error == errc::port_violation);
              ++violations;
              continue;
            }
            CHECK(o->ok);
            CHECK(o->verified);
            CHECK(o->alg == row.alg);
            CHECK(o->rep.unreceived == 0);
            if (o->paper) {
              ++stated[name];
              INFO(o->paper->promise() << o->paper->name << " = " << o->paper->value << "; finish " << o->rep.finish_time
                                       << ", communication " << o->rep.comm_finish_time);
              CHECK(o->paper_met);
            }
            ++runs;
          }
  }
  std::string silent;
  for (const auto& [name, n] : stated)
    if (!n) silent += " " + name + ";";
  // Rows that state no time under any model here are listed, so a reader sees which.
  std::printf("%d runs, %d refusals, %d port violations of LogP schedules under the rounds model; rows stating no time "
              "on this grid:%s\n", runs, refusals, violations, silent.c_str());
  CHECK(runs > 1000);
}

TEST_CASE("the registry refuses an algorithm for a collective it does not serve, and requirements", "[registry]") {
  sim::world w(4, sim::model::rounds(2));
  auto comms = optcast::communicators_of(w);
  auto& c = comms[0];
  // Every algorithm and collective the registry has (a new row is checked here without
  // being listed); the stream is no call that plan_collective plans.
  std::set<algorithm> all;
  std::set<collective> colls;
  for (const auto& row : registry()) {
    all.insert(row.alg);
    if (row.coll != collective::stream) colls.insert(row.coll);
  }
  REQUIRE(all.size() > 1);
  int pairs = 0;
  for (auto coll : colls) {
    INFO(to_string(coll));
    // automatic resolves to a row of the collective.
    auto a = plan_collective(c, coll, {.bytes = 64, .largest = 16, .smallest = 16});
    REQUIRE(a);
    CHECK(find(coll, a->alg) != nullptr);
    for (auto alg : all) {
      INFO(to_string(alg));
      std::string why;
      const auto plan = plan_collective(c, coll, {.bytes = 64, .largest = 16, .smallest = 16}, {.alg = alg}, &why);
      if (!find(coll, alg)) {
        CHECK_FALSE(plan);
        CHECK(why.find("is not an algorithm of " + std::string(to_string(coll))) != std::string::npos);
        CHECK(why.find(algorithm_names(coll)) != std::string::npos);
      } else if (find(coll, alg)->needs.lanes) {
        // This world has no topology: every rank a host of its own, one rail.
        CHECK_FALSE(plan);
        CHECK(why.find("needs hosts of several ranks or several rails") != std::string::npos);
        ++pairs;
      } else {
        CHECK(plan);
        CHECK(plan->alg == alg);
        ++pairs;
      }
      // A non-commutative operator: refused by exactly the rows that need commutativity,
      // and never the automatic choice.
      const auto nc = plan_collective(c, coll, {.bytes = 64, .largest = 16, .smallest = 16, .commutative = false, .order_free = false},
                                      {.alg = alg}, &why);
      if (find(coll, alg) && find(coll, alg)->needs.lanes) {
        CHECK_FALSE(nc);
      } else if (find(coll, alg) && find(coll, alg)->needs.commutative) {
        CHECK_FALSE(nc);
        CHECK(why.find("non-commutative") != std::string::npos);
      } else {
        CHECK(static_cast<bool>(nc) == static_cast<bool>(find(coll, alg)));
      }
    }
    const auto nc_auto = plan_collective(c, coll, {.bytes = 64, .commutative = false, .order_free = false});
    REQUIRE(nc_auto);
    CHECK_FALSE(find(coll, nc_auto->alg)->needs.commutative);
  }
  CHECK(pairs == static_cast<int>(registry().size()) - 1);  // every row but the stream's, which has its own API
}

TEST_CASE("a collective call refuses an algorithm of another collective before it communicates", "[registry][sim]") {
  sim::world w(3, sim::model::rounds(1));
  auto comms = optcast::communicators_of(w);
  std::vector<std::string> why(3);
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
    std::vector<int> v(6, 1), out(6);
    auto r = co_await broadcast(c, std::span(v), 0, {.alg = algorithm::split_tree});
    why[static_cast<std::size_t>(c.rank())] = c.last_error();
    if (r) co_return fail(errc::protocol_violation);
    // Nothing was sent: the next collective matches up on every rank.
    co_return co_await allreduce(c, std::span<const int>(v), std::span(out), ops::sum, {.alg = algorithm::circulant});
  });
  for (int r = 0; r < 3; ++r) {
    INFO(why[static_cast<std::size_t>(r)]);
    CHECK(res[static_cast<std::size_t>(r)]);
    CHECK(why[static_cast<std::size_t>(r)].find("split_tree is not an algorithm of broadcast") != std::string::npos);
  }
}

TEST_CASE("names parse back to what they name", "[registry]") {
  for (const auto& row : registry()) {
    CHECK(parse_algorithm(to_string(row.alg)) == row.alg);
    CHECK(parse_collective(to_string(row.coll)) == row.coll);
  }
  CHECK_FALSE(parse_algorithm("circulantt"));
  CHECK_FALSE(parse_collective("broadcast "));
}
