// optcast-bench chaos --shrink: the survivors go on. Each trial starts --np ranks that run
// random verified collectives; one rank is killed (or stopped) at a random point of a
// random collective, and with --second-kill another a few milliseconds later, while the
// survivors shrink. Every survivor shrinks (optcast/survive.hpp) until a round on the new
// communicator succeeds on all: a checked allreduce of the members' job ranks, --ops-after
// random verified collectives, and an agreement that all went well (the ULFM pattern: a
// round that failed anywhere is shrunk again everywhere). Counted: survivors that end with
// the same membership as the others, hangs, wrong results, failed shrinks, and the time
// from the fault to a usable communicator (its first allreduce done).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <optcast/optcast.hpp>
#include <optcast/progress.hpp>

#include "bench.hpp"
#include "chaos_calls.hpp"

namespace optcast::bench {

namespace {

namespace fs = std::filesystem;

std::string members_of(const communicator& c) {
  std::string s;
  for (int r = 0; r < c.size(); ++r) s += (r ? "," : "") + std::to_string(job_rank(c, r));
  return s;
}

}  // namespace

// One rank of a shrinking trial. Its report: "fault NS WHY" when its first call fails,
// "usable NS ROUND" once a shrunk communicator's first allreduce is right, "done NS ROUND
// MEMBERS" once a round succeeded everywhere, "left ..." with the job's outcome; or "error
// CODE NS WHY", or "wrong ...".
int shrink_rank_main(const std::string& fabric, const std::string& store, const std::string& report, std::uint64_t seed, int timeout_ms,
                     long ops_after) {
  if (!store.empty()) ::setenv("OPTCAST_STORE", store.c_str(), 1);
  auto job = join(fabric);
  std::ofstream out(report + "/rank-" + std::to_string(job.rank()) + ".txt");
  std::ofstream(report + "/ready-" + std::to_string(job.rank()));
  const collective_options o{.timeout = std::chrono::milliseconds(timeout_ms)};
  std::mt19937_64 rng(seed);
  std::error_code ec;
  for (long i = 0;; ++i) {
    const int st = verified_call(job, rng, i, o, out, ec);
    if (st == 3) return 3;
    if (st == 1) break;
  }
  out << "fault " << now_ns() << " " << describe(ec, job.failure_detail()) << "\n" << std::flush;
  std::deque<communicator> shrunk;  // each round's, kept: references to them stay valid
  communicator* cur = &job;
  bool usable = false;
  for (int round = 1;; ++round) {
    if (round > 8) {
      out << "error 0 " << now_ns() << " eight rounds of shrinking did not give a communicator that works\n";
      return 1;
    }
    auto s = run(*cur, shrink(*cur));
    if (!s) {
      out << "error " << s.error().value() << " " << now_ns() << " shrink: " << describe(s.error(), cur->last_error()) << "\n";
      return 1;
    }
    shrunk.push_back(std::move(*s));
    cur = &shrunk.back();
    std::int64_t v = job_rank(*cur, cur->rank()), expected = 0;
    for (int r = 0; r < cur->size(); ++r) expected += job_rank(*cur, r);
    bool ok = static_cast<bool>(run(*cur, allreduce(*cur, std::span<const std::int64_t>(&v, 1), std::span<std::int64_t>(&v, 1), ops::sum, o)));
    if (ok && v != expected) return out << "wrong allreduce on the shrunk communicator\n", 3;
    if (ok && !usable) {
      usable = true;
      out << "usable " << now_ns() << " " << round << "\n" << std::flush;
    }
    std::mt19937_64 again(seed ^ (0x5eedull + static_cast<std::uint64_t>(round)));  // alike on every survivor
    for (long i = 0; ok && i < ops_after; ++i) {
      const int st = verified_call(*cur, again, i, o, out, ec);
      if (st == 3) return 3;
      ok = st == 0;
    }
    auto a = run(*cur, agree(*cur, ok ? 1 : 0));
    if (!a) {
      out << "error " << a.error().value() << " " << now_ns() << " agree: " << describe(a.error(), cur->last_error()) << "\n";
      return 1;
    }
    if (a->flag == 1 && a->failed.empty()) {
      out << "done " << now_ns() << " " << round << " " << members_of(*cur) << "\n" << std::flush;
      break;
    }
  }
  auto left = cur->leave();
  out << "left " << (left ? std::string("ok") : describe(left.error(), cur->failure_detail())) << "\n";
  return 0;
}

namespace {

struct shrink_tally {
  int injections = 0, survivors = 0, done = 0, agreeing = 0, excluding = 0, second_in = 0, failed = 0, wrong = 0, hangs = 0, rounds_max = 0;
  int left_ok = 0;  // survivors whose leave() said the job succeeded (its store excused the victims)
  std::vector<double> ms;  // fault to a usable communicator, each survivor
  std::string first_failure;
};

std::string percentiles(std::vector<double> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.1f / %.1f / %.1f / %.1f", v.front(), v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)],
                v.back());
  return buf;
}

}  // namespace

