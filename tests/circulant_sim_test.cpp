// The circulant family in the simulator's rounds model (one port): every collective
// takes exactly n - 1 + ceil(log2 p) rounds (allreduce twice that), with no port
// violation and no message left unreceived, and its result is right (Träff, Theorem 1,
// Observation 1, Appendix A).
//
// The grid: every p <= 64 with n in {1, 2, 3, 7, 16, 64} (quick); in [full], every p in
// 65..128 with those n, and beyond a sample up to 2,049 (see full_grid). OPTCAST_SIM_PMIN
// and OPTCAST_SIM_PMAX narrow the full grid to a range of p (meson runs it in parts in
// parallel).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/net/sim.hpp"
#include "optcast/simulate.hpp"
#include "traff/circulant.hpp"

using namespace optcast;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

constexpr int block_counts[] = {1, 2, 3, 7, 16, 64};

struct outcome {
  sim::report rep;
  bool all_ok = true;
  std::string first_error;
};

// Runs make(comm) on a fresh one-port rounds-model world.
template <class Make>
outcome on_sim(int p, Make make) {
  sim::world w(p, sim::model::rounds());
  auto comms = optcast::communicators_of(w);
  auto res = optcast::run_all(comms, make);
  outcome o{w.take_report()};
  for (std::size_t r = 0; r < res.size(); ++r)
    if (!res[r] && o.all_ok) {
      o.all_ok = false;
      o.first_error = "rank " + std::to_string(r) + ": " + describe(res[r].error(), comms[r].failure_detail()) +
                      " " + comms[r].last_error();
    }
  return o;
}

void check_rounds(const outcome& o, std::uint64_t want) {
  INFO(o.first_error << " " << o.rep.error_detail);
  REQUIRE(o.all_ok);
  CHECK_FALSE(o.rep.error);
  CHECK(o.rep.unreceived == 0);
  CHECK(o.rep.rounds == want);
}

// "" when equal, else where they first differ (Catch would print whole vectors).
template <class V>
std::string diff(const V& got, const V& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " != " + std::to_string(want[i]);
  return {};
}

// Values that make every misplaced or double-counted element visible.
std::int64_t value(int rank, std::size_t i) { return static_cast<std::int64_t>(rank) * 1000003 + static_cast<std::int64_t>(i) * 7 + 1; }

struct grid_point {
  int p;
  std::vector<int> ns;
};

// Every p in [pmin, pmax] with every block count.
std::vector<grid_point> every(int pmin, int pmax) {
  std::vector<grid_point> g;
  for (int p = pmin; p <= pmax; ++p) g.push_back({p, {std::begin(block_counts), std::end(block_counts)}});
  return g;
}

// Beyond p = 128: every p to 300, then a sample to 2,049: 2^k - 1, 2^k and 2^k + 1 (where
// ceil(log2 p) steps and the schedules' baseblocks wrap), primes and round numbers. Each
// runs n = 1 and one more block count, taken in turn, as long as n p <= 40,000 (an
// allreduce keeps 2 n p elements on each of p ranks: 1.1 GB at p = 2,049 with n = 16).
std::vector<grid_point> full_grid() {
  auto g = every(65, 128);
  std::vector<int> ps = {331, 509, 701, 1000, 1009, 1531, 1999, 2000, 2039};
  for (int p = 129; p <= 300; ++p) ps.push_back(p);
  for (int k = 9; k <= 11; ++k)
    for (int d : {-1, 0, 1}) ps.push_back((1 << k) + d);
  std::sort(ps.begin(), ps.end());
  std::size_t turn = 0;
  for (int p : ps) {
    std::vector<int> ns = {1};
    for (std::size_t tries = 0; tries < std::size(block_counts); ++tries) {
      const int n = block_counts[1 + (turn++ % (std::size(block_counts) - 1))];
      if (static_cast<long>(n) * p <= 40000) {
        ns.push_back(n);
        break;
      }
    }
    g.push_back({p, ns});
  }
  return g;
}

}  // namespace

