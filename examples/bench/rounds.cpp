// optcast-bench rounds: the multi-message broadcasts with static schedules (fibonacci on
// one port, ktree and rotation on k) in the simulator's rounds model, each run beside the
// time its paper proves and the lower bound (optcast/bounds.hpp), every rank's bytes
// checked (optcast::sim::simulate).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <optcast/bounds.hpp>
#include <optcast/optcast.hpp>
#include <optcast/progress.hpp>
#include <optcast/simulate.hpp>

#include "bench.hpp"

namespace optcast::bench {

int rounds_cmd(int argc, char** argv) {
  CLI::App app{"Rounds of the fibonacci (one port), ktree and rotation (k ports) broadcasts in the simulator, against\n"
               "the papers' bounds and the lower bounds.",
               "optcast-bench rounds"};
  std::vector<int> ns{13, 32, 100, 1000, 3000}, ms{1, 2, 5, 32, 200}, ks{2, 3, 4, 5};
  std::vector<std::string> alg_names{"fibonacci", "ktree", "rotation"};
  int every = 0;
  bool json = false, quiet = false;
  app.add_option("--n", ns, "processors")->delimiter(',')->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--m", ms, "packets (messages)")->delimiter(',')->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--k", ks, "ports for ktree and rotation")->delimiter(',')->check(CLI::Range(2, 1024))->capture_default_str();
  app.add_option("--algorithms", alg_names, "fibonacci, ktree and/or rotation")->delimiter(',')
      ->check(CLI::IsMember({"fibonacci", "ktree", "rotation"}))->capture_default_str();
  app.add_option("--every", every, "every n from 2 to NMAX instead of --n (summary per algorithm, k and m)")
      ->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_flag("--json", json, "one JSON object");
  app.add_flag("--quiet", quiet, "no progress line (shown only on a terminal)");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (every) {
    ns.clear();
    for (int n = 2; n <= every; ++n) ns.push_back(n);
  }

  struct result_row {
    std::string alg;
    int k, n, m, rounds;
    proven_time lower, paper;
    bool met;
  };
  std::vector<result_row> rows;
  std::size_t done = 0, total = 0;
  for (const auto& a : alg_names) total += ns.size() * ms.size() * (a == "fibonacci" ? 1 : ks.size());
  progress_line progress(quiet || json);
  for (const auto& name : alg_names) {
    const algorithm alg = *parse_algorithm(name);
    for (int k : alg == algorithm::fibonacci ? std::vector<int>{1} : ks)
      for (int n : ns)
        for (int m : ms) {
          sim::run_request req{.coll = collective::broadcast, .alg = alg, .p = n, .bytes = static_cast<std::uint64_t>(m),
                               .blocks = m, .model = sim::model::rounds(k)};
          std::string why;
          const auto ran = sim::simulate(req, &why);
          if (!ran || !ran->ok || !ran->paper) {
            std::fprintf(stderr, "optcast-bench rounds: %s n %d m %d k %d failed: %s\n", name.c_str(), n, m, k,
                         !ran ? why.c_str() : !ran->ok ? ran->error.c_str() : "no bound stated");
            return 1;
          }
          rows.push_back({name, k, n, m, static_cast<int>(ran->rep.finish_time),
                          *lower_bound(collective::broadcast, req.model, {n, req.bytes, m}), *ran->paper, ran->paper_met});
          ++done;
          if (progress.due()) progress.show("rounds: " + std::to_string(done) + " of " + std::to_string(total) + " runs");
        }
  }
  progress.clear();
  const auto missed = std::count_if(rows.begin(), rows.end(), [](const auto& r) { return !r.met; });
  if (json) {
    nlohmann::ordered_json j = {{"benchmark", "rounds"}};
    auto& out = j["results"] = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      out.push_back({{"algorithm", r.alg},
                     {"ports", r.k},
                     {"n", r.n},
                     {"m", r.m},
                     {"rounds", r.rounds},
                     {"lower_bound", r.lower.value},
                     {"paper_bound", r.paper.value},
                     {"paper_promise", r.paper.promise()},
                     {"paper", r.paper.name},
                     {"met", r.met}});
    j["missed"] = missed;
    std::puts(j.dump().c_str());
    return missed ? 1 : 0;
  }
  if (every) {
    // Per algorithm, k and m: over every n, how far above the lower bound, and any n
    // where the paper's bound is missed.
    std::printf("every n from 2 to %d, simulated rounds model\n%-10s %3s %5s %16s %16s %14s\n", every, "algorithm", "k", "m",
                "max above lower", "mean above lower", "paper missed");
    struct stats {
      std::string alg;
      int k, m, worst = 0, missed = 0, count = 0;
      double sum = 0;
    };
    std::vector<stats> groups;  // in the order first met
    for (const auto& r : rows) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.alg == r.alg && g.k == r.k && g.m == r.m; });
      if (it == groups.end()) it = groups.insert(groups.end(), stats{r.alg, r.k, r.m});
      const int above = r.rounds - static_cast<int>(r.lower.value);
      it->worst = std::max(it->worst, above);
      it->sum += above;
      it->missed += !r.met;
      ++it->count;
    }
    for (const auto& g : groups)
      std::printf("%-10s %3d %5d %16d %16.2f %14d\n", g.alg.c_str(), g.k, g.m, g.worst, g.sum / g.count, g.missed);
    return missed ? 1 : 0;
  }
  std::printf("simulated rounds model, every rank's bytes checked; lower: %s for one port, %s for k ports\n",
              lower_bound(collective::broadcast, sim::model::rounds(1), {2, 1, 1})->name.c_str(),
              lower_bound(collective::broadcast, sim::model::rounds(2), {2, 1, 1})->name.c_str());
  std::printf("%-10s %3s %6s %5s %7s %7s %7s  %s\n", "algorithm", "k", "n", "m", "rounds", "lower", "paper", "the paper's bound");
  for (const auto& r : rows)
    std::printf("%-10s %3d %6d %5d %7d %7g %7g  %s%s%s\n", r.alg.c_str(), r.k, r.n, r.m, r.rounds, r.lower.value, r.paper.value,
                r.paper.promise(), r.paper.name.c_str(), r.met ? "" : "  MISSED");
  return missed ? 1 : 0;
}

}  // namespace optcast::bench
