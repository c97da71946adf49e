// optcast::calibrate against the simulator, whose LogGP parameters are known: the
// measurement loops of Alexandrov et al. Section 3 must recover them. And on the local
// and TCP fabrics: plausible, consistent figures, and the JSON round trip.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <unistd.h>

#include "optcast/calibrate.hpp"
#include "optcast/join.hpp"
#include "worlds.hpp"

using namespace optcast;

TEST_CASE("calibrate recovers the simulator's L, o, g, G", "[calibrate][sim]") {
  struct params {
    double L, o, g, G;
  };
  for (auto m : {params{6, 2, 4, 0.01}, params{30, 0, 10, 1}, params{5, 1, 2, 0}, params{100, 3, 8, 0.002}}) {
    INFO("L " << m.L << " o " << m.o << " g " << m.g << " G " << m.G);
    for (int p : {2, 5}) {
      testing::sim_test_world w(p, {}, sim::model::loggp(m.L, m.o, m.g, m.G));
      std::vector<calibration> got(static_cast<std::size_t>(p));
      auto res = w.run_all([&](communicator& c) -> task<result<void>> {
        auto r = co_await calibrate(c, {.trials = 3, .repetitions = 10, .stream = 64, .big_bytes = 4096});
        if (!r) co_return fail(r.error());
        got[static_cast<std::size_t>(c.rank())] = *r;
        co_return result<void>{};
      });
      for (auto& r : res) REQUIRE(r);
      for (const auto& c : got) {  // every rank has rank 0's figures
        CHECK(c.model.L == Approx(m.L).margin(1e-9));
        CHECK(c.model.o == Approx(m.o).margin(1e-9));
        CHECK(c.model.g == Approx(std::max(m.g, m.o)).margin(1e-9));
        CHECK(c.model.G == Approx(m.G).margin(1e-9));
        CHECK(c.model.gamma == 0);  // the simulator's clock charges no compute
        // Every rank's one-byte exchange at once: each round waits for a message sent in
        // the round before (at least L), and takes no longer than LogP's round, L + 2o or
        // the gap (ranks that drift apart overlap one round's overheads with the next's).
        CHECK(c.model.round >= m.L - 1e-9);
        CHECK(c.model.round <= std::max(m.L + 2 * m.o, std::max(m.g, m.o)) + 1e-9);
        CHECK(c.round.min <= c.round.median);
        CHECK(c.round.median <= c.round.max);
        CHECK(c.L.min <= c.L.median);
        CHECK(c.L.median <= c.L.max);
        CHECK(c.ranks == p);
      }
    }
  }
}