// Every collective of the family at every point of the grid.
static void sweep(const std::vector<grid_point>& grid) {
  for (const auto& [p, ns] : grid) {
    const int q = circulant::ceil_log2(p);
    const auto P = static_cast<std::size_t>(p);
    for (int n : ns) {
      INFO("p " << p << " n " << n);
      const auto N = static_cast<std::size_t>(n);
      const std::uint64_t phase = static_cast<std::uint64_t>(n - 1 + q);
      const collective_options o{.alg = algorithm::circulant, .blocks = n};
      const int root = (p * 7 / 11) % p;

      {  // broadcast: n elements, one per block
        std::vector<std::vector<std::int64_t>> b(P, std::vector<std::int64_t>(N));
        for (std::size_t i = 0; i < N; ++i) b[static_cast<std::size_t>(root)][i] = value(root, i);
        auto res = on_sim(p, [&](communicator& c) { return broadcast(c, std::span(b[static_cast<std::size_t>(c.rank())]), root, o); });
        check_rounds(res, phase);
        for (auto& v : b) CHECK(diff(v, b[static_cast<std::size_t>(root)]) == "");
      }
      {  // allgather: n elements per rank
        std::vector<std::vector<std::int64_t>> in(P, std::vector<std::int64_t>(N)), out(P, std::vector<std::int64_t>(N * P));
        std::vector<std::int64_t> want(N * P);
        for (int r = 0; r < p; ++r)
          for (std::size_t i = 0; i < N; ++i)
            want[static_cast<std::size_t>(r) * N + i] = in[static_cast<std::size_t>(r)][i] = value(r, i);
        auto res = on_sim(p, [&](communicator& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          return allgather(c, std::span<const std::int64_t>(in[r]), std::span(out[r]), o);
        });
        check_rounds(res, phase);
        for (auto& v : out) CHECK(diff(v, want) == "");
      }
      {  // allgatherv: rank r contributes n * (r mod 3) elements, rank 0 nothing
        std::vector<int> counts(P);
        for (int r = 0; r < p; ++r) counts[static_cast<std::size_t>(r)] = n * (r % 3);
        const auto total = static_cast<std::size_t>(std::accumulate(counts.begin(), counts.end(), 0));
        std::vector<std::int64_t> want;
        std::vector<std::vector<std::int64_t>> in(P), out(P, std::vector<std::int64_t>(total));
        for (int r = 0; r < p; ++r)
          for (int i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
            in[static_cast<std::size_t>(r)].push_back(value(r, static_cast<std::size_t>(i)));
            want.push_back(value(r, static_cast<std::size_t>(i)));
          }
        auto res = on_sim(p, [&](communicator& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          return allgatherv(c, std::span<const std::int64_t>(in[r]), std::span(out[r]), std::span<const int>(counts), o);
        });
        check_rounds(res, phase);  // for p = 2 only rank 1 contributes: a broadcast
        for (auto& v : out) CHECK(diff(v, want) == "");
      }
      {  // reduce: n elements, sum
        std::vector<std::vector<std::int64_t>> in(P, std::vector<std::int64_t>(N)), out(P, std::vector<std::int64_t>(N));
        std::vector<std::int64_t> want(N);
        for (int r = 0; r < p; ++r)
          for (std::size_t i = 0; i < N; ++i) want[i] += in[static_cast<std::size_t>(r)][i] = value(r, i);
        auto res = on_sim(p, [&](communicator& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          return reduce(c, std::span<const std::int64_t>(in[r]), std::span(out[r]), ops::sum, root, o);
        });
        check_rounds(res, phase);
        CHECK(diff(out[static_cast<std::size_t>(root)], want) == "");
      }
      {  // reduce_scatter_block: n elements per rank's block
        std::vector<std::vector<std::int64_t>> in(P, std::vector<std::int64_t>(N * P)), out(P, std::vector<std::int64_t>(N));
        std::vector<std::int64_t> want(N * P);
        for (int r = 0; r < p; ++r)
          for (std::size_t i = 0; i < N * P; ++i) want[i] += in[static_cast<std::size_t>(r)][i] = value(r, i);
        auto res = on_sim(p, [&](communicator& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          return reduce_scatter_block(c, std::span<const std::int64_t>(in[r]), std::span(out[r]), ops::sum, o);
        });
        check_rounds(res, phase);
        for (std::size_t r = 0; r < P; ++r)
          CHECK(diff(out[r], std::vector<std::int64_t>(want.begin() + static_cast<std::ptrdiff_t>(r * N),
                                                    want.begin() + static_cast<std::ptrdiff_t>((r + 1) * N))) == "");
      }
      {  // reduce_scatter: rank r gets n * (1 + r mod 2) elements
        std::vector<std::size_t> counts(P), offs(P + 1);
        for (std::size_t r = 0; r < P; ++r) {
          counts[r] = N * (1 + r % 2);
          offs[r + 1] = offs[r] + counts[r];
        }
        std::vector<std::vector<std::int64_t>> in(P, std::vector<std::int64_t>(offs[P])), out(P);
        std::vector<std::int64_t> want(offs[P]);
        for (int r = 0; r < p; ++r) {
          out[static_cast<std::size_t>(r)].resize(counts[static_cast<std::size_t>(r)]);
          for (std::size_t i = 0; i < offs[P]; ++i) want[i] += in[static_cast<std::size_t>(r)][i] = value(r, i);
        }
        auto res = on_sim(p, [&](communicator& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          return reduce_scatter(c, std::span<const std::int64_t>(in[r]), std::span(out[r]),
                                std::span<const std::size_t>(counts), ops::sum, o);
        });
        check_rounds(res, phase);
        for (std::size_t r = 0; r < P; ++r)
          CHECK(diff(out[r], std::vector<std::int64_t>(want.begin() + static_cast<std::ptrdiff_t>(offs[r]),
                                                    want.begin() + static_cast<std::ptrdiff_t>(offs[r + 1]))) == "");
      }
      {  // allreduce: n elements per rank's segment
        std::vector<std::vector<std::int64_t>> in(P, std::vector<std::int64_t>(N * P)), out(P, std::vector<std::int64_t>(N * P));
        std::vector<std::int64_t> want(N * P);
        for (int r = 0; r < p; ++r)
          for (std::size_t i = 0; i < N * P; ++i) want[i] += in[static_cast<std::size_t>(r)][i] = value(r, i);
        auto res = on_sim(p, [&](communicator& c) {
          const auto r = static_cast<std::size_t>(c.rank());
          return allreduce(c, std::span<const std::int64_t>(in[r]), std::span(out[r]), ops::sum, o);
        });
        check_rounds(res, 2 * phase);
        for (auto& v : out) CHECK(diff(v, want) == "");
      }
    }
  }
}