int shrink_trials(const char* self, const std::string& fabric, const std::string& store, int np, int trials, const std::string& mode,
                  bool second, int victim, int timeout_ms, long ops_after, std::uint64_t seed, bool json, bool quiet) {
  std::mt19937_64 rng(seed);
  std::map<std::string, shrink_tally> tallies;
  progress_line progress(quiet || json);
  const fs::path base = fs::temp_directory_path() / ("optcast-shrink-" + std::to_string(::getpid()));
  // The store rank 0 hosts goes with rank 0: there, rank 0 is never the victim. Any rank
  // may be with another store (--store launcher: this process serves it).
  const int lowest = store.empty() ? 1 : 0;
  const bool served_here = store == "launcher";
  if (np - lowest < (second ? 2 : 1) + 1) {
    std::fprintf(stderr, "optcast-bench chaos --shrink: %d ranks leave too few survivors\n", np);
    return 2;
  }
  if (victim >= np || (victim >= 0 && victim < lowest)) {
    std::fprintf(stderr, "optcast-bench chaos --shrink: --victim %d is not a rank that may die here (%d to %d%s)\n", victim, lowest, np - 1,
                 lowest ? "; rank 0 hosts the store: --store launcher lets it die" : "");
    return 2;
  }
  for (int t = 0; t < trials; ++t) {
    const bool stop = mode == "stop" || (mode == "both" && t % 2);
    auto& tl = tallies[stop ? "stop" : second ? "kill+kill" : "kill"];
    const fs::path dir = base / std::to_string(t);
    fs::create_directories(dir);
    const fs::path files = store.rfind("file://", 0) == 0 ? fs::path(store.substr(7)) / ("optcast-shrink-" + std::to_string(::getpid()) + "-" + std::to_string(t)) : fs::path();
    if (!files.empty()) fs::create_directories(files);
    const std::vector<std::string> args{self, "chaos", "--fabric", fabric, "--seed", std::to_string(rng()), "--rank-report", dir.string(),
                                        "--rank-timeout", std::to_string(timeout_ms), "--rank-store",
                                        served_here ? std::string() : files.empty() ? store : "file://" + files.string(),
                                        "--rank-shrink", std::to_string(ops_after)};
    launcher_store here;
    auto pids = start_trial(np, args, dir, rng, served_here ? &here : nullptr);
    const int drawn = lowest + static_cast<int>(rng() % static_cast<std::uint64_t>(np - lowest));
    std::vector<int> victims{victim >= 0 ? victim : drawn};
    const long long injected = now_ns();
    ::kill(pids[static_cast<std::size_t>(victims[0])], stop ? SIGSTOP : SIGKILL);
    if (second) {  // while the survivors shrink: within the next 20 ms
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
      int v = 0;
      do v = lowest + static_cast<int>(rng() % static_cast<std::uint64_t>(np - lowest));
      while (v == victims[0]);
      victims.push_back(v);
      ::kill(pids[static_cast<std::size_t>(v)], SIGKILL);
    }
    ++tl.injections;
    const auto limit = std::chrono::steady_clock::now() + std::chrono::milliseconds(stop ? 3 * timeout_ms + 5000 : timeout_ms + 10000);
    std::vector<bool> done(static_cast<std::size_t>(np), false);
    for (int v : victims) done[static_cast<std::size_t>(v)] = true;
    for (;;) {
      bool all = true;
      for (int r = 0; r < np; ++r) {
        if (done[static_cast<std::size_t>(r)]) continue;
        if (::waitpid(pids[static_cast<std::size_t>(r)], nullptr, WNOHANG) > 0) done[static_cast<std::size_t>(r)] = true;
        else all = false;
      }
      if (all || std::chrono::steady_clock::now() > limit) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    // A membership holds no rank that was dead during its last round: that round's agreement
    // waited for every member not found dead. The first victim must be out of every one; the
    // second may be in where the last round ended before it died.
    const auto holds = [](const std::string& members, int r) {
      std::stringstream ss(members);
      std::string m;
      while (std::getline(ss, m, ','))
        if (m == std::to_string(r)) return true;
      return false;
    };
    std::map<std::string, int> memberships;
    for (int r = 0; r < np; ++r) {
      const auto R = static_cast<std::size_t>(r);
      if (std::find(victims.begin(), victims.end(), r) != victims.end()) continue;
      ++tl.survivors;
      const auto failure = [&](const std::string& what) {
        ++tl.failed;
        if (tl.first_failure.empty()) tl.first_failure = "trial " + std::to_string(t) + ", rank " + std::to_string(r) + ": " + what;
      };
      if (!done[R]) {
        ++tl.hangs;
        std::fprintf(stderr, "optcast-bench chaos --shrink: trial %d: rank %d still running after rank %d was %s\n", t, r, victims[0],
                     stop ? "stopped" : "killed");
        ::kill(pids[R], SIGKILL);
        continue;
      }
      std::ifstream in(dir / ("rank-" + std::to_string(r) + ".txt"));
      std::string line, members;
      bool finished = false, bad = false;
      while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string word;
        words >> word;
        if (word == "usable") {
          long long at = 0;
          words >> at;
          tl.ms.push_back(static_cast<double>(at - injected) / 1e6);
        } else if (word == "done") {
          int round = 0;
          long long at = 0;
          words >> at >> round >> members;
          tl.rounds_max = std::max(tl.rounds_max, round);
          finished = true;
        } else if (word == "left") {
          std::string how;
          words >> how;
          tl.left_ok += how == "ok";
        } else if (word == "wrong") {
          bad = true;
        } else if (word == "error") {
          failure(line);
        }
      }
      if (bad) ++tl.wrong;
      if (!finished) {
        if (!bad && tl.first_failure.empty()) failure("no round finished (report ends without 'done')");
        continue;
      }
      ++tl.done;
      ++memberships[members];
      tl.excluding += !holds(members, victims[0]);
      tl.second_in += victims.size() > 1 && holds(members, victims[1]);
    }
    // Agreeing: the survivors whose membership is the one most of them ended with, when
    // every survivor that finished ended with it.
    if (memberships.size() == 1) tl.agreeing += memberships.begin()->second;
    for (int v : victims) ::kill(pids[static_cast<std::size_t>(v)], SIGKILL);
    for (int pid : pids) ::waitpid(pid, nullptr, 0);
    if (std::getenv("OPTCAST_CHAOS_KEEP")) {  // for a look at the ranks' reports
      std::fprintf(stderr, "optcast-bench chaos --shrink: trial %d's reports kept in %s\n", t, dir.c_str());
      continue;
    }
    fs::remove_all(dir);
    if (!files.empty()) fs::remove_all(files);
    if (progress.on())
      progress.show("chaos --shrink: trial " + std::to_string(t + 1) + " of " + std::to_string(trials) + ": " + std::to_string(tl.hangs) +
                    " hangs, " + std::to_string(tl.failed) + " failed so far");
  }
  progress.clear();
  if (!std::getenv("OPTCAST_CHAOS_KEEP")) fs::remove_all(base);
  bool clean = true;
  if (json) {
    std::string s = "{\"fabric\":\"" + fabric + "\",\"store\":\"" + (store.empty() ? "tcp" : store) + "\",\"np\":" + std::to_string(np) +
                    ",\"timeout_ms\":" + std::to_string(timeout_ms) + ",\"ops_after\":" + std::to_string(ops_after);
    for (const auto& [name, x] : tallies) {
      std::string ms = "[";
      for (std::size_t i = 0; i < x.ms.size(); ++i) ms += (i ? "," : "") + std::to_string(x.ms[i]);
      s += ",\"" + name + "\":{\"injections\":" + std::to_string(x.injections) + ",\"survivors\":" + std::to_string(x.survivors) +
           ",\"done\":" + std::to_string(x.done) + ",\"same_membership\":" + std::to_string(x.agreeing) +
           ",\"victim_left_out\":" + std::to_string(x.excluding) + ",\"second_victim_kept\":" + std::to_string(x.second_in) +
           ",\"failed\":" + std::to_string(x.failed) +
           ",\"wrong_results\":" + std::to_string(x.wrong) + ",\"hangs\":" + std::to_string(x.hangs) +
           ",\"rounds_max\":" + std::to_string(x.rounds_max) + ",\"left_ok\":" + std::to_string(x.left_ok) +
           ",\"ms_to_usable\":" + ms + "]}";
    }
    std::printf("%s}\n", s.c_str());
  } else {
    std::printf("chaos --shrink over %s, %d ranks per job, deadline %d ms, store %s, %ld verified calls after each shrink\n", fabric.c_str(),
                np, timeout_ms, store.empty() ? "rank 0's (rank 0 spared)" : served_here ? "the benchmark's own (any rank a victim)" : store.c_str(), ops_after);
    std::printf("%-9s %10s %9s %6s %9s %9s %7s %7s %6s %6s %6s   %s\n", "fault", "injections", "survivors", "done", "same set", "left out",
                "kept 2nd", "failed", "wrong", "hangs", "rounds", "ms to usable: min / median / p99 / max");
    for (const auto& [name, x] : tallies)
      std::printf("%-9s %10d %9d %6d %9d %9d %7d %7d %6d %6d %6d   %s\n", name.c_str(), x.injections, x.survivors, x.done, x.agreeing,
                  x.excluding, x.second_in, x.failed, x.wrong, x.hangs, x.rounds_max, percentiles(x.ms).c_str());
    std::printf("  same set: survivors whose final membership is every other survivor's; left out: without the (first) victim;\n"
                "  kept 2nd: with the second victim, whose death came after their last round\n");
    for (const auto& [name, x] : tallies)
      if (!x.first_failure.empty()) std::printf("  %s, first failure: %s\n", name.c_str(), x.first_failure.c_str());
  }
  for (const auto& [name, x] : tallies)
    clean = clean && x.hangs == 0 && x.wrong == 0 && x.failed == 0 && x.agreeing == x.survivors && x.excluding == x.survivors;
  return clean ? 0 : 1;
}

}  // namespace optcast::bench