TEST_CASE("calibrate on hosts of several ranks: the network between hosts, the host link within one", "[calibrate][sim][hosts]") {
  sim::model m = sim::model::loggp(50, 5, 6, 0.5);
  m.host = loggp_link{2, 1, 1.5, 0.01};
  struct shape {
    std::vector<int> host_of;
    bool has_host;
  };
  // Ranks 0 and 1 on one host (the old pair would have measured the host link as the
  // network), interleaved (rank 1 elsewhere), and rank 0 alone on its host.
  for (const auto& sh : {shape{{0, 0, 1, 1}, true}, shape{{0, 1, 0, 1}, true}, shape{{0, 1, 1, 2}, false}}) {
    INFO("hosts " << sh.host_of[0] << sh.host_of[1] << sh.host_of[2] << sh.host_of[3]);
    sim::world w(4, m, {.layout = topology{sh.host_of, 1}});
    auto comms = communicators_of(w);
    std::vector<calibration> got(4);
    auto res = run_all(comms, [&](communicator& c) -> task<result<void>> {
      auto r = co_await calibrate(c, {.trials = 3, .repetitions = 10, .stream = 64, .big_bytes = 4096});
      if (!r) co_return fail(r.error());
      got[static_cast<std::size_t>(c.rank())] = *r;
      co_return result<void>{};
    });
    for (auto& r : res) REQUIRE(r);
    for (const auto& c : got) {
      CHECK(c.model.L == Approx(m.L).margin(1e-9));
      CHECK(c.model.o == Approx(m.o).margin(1e-9));
      CHECK(c.model.g == Approx(m.g).margin(1e-9));
      CHECK(c.model.G == Approx(m.G).margin(1e-9));
      REQUIRE(c.model.host.has_value() == sh.has_host);
      if (!sh.has_host) continue;
      CHECK(c.model.host->L == Approx(m.host->L).margin(1e-9));
      CHECK(c.model.host->o == Approx(m.host->o).margin(1e-9));
      CHECK(c.model.host->g == Approx(m.host->g).margin(1e-9));
      CHECK(c.model.host->G == Approx(m.host->G).margin(1e-9));
    }
    // The file a job reads back keeps the host link.
    std::string why;
    const auto back = parse_calibration(got[0].json(), &why);
    REQUIRE(back);
    CHECK(back->host.has_value() == sh.has_host);
    if (sh.has_host) CHECK(back->host->G == Approx(m.host->G).margin(1e-12));
  }
  std::string why;
  CHECK_FALSE(parse_calibration(R"({"model": {"L": 1, "o": 1, "g": 1, "G": 0, "host": {"L": 1, "o": 1, "g": 1}}})", &why));
  CHECK_THAT(why, Catch::Contains("\"host\" has no non-negative \"G\""));
  CHECK_FALSE(parse_calibration(R"({"model": {"L": 1, "o": 1, "g": 1, "G": 0, "host": 3}})", &why));
  CHECK_THAT(why, Catch::Contains("\"host\" is not an object"));
  CHECK_FALSE(parse_calibration(R"({"model": {"L": 1, "o": 1, "g": 1, "G": 0, "round": -1}})", &why));
  CHECK_THAT(why, Catch::Contains("\"round\" is not a non-negative number"));
  // A file written before rounds were measured: no floor.
  const auto old = parse_calibration(R"({"model": {"L": 1, "o": 1, "g": 1, "G": 0}})", &why);
  REQUIRE(old);
  CHECK(old->round == 0);
}

TEST_CASE("calibrate on local and TCP: positive figures, the JSON read back", "[calibrate][local][tcp]") {
  for (const auto& [kind, p] : {std::pair{"local", 3}, std::pair{"tcp", 2}}) {
    INFO(kind << " p " << p);
    auto w = testing::make_world(kind, p);
    calibration got;
    auto res = w->run_all([&](communicator& c) -> task<result<void>> {
      auto r = co_await calibrate(c, {.trials = 3, .repetitions = 20, .stream = 64, .big_bytes = 1 << 18});
      if (!r) co_return fail(r.error());
      if (c.rank() == 0) got = *r;
      co_return result<void>{};
    });
    for (auto& r : res) REQUIRE(r);
    CHECK(got.model.o > 0);
    CHECK(got.model.g > 0);
    CHECK(got.model.L >= 0);
    CHECK(got.model.G >= 0);
    // Combining a byte takes some time, and well under a microsecond.
    CHECK(got.model.gamma > 0);
    CHECK(got.model.gamma < 1e-6);
    CHECK(got.gamma.min <= got.gamma.median);
    CHECK(got.model.o < 0.01);  // a send of one byte on loopback takes well under 10 ms
    CHECK(got.fabric == kind);
    std::string why;
    const auto back = parse_calibration(got.json(), &why);
    REQUIRE(back);
    CHECK(back->L == Approx(got.model.L).epsilon(1e-6));
    CHECK(back->G == Approx(got.model.G).epsilon(1e-6).margin(1e-15));
    CHECK(back->gamma == Approx(got.model.gamma).epsilon(1e-6));
    CHECK(back->sharing == Approx(got.model.sharing).epsilon(1e-6));
    // A round of exchanges takes at least a message's way there (some microseconds on
    // loopback, well under 10 ms), and the model keeps it.
    CHECK(got.round.median > 0);
    CHECK(got.round.median < 0.01);
    CHECK(got.round.min <= got.round.median);
    CHECK(got.model.round == got.round.median);
    CHECK(back->round == Approx(got.model.round).epsilon(1e-6));
    if (p >= 3) {  // measured: a ratio of two broadcasts' times, never below 0
      CHECK(got.sharing.min >= 0);
      CHECK(got.sharing.min <= got.sharing.median);
      CHECK(got.sharing.median <= got.sharing.max);
      CHECK(std::isfinite(got.sharing.max));
      CHECK(got.model.sharing == got.sharing.median);
    } else {  // two ranks share no link: the default stays
      CHECK(got.model.sharing == communicator_options{}.model.sharing);
    }
  }
}