TEST_CASE("circulant family: exact rounds in the one-port rounds model, p <= 64", "[sim][circulant]") { sweep(every(2, 64)); }

TEST_CASE("circulant family: exact rounds in the one-port rounds model", "[sim][circulant][full]") {
  const int pmin = env_int("OPTCAST_SIM_PMIN", 2), pmax = env_int("OPTCAST_SIM_PMAX", 1 << 30);
  auto grid = full_grid();
  std::erase_if(grid, [&](const grid_point& g) { return g.p < pmin || g.p > pmax; });
  REQUIRE_FALSE(grid.empty());
  sweep(grid);
}

// The simulator's timing-only runs (no payload moved: fabric::carries_data false) let
// the all-roots collectives skip packing and combining and count bytes instead (from the
// schedule table's per-row counts when every segment is equal). Nothing else may change:
// the same messages, sizes, times and rounds on every rank as the verified run.
TEST_CASE("circulant family: a timing-only run sends exactly the verified run's messages", "[sim][circulant]") {
  const collective colls[] = {collective::allgather, collective::allgatherv, collective::reduce_scatter,
                              collective::reduce_scatter_block, collective::allreduce};
  for (const int p : {2, 3, 5, 17, 64, 100, 257})
    for (const int n : {1, 3, 16})
      for (const auto coll : colls)
        for (const char* counts : {"even", "skewed", "one"}) {
          if (std::string(counts) != "even" && coll != collective::allgatherv && coll != collective::reduce_scatter) continue;
          // Sizes with equal segments and with uneven ones (not a multiple of p).
          for (const std::uint64_t bytes : {static_cast<std::uint64_t>(p) * 24, static_cast<std::uint64_t>(p) * 24 + 5}) {
            if (coll == collective::reduce_scatter_block && bytes % static_cast<std::uint64_t>(p)) continue;
            sim::run_request req{.coll = coll, .alg = algorithm::circulant, .p = p, .bytes = bytes, .blocks = n, .counts = counts};
            if (coll == collective::allgather) req.bytes = bytes / static_cast<std::uint64_t>(p);  // per rank
            // Sizes decide times under LogGP (G per byte); the rounds model counts rounds.
            if (p % 2) req.model = sim::model::loggp(5, 1, 2, 0.01);
            INFO(to_string(coll) << " p " << p << " n " << n << " counts " << counts << " bytes " << req.bytes << " "
                                 << req.model.describe());
            auto checked = sim::simulate(req);
            req.verify = false;
            auto timed = sim::simulate(req);
            REQUIRE(checked);
            REQUIRE(timed);
            REQUIRE(checked->ok);
            REQUIRE(checked->verified);
            REQUIRE(timed->ok);
            CHECK_FALSE(timed->verified);
            CHECK(timed->rep.json() == checked->rep.json());
          }
        }
}

// Blocks of 1, 2, 4, 8 or 16 bytes: the all-roots collectives run their rounds on a
// block-major copy of the buffer (all_roots_circulant.cpp), transposed in and out; 3 and
// 32 bytes keep the caller's layout. Every rank's result checked by simulate().
TEST_CASE("circulant family: blocks of every small width, in a block-major copy", "[sim][circulant]") {
  const collective colls[] = {collective::allgather, collective::reduce_scatter_block, collective::allreduce};
  for (const int p : {2, 3, 7, 33, 100})
    for (const int n : {1, 2, 5})
      for (const std::uint64_t width : {1, 2, 3, 4, 8, 16, 32})
        for (const auto coll : colls) {
          const std::uint64_t segment = static_cast<std::uint64_t>(n) * width;
          sim::run_request req{.coll = coll, .alg = algorithm::circulant, .p = p,
                               .bytes = coll == collective::allgather ? segment : segment * static_cast<std::uint64_t>(p),
                               .blocks = n};
          INFO(to_string(coll) << " p " << p << " n " << n << " block width " << width);
          auto got = sim::simulate(req);
          REQUIRE(got);
          INFO(got->error);
          CHECK(got->ok);
          CHECK(got->verified);
        }
}
