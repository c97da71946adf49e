// optcast-bench chaos --shrink: the survivors go on. Each trial starts --np ranks that run
// random verified collectives; one rank is killed (or stopped) at a random point of a
// random collective, and with --second-kill another a few milliseconds later, while the
// survivors shrink (their rounds: chaos_survivors.cpp). Counted: survivors that end with
// the same membership as the others, hangs, wrong results, failed shrinks, and the time
// from the fault to a usable communicator (its first allreduce done).
//
// With --grow, once every survivor has shrunk, a replacement for the victim is started
// (spawn_replacement: its rank, OPTCAST_REJOIN=1; a stopped victim is killed first, as a
// job manager would) and the survivors grow; with --second-kill the second victim is a
// survivor killed within 20 ms of the replacement's start, while they grow. Counted
// besides: members (survivors and the replacement) that end with the same membership,
// the replacement in; and the time from the replacement's start to the first allreduce
// right on a communicator with it, on the last of them.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <optcast/optcast.hpp>
#include <optcast/progress.hpp>

#include "chaos_calls.hpp"
#include "chaos_shrink.hpp"

namespace optcast::bench {

namespace {

namespace fs = std::filesystem;

struct shrink_tally {
  int injections = 0, survivors = 0, done = 0, agreeing = 0, excluding = 0, second_in = 0, failed = 0, wrong = 0, hangs = 0, rounds_max = 0;
  int left_ok = 0;  // survivors whose leave() said the job succeeded (its store excused the victims)
  std::vector<double> ms;  // fault to a usable communicator, each survivor
  std::string first_failure;
};

struct grow_tally {
  int cycles = 0, members = 0, regrown = 0, agreeing = 0, with_replacement = 0, second_in = 0, failed = 0, wrong = 0, hangs = 0;
  int rounds_max = 0, left_ok = 0;
  std::vector<double> ms;        // the replacement's start to a usable grown communicator on every member, each cycle
  std::vector<double> admit_ms;  // the replacement's start to its admission
  std::string first_failure;
};

// What a rank's report says (chaos_survivors.cpp has its lines).
struct report {
  long long usable = 0, grow_usable = 0, admitted = 0;
  bool done = false, regrown = false, wrong = false, left_ok = false;
  int done_round = 0, regrown_round = 0;
  std::string done_members, regrown_members, error;
};

report read_report(const fs::path& file) {
  report rp;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word, how;
    long long at = 0;
    words >> word;
    if (word == "usable" && !rp.usable) words >> rp.usable;
    else if (word == "grow-usable" && !rp.grow_usable) words >> rp.grow_usable;
    else if (word == "admitted") words >> rp.admitted;
    else if (word == "done") rp.done = static_cast<bool>(words >> at >> rp.done_round >> rp.done_members);
    else if (word == "regrown") rp.regrown = static_cast<bool>(words >> at >> rp.regrown_round >> rp.regrown_members);
    else if (word == "left") rp.left_ok = (words >> how) && how == "ok";
    else if (word == "wrong") rp.wrong = true;
    else if (word == "error" && rp.error.empty()) rp.error = line;
  }
  return rp;
}

bool among(const std::vector<int>& v, int r) { return std::find(v.begin(), v.end(), r) != v.end(); }

// The processes of a trial, reaped as they end: ranks 0..np-1, and the replacement at np.
struct trial_processes {
  std::vector<int> pids;
  std::vector<bool> ended;
  void add(int pid) { pids.push_back(pid), ended.push_back(false); }
  // Until `enough` (checked between looks) or all of `watched` ended, or `limit`.
  void reap(const std::vector<int>& watched, std::chrono::steady_clock::time_point limit, const std::function<bool()>& enough = {}) {
    for (;;) {
      bool all = true;
      for (int i : watched) {
        const auto I = static_cast<std::size_t>(i);
        if (ended[I]) continue;
        if (::waitpid(pids[I], nullptr, WNOHANG) > 0) ended[I] = true;
        else all = false;
      }
      if (all || (enough && enough()) || std::chrono::steady_clock::now() > limit) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  void end_all() {
    for (std::size_t i = 0; i < pids.size(); ++i)
      if (!ended[i]) ::kill(pids[i], SIGKILL), ::waitpid(pids[i], nullptr, 0), ended[i] = true;
  }
};

}  // namespace

int shrink_trials(const char* self, const shrink_setup& su) {
  const int np = su.np;
  std::mt19937_64 rng(su.seed);
  std::map<std::string, shrink_tally> tallies;
  std::map<std::string, grow_tally> grows;
  progress_line progress(su.quiet || su.json);
  const fs::path base = fs::temp_directory_path() / ("optcast-shrink-" + std::to_string(::getpid()));
  // The store rank 0 hosts goes with rank 0: there, rank 0 is never the victim. Any rank
  // may be with another store (--store launcher: this process serves it).
  const int lowest = su.store.empty() ? 1 : 0;
  const bool served_here = su.store == "launcher";
  if (np - lowest < (su.second ? 2 : 1) + 1) {
    std::fprintf(stderr, "optcast-bench chaos --shrink: %d ranks leave too few survivors\n", np);
    return 2;
  }
  if (su.victim >= np || (su.victim >= 0 && su.victim < lowest)) {
    std::fprintf(stderr, "optcast-bench chaos --shrink: --victim %d is not a rank that may die here (%d to %d%s)\n", su.victim, lowest, np - 1,
                 lowest ? "; rank 0 hosts the store: --store launcher lets it die" : "");
    return 2;
  }
  if (su.grow && !su.store.empty() && !served_here) {
    std::fprintf(stderr, "optcast-bench chaos --grow: a replacement joins through optcast's TCP store (rank 0's, or --store launcher), not %s\n",
                 su.store.c_str());
    return 2;
  }
  if (su.grow && su.fabric != "tcp" && su.fabric != "ofi") {
    std::fprintf(stderr, "optcast-bench chaos --grow: the %s fabric takes no replacements (TCP and libfabric's tcp;ofi_rxm over optcast's TCP store do)\n",
                 su.fabric.c_str());
    return 2;
  }
  const auto random_rank = [&] { return lowest + static_cast<int>(rng() % static_cast<std::uint64_t>(np - lowest)); };
  for (int t = 0; t < su.trials; ++t) {
    const bool stop = su.mode == "stop" || (su.mode == "both" && t % 2);
    auto& tl = tallies[stop ? "stop" : su.second && !su.grow ? "kill+kill" : "kill"];
    const fs::path dir = base / std::to_string(t);
    fs::create_directories(dir);
    const fs::path files = su.store.rfind("file://", 0) == 0
                               ? fs::path(su.store.substr(7)) / ("optcast-shrink-" + std::to_string(::getpid()) + "-" + std::to_string(t))
                               : fs::path();
    if (!files.empty()) fs::create_directories(files);
    const std::vector<std::string> args{self, "chaos", "--fabric", su.fabric, "--seed", std::to_string(rng()), "--rank-report", dir.string(),
                                        "--rank-timeout", std::to_string(su.timeout_ms), "--rank-store",
                                        served_here ? std::string() : files.empty() ? su.store : "file://" + files.string(),
                                        "--rank-shrink", std::to_string(su.ops_after), "--rank-grow", su.grow ? "1" : "0"};
    launcher_store here;
    const auto job = start_trial(np, args, dir, rng, served_here ? &here : nullptr);
    trial_processes procs;
    for (int pid : job.pids) procs.add(pid);
    std::vector<int> victims{su.victim >= 0 ? su.victim : random_rank()};
    const long long injected = now_ns();
    ::kill(job.pids[static_cast<std::size_t>(victims[0])], stop ? SIGSTOP : SIGKILL);
    const auto second_victim = [&] {
      int v = 0;
      do v = random_rank();
      while (v == victims[0]);
      victims.push_back(v);
      ::kill(job.pids[static_cast<std::size_t>(v)], SIGKILL);
    };
    if (su.second && !su.grow) {  // while the survivors shrink: within the next 20 ms
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
      second_victim();
    }
    ++tl.injections;
    std::vector<int> watched;
    for (int r = 0; r < np; ++r)
      if (!among(victims, r)) watched.push_back(r);
    const auto shrink_limit = std::chrono::steady_clock::now() + std::chrono::milliseconds(stop ? 3 * su.timeout_ms + 5000 : su.timeout_ms + 10000);
    long long spawned = 0;
    if (!su.grow) {
      procs.reap(watched, shrink_limit);
    } else {
      // Once every survivor has shrunk (or ended): the replacement, in the victim's place.
      procs.reap(watched, shrink_limit, [&] {
        return std::all_of(watched.begin(), watched.end(), [&](int r) { return fs::exists(dir / ("growing-" + std::to_string(r))); });
      });
      const auto V = static_cast<std::size_t>(victims[0]);
      ::kill(job.pids[V], SIGKILL);  // a stopped one too: its connections go before its replacement comes
      ::waitpid(job.pids[V], nullptr, 0);
      procs.ended[V] = true;
      spawned = now_ns();
      procs.add(spawn_replacement(job, victims[0], args));
      if (su.second) {  // while they grow
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
        second_victim();
        std::erase(watched, victims[1]);
      }
      watched.push_back(np);
      procs.reap(watched, std::chrono::steady_clock::now() + std::chrono::milliseconds(su.timeout_ms + 30000));
    }

    // The shrink: every rank but the first victim (in a growing trial the second died after
    // its shrink, which it took part in).
    std::map<std::string, int> memberships;
    const auto fail_in = [&](auto& x, int r, const std::string& what) {
      ++x.failed;
      if (x.first_failure.empty()) x.first_failure = "trial " + std::to_string(t) + ", rank " + std::to_string(r) + ": " + what;
    };
    for (int r = 0; r < np; ++r) {
      const auto R = static_cast<std::size_t>(r);
      if (r == victims[0] || (!su.grow && among(victims, r))) continue;
      ++tl.survivors;
      if (!procs.ended[R] && !among(victims, r)) {
        if (!su.grow || !fs::exists(dir / ("growing-" + std::to_string(r)))) {
          ++tl.hangs;
          std::fprintf(stderr, "optcast-bench chaos --shrink: trial %d: rank %d still running after rank %d was %s\n", t, r, victims[0],
                       stop ? "stopped" : "killed");
        }
      }
      const auto rp = read_report(dir / ("rank-" + std::to_string(r) + ".txt"));
      if (rp.usable) tl.ms.push_back(static_cast<double>(rp.usable - injected) / 1e6);
      if (!rp.error.empty() && !rp.done) fail_in(tl, r, rp.error);
      if (rp.wrong && !rp.done) ++tl.wrong;
      if (!rp.done) {
        if (!rp.wrong && rp.error.empty() && tl.first_failure.empty()) fail_in(tl, r, "no round finished (report ends without 'done')");
        continue;
      }
      tl.rounds_max = std::max(tl.rounds_max, rp.done_round);
      tl.left_ok += !su.grow && rp.left_ok;
      ++tl.done;
      ++memberships[rp.done_members];
      tl.excluding += !holds(rp.done_members, victims[0]);
      tl.second_in += !su.grow && victims.size() > 1 && holds(rp.done_members, victims[1]);
    }
    // Agreeing: the survivors whose membership is the one most of them ended with, when
    // every survivor that finished ended with it.
    if (memberships.size() == 1) tl.agreeing += memberships.begin()->second;

    if (su.grow) {  // the growth: the survivors of both faults, and the replacement
      auto& gt = grows[su.second ? "grow+kill" : "grow"];
      ++gt.cycles;
      std::map<std::string, int> grown;
      long long last_usable = 0;
      bool all_usable = true;
      for (int r : watched) {
        const bool rep = r == np;
        const int rank = rep ? victims[0] : r;
        ++gt.members;
        if (!procs.ended[static_cast<std::size_t>(r)]) {
          ++gt.hangs;
          std::fprintf(stderr, "optcast-bench chaos --grow: trial %d: %s %d still running after the replacement's start\n", t,
                       rep ? "the replacement of rank" : "rank", rank);
        }
        const auto rp = read_report(dir / ((rep ? "replacement-" : "rank-") + std::to_string(rank) + ".txt"));
        if (rep && rp.admitted) gt.admit_ms.push_back(static_cast<double>(rp.admitted - spawned) / 1e6);
        all_usable = all_usable && rp.grow_usable;
        last_usable = std::max(last_usable, rp.grow_usable);
        if (rp.wrong) ++gt.wrong;
        if (!rp.regrown) {
          fail_in(gt, rank, !rp.error.empty() ? rp.error : rp.wrong ? "a wrong result" : "no round after the growth finished");
          continue;
        }
        ++gt.regrown;
        gt.rounds_max = std::max(gt.rounds_max, rp.regrown_round);
        gt.left_ok += rp.left_ok;
        ++grown[rp.regrown_members];
        gt.with_replacement += holds(rp.regrown_members, victims[0]);
        gt.second_in += victims.size() > 1 && holds(rp.regrown_members, victims[1]);
      }
      if (grown.size() == 1) gt.agreeing += grown.begin()->second;
      if (all_usable) gt.ms.push_back(static_cast<double>(last_usable - spawned) / 1e6);
    }
    procs.end_all();
    if (std::getenv("OPTCAST_CHAOS_KEEP")) {  // for a look at the ranks' reports
      std::fprintf(stderr, "optcast-bench chaos --shrink: trial %d's reports kept in %s\n", t, dir.c_str());
      continue;
    }
    fs::remove_all(dir);
    if (!files.empty()) fs::remove_all(files);
    if (progress.on())
      progress.show("chaos --shrink: trial " + std::to_string(t + 1) + " of " + std::to_string(su.trials) + ": " + std::to_string(tl.hangs) +
                    " hangs, " + std::to_string(tl.failed) + " failed so far");
  }
  progress.clear();
  if (!std::getenv("OPTCAST_CHAOS_KEEP")) fs::remove_all(base);
  if (su.json) {
    std::string s = "{\"fabric\":\"" + su.fabric + "\",\"store\":\"" + (su.store.empty() ? "tcp" : su.store) + "\",\"np\":" + std::to_string(np) +
                    ",\"timeout_ms\":" + std::to_string(su.timeout_ms) + ",\"ops_after\":" + std::to_string(su.ops_after);
    for (const auto& [name, x] : tallies)
      s += ",\"" + name + "\":{\"injections\":" + std::to_string(x.injections) + ",\"survivors\":" + std::to_string(x.survivors) +
           ",\"done\":" + std::to_string(x.done) + ",\"same_membership\":" + std::to_string(x.agreeing) +
           ",\"victim_left_out\":" + std::to_string(x.excluding) + ",\"second_victim_kept\":" + std::to_string(x.second_in) +
           ",\"failed\":" + std::to_string(x.failed) + ",\"wrong_results\":" + std::to_string(x.wrong) + ",\"hangs\":" + std::to_string(x.hangs) +
           ",\"rounds_max\":" + std::to_string(x.rounds_max) + ",\"left_ok\":" + std::to_string(x.left_ok) + ",\"ms_to_usable\":" + json_list(x.ms) +
           ",\"first_failure\":" + nlohmann::json(x.first_failure).dump() + "}";
    for (const auto& [name, x] : grows)
      s += ",\"" + name + "\":{\"cycles\":" + std::to_string(x.cycles) + ",\"members\":" + std::to_string(x.members) +
           ",\"regrown\":" + std::to_string(x.regrown) + ",\"same_membership\":" + std::to_string(x.agreeing) +
           ",\"replacement_in\":" + std::to_string(x.with_replacement) + ",\"second_victim_kept\":" + std::to_string(x.second_in) +
           ",\"failed\":" + std::to_string(x.failed) + ",\"wrong_results\":" + std::to_string(x.wrong) + ",\"hangs\":" + std::to_string(x.hangs) +
           ",\"rounds_max\":" + std::to_string(x.rounds_max) + ",\"left_ok\":" + std::to_string(x.left_ok) + ",\"ms_to_grown\":" + json_list(x.ms) +
           ",\"ms_to_admitted\":" + json_list(x.admit_ms) + ",\"first_failure\":" + nlohmann::json(x.first_failure).dump() + "}";
    std::printf("%s}\n", s.c_str());
  } else {
    std::printf("chaos --shrink%s over %s, %d ranks per job, deadline %d ms, store %s, %ld verified calls after each shrink\n",
                su.grow ? " --grow" : "", su.fabric.c_str(), np, su.timeout_ms,
                su.store.empty() ? "rank 0's (rank 0 spared)" : served_here ? "the benchmark's own (any rank a victim)" : su.store.c_str(), su.ops_after);
    std::printf("%-9s %10s %9s %6s %9s %9s %7s %7s %6s %6s %6s   %s\n", "fault", "injections", "survivors", "done", "same set", "left out",
                "kept 2nd", "failed", "wrong", "hangs", "rounds", "ms to usable: min / median / p99 / max");
    for (const auto& [name, x] : tallies)
      std::printf("%-9s %10d %9d %6d %9d %9d %7d %7d %6d %6d %6d   %s\n", name.c_str(), x.injections, x.survivors, x.done, x.agreeing,
                  x.excluding, x.second_in, x.failed, x.wrong, x.hangs, x.rounds_max, percentiles(x.ms).c_str());
    std::printf("  same set: survivors whose final membership is every other survivor's; left out: without the (first) victim;\n"
                "  kept 2nd: with the second victim, whose death came after their last round\n");
    if (!grows.empty()) {
      std::printf("%-9s %10s %9s %7s %9s %8s %7s %7s %6s %6s %6s   %s\n", "growth", "cycles", "members", "regrown", "same set", "replaced",
                  "kept 2nd", "failed", "wrong", "hangs", "rounds", "ms to grown: min / median / p99 / max");
      for (const auto& [name, x] : grows)
        std::printf("%-9s %10d %9d %7d %9d %8d %7d %7d %6d %6d %6d   %s\n", name.c_str(), x.cycles, x.members, x.regrown, x.agreeing,
                    x.with_replacement, x.second_in, x.failed, x.wrong, x.hangs, x.rounds_max, percentiles(x.ms).c_str());
      for (const auto& [name, x] : grows)
        std::printf("  %s: the replacement admitted, ms from its start: %s\n", name.c_str(), percentiles(x.admit_ms).c_str());
      std::printf("  members: the survivors and the replacement; replaced: ending with the replacement in; ms to grown: from the\n"
                  "  replacement's start to the first allreduce right on a communicator with it, on the last member\n");
    }
    for (const auto& [name, x] : tallies)
      if (!x.first_failure.empty()) std::printf("  %s, first failure: %s\n", name.c_str(), x.first_failure.c_str());
    for (const auto& [name, x] : grows)
      if (!x.first_failure.empty()) std::printf("  %s, first failure: %s\n", name.c_str(), x.first_failure.c_str());
  }
  bool clean = true;
  for (const auto& [name, x] : tallies)
    clean = clean && x.hangs == 0 && x.wrong == 0 && x.failed == 0 && x.agreeing == x.survivors && x.excluding == x.survivors;
  for (const auto& [name, x] : grows)
    clean = clean && x.hangs == 0 && x.wrong == 0 && x.failed == 0 && x.agreeing == x.members && x.with_replacement == x.members;
  return clean ? 0 : 1;
}

}  // namespace optcast::bench