TEST_CASE("calibrate: one rank, bad options and bad files are refused with the reason", "[calibrate][local]") {
  testing::local_test_world one(1);
  auto res = one.run_all([&](communicator& c) -> task<result<void>> {
    auto r = co_await calibrate(c);
    if (r || c.last_error().find("at least 2 ranks") == std::string::npos) co_return fail(errc::protocol_violation);
    co_return result<void>{};
  });
  CHECK(res[0]);
  testing::local_test_world two(2);
  auto res2 = two.run_all([&](communicator& c) -> task<result<void>> {
    auto r = co_await calibrate(c, {.trials = 0});
    if (r || c.last_error().find("trials") == std::string::npos) co_return fail(errc::protocol_violation);
    co_return result<void>{};
  });
  for (auto& r : res2) CHECK(r);
  std::string why;
  CHECK_FALSE(parse_calibration("{\"fabric\":\"tcp\"}", &why));
  CHECK(why.find("no \"model\"") != std::string::npos);
  CHECK_FALSE(parse_calibration("{\"model\":{\"L\":1,\"o\":-1,\"g\":1,\"G\":0}}", &why));
  CHECK(why.find("\"o\"") != std::string::npos);
  // A file cut short, and a number written as a string: both refused with what is wrong.
  CHECK_FALSE(parse_calibration("{\"model\":{\"L\":1,\"o\":1", &why));
  CHECK(why.find("not JSON") != std::string::npos);
  CHECK_FALSE(parse_calibration("{\"model\":{\"L\":\"2\",\"o\":1,\"g\":1,\"G\":0}}", &why));
  CHECK(why.find("\"L\" is not a non-negative number") != std::string::npos);
  CHECK_FALSE(load_calibration("/nonexistent/optcast.json", &why));
  CHECK(why.find("cannot read") != std::string::npos);
  const auto ok = parse_calibration("{\"model\":{\"L\":2.5e-05,\"o\":1e-06,\"g\":3e-06,\"G\":7e-10}}");
  REQUIRE(ok);
  CHECK(ok->L == 2.5e-05);
  CHECK(ok->G == 7e-10);
  // A file from before gamma keeps the default; a bad gamma is refused.
  CHECK(ok->gamma == communicator_options{}.model.gamma);
  CHECK(ok->sharing == communicator_options{}.model.sharing);
  CHECK_FALSE(parse_calibration("{\"model\":{\"L\":1,\"o\":1,\"g\":1,\"G\":0,\"sharing\":-0.5}}", &why));
  CHECK(why.find("sharing") != std::string::npos);
  const auto with = parse_calibration("{\"model\":{\"L\":2.5e-05,\"o\":1e-06,\"g\":3e-06,\"G\":7e-10,\"gamma\":4e-11}}");
  REQUIRE(with);
  CHECK(with->gamma == 4e-11);
  CHECK_FALSE(parse_calibration("{\"model\":{\"L\":1,\"o\":1,\"g\":1,\"G\":0,\"gamma\":-2}}", &why));
  CHECK(why.find("gamma") != std::string::npos);
}

TEST_CASE("OPTCAST_CALIBRATION: a job's communicators take the saved model", "[calibrate][local]") {
  char path[] = "/tmp/optcast-calibration-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream out(path);
    out << R"({"fabric":"tcp","ranks":2,"model":{"L":2.5e-05,"o":1e-06,"g":3e-06,"G":7e-10},"spread":{}})" << "\n";
  }
  local::world w(1);
  job_config cfg;
  collective_settings s;
  s.calibration = path;
  auto comm = make_communicator(w.fabric(0), cfg, s);
  CHECK(comm.options().model.L == 2.5e-05);
  CHECK(comm.options().model.G == 7e-10);
  {
    std::ofstream out(path);
    out << "{\"model\":{\"L\":1}}\n";
  }
  local::world w2(1);
  CHECK_THROWS_WITH(make_communicator(w2.fabric(0), cfg, s), Catch::Contains("OPTCAST_CALIBRATION") && Catch::Contains("no \"o\""));
  std::remove(path);
}
