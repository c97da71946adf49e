// optcast-bench chaos: faults injected into running jobs. Each trial starts --np ranks
// on this machine that run random verified collectives (broadcasts, allreduces, reduces,
// scatters and allgathers of random sizes and roots, the same sequence on every rank), waits a random while, and
// then kills one rank with SIGKILL or stops it with SIGSTOP. Every survivor must end
// with an error that names the victim (the root cause): within a second for a kill,
// within one deadline for a stall. Counted: hangs (a survivor still running long after),
// silent survivors (one that reports success from the failed job), wrong results, and
// the distribution of time from injection to each survivor's error. --store: the ranks
// meet in a file or Redis store instead of the one rank 0 hosts (which alone knows at
// once who died; a stall is looked into through such a store's keys).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <malloc.h>

#include <optcast/optcast.hpp>
#include <optcast/progress.hpp>

#include "bench.hpp"
#include "chaos_calls.hpp"
#include "chaos_shrink.hpp"
#include "cli.hpp"

namespace optcast::bench {

namespace {

namespace fs = std::filesystem;


long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

// Bytes the program has allocated and not freed (malloc's own count): unlike the resident
// set, it does not move with the allocator's free lists and fragmentation.
long heap_kib() {
  const struct mallinfo2 m = ::mallinfo2();
  return static_cast<long>((m.uordblks + m.hblkhd) / 1024);
}

// One rank: collectives until it fails (or --ops pass, then the job's outcome, with the
// resident set after the first tenth of the calls and at the end).
int rank_main(const std::string& fabric, const std::string& store, const std::string& report, std::uint64_t seed, int timeout_ms, long ops) {
  // Another store than the one the launcher's rank 0 hosts: the ranks meet there, their
  // keys under the job's id (each trial's own).
  if (!store.empty()) ::setenv("OPTCAST_STORE", store.c_str(), 1);
  auto comm = join(fabric);
  std::ofstream out(report + "/rank-" + std::to_string(comm.rank()) + ".txt");
  // Joined: the parent injects its fault once every rank is here, into running
  // collectives rather than the bootstrap (which has its own timeout).
  std::ofstream(report + "/ready-" + std::to_string(comm.rank()));
  auto failed = [&](std::error_code ec) {
    out << "error " << ec.value() << " " << now_ns() << " " << describe(ec, comm.failure_detail()) << "\n";
    return 1;
  };
  std::mt19937_64 rng(seed);  // the same on every rank: the same calls
  const collective_options o{.timeout = std::chrono::milliseconds(timeout_ms)};
  const long warm = std::max(1L, ops / 10);
  long rss_warm = -1, heap_warm = -1;
  const long long t0 = now_ns();
  for (long i = 0; i < ops; ++i) {
    if (i == warm) rss_warm = rss_kib(), heap_warm = heap_kib();
    std::error_code ec;
    const int st = verified_call(comm, rng, i, o, out, ec);
    if (st == 1) return failed(ec);
    if (st != 0) return st;
  }
  const long rss_end = rss_kib(), heap_end = heap_kib();
  if (rss_warm < 0) rss_warm = rss_end, heap_warm = heap_end;  // fewer calls than a warm-up
  if (auto r = comm.leave(); !r) return failed(r.error());
  out << "ok " << now_ns() << " " << (now_ns() - t0) << " " << rss_warm << " " << rss_end << " " << heap_warm << " " << heap_end << "\n";
  return 0;
}

struct tally {
  int injections = 0, survivors = 0, with_cause = 0, other_error = 0, silent = 0, wrong = 0, hangs = 0;
  std::vector<double> ms;  // injection to each survivor's error
  std::string first_other;  // the first error that does not name the victim
};

// --mode none: one job, no fault. Every rank must finish every call with the right data,
// and its resident set at the end should be what it was after the first tenth (warm-up:
// connections, buffer pools and schedules cached at their largest).
int soak(const char* self, const std::string& fabric, const std::string& store, int np, long ops, int timeout_ms, std::uint64_t seed,
         bool json, bool quiet) {
  const fs::path dir = fs::temp_directory_path() / ("optcast-soak-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<std::string> args{self, "chaos", "--fabric", fabric, "--seed", std::to_string(seed), "--rank-report", dir.string(),
                                      "--rank-timeout", std::to_string(timeout_ms), "--rank-ops", std::to_string(ops),
                                      "--rank-store", store};
  const auto t0 = clock_type::now();
  auto pids = spawn_local_ranks(np, args);
  progress_line progress(quiet || json);
  int exited_bad = 0;
  for (std::size_t r = 0; r < pids.size(); ++r) {
    for (;;) {  // a failed job ends every rank within its deadline: no limit needed here
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) > 0) {
        exited_bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        break;
      }
      if (progress.due())
        progress.show("soak: " + std::to_string(static_cast<int>(since(t0))) + " s, " + std::to_string(r) + " of " + std::to_string(np) +
                      " ranks done");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  progress.clear();
  const double seconds = since(t0);
  int ok = 0, wrong = 0, failed = 0;
  long warm_min = -1, warm_max = -1, end_min = -1, end_max = -1, growth_max = 0, heap_growth_max = 0;
  std::string first_error;
  for (int r = 0; r < np; ++r) {
    std::ifstream in(dir / ("rank-" + std::to_string(r) + ".txt"));
    std::string word;
    in >> word;
    if (word == "ok") {
      long long at = 0, ns = 0;
      long warm = 0, end = 0, heap_warm = 0, heap_end = 0;
      in >> at >> ns >> warm >> end >> heap_warm >> heap_end;
      heap_growth_max = std::max(heap_growth_max, heap_end - heap_warm);
      ++ok;
      warm_min = warm_min < 0 ? warm : std::min(warm_min, warm);
      warm_max = std::max(warm_max, warm);
      end_min = end_min < 0 ? end : std::min(end_min, end);
      end_max = std::max(end_max, end);
      growth_max = std::max(growth_max, end - warm);
    } else {
      ++(word == "wrong" ? wrong : failed);
      std::string rest;
      std::getline(in, rest);
      if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + (word.empty() ? "no report" : word + rest);
    }
  }
  fs::remove_all(dir);
  if (json) {
    std::printf("{\"fabric\":\"%s\",\"np\":%d,\"ops\":%ld,\"seconds\":%.3f,\"ranks_ok\":%d,\"wrong_results\":%d,\"failed_ranks\":%d,"
                "\"rss_kib_after_warmup\":[%ld,%ld],\"rss_kib_at_end\":[%ld,%ld],\"rss_growth_kib_max\":%ld,\"heap_growth_kib_max\":%ld}\n",
                fabric.c_str(), np, ops, seconds, ok, wrong, failed, warm_min, warm_max, end_min, end_max, growth_max, heap_growth_max);
  } else {
    std::printf("soak over %s: %d ranks, %ld random verified collectives (broadcast, allreduce, reduce, scatter, allgather; 1 B to 64 KiB) in %.1f s\n", fabric.c_str(),
                np, ops, seconds);
    std::printf("  ranks ok %d, wrong results %d, failed %d%s%s\n", ok, wrong, failed, first_error.empty() ? "" : "; first: ", first_error.c_str());
    std::printf("  resident set per rank: %ld-%ld KiB after the first tenth, %ld-%ld KiB at the end (largest growth %ld KiB)\n", warm_min,
                warm_max, end_min, end_max, growth_max);
    std::printf("  heap in use (malloc's count): largest growth over the same calls %ld KiB\n", heap_growth_max);
  }
  return ok == np && exited_bad == 0 ? 0 : 1;
}

}  // namespace

int chaos_cmd(int argc, char** argv) {
  CLI::App app{"Inject kill -9 and SIGSTOP into random ranks of running jobs; report how the survivors end.", "optcast-bench chaos"};
  std::string fabric(fabric_table().front().name), mode = "both", report_dir, store;
  int np = 8, trials = 20, timeout_ms = 2000, rank_timeout = 0;
  long ops = 1000000;
  std::uint64_t seed = 1;
  bool json = false, quiet = false;
  cli::add_fabric(app, fabric);
  app.add_option("--np", np, "ranks per job")->check(CLI::Range(2, 256))->capture_default_str();
  app.add_option("--trials", trials, "jobs, one injection each")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--mode", mode, "kill, stop, both (alternating), or none: one job of --ops calls, no fault (a soak: results and resident memory)")
      ->check(CLI::IsMember({"kill", "stop", "both", "none"}))
      ->capture_default_str();
  long soak_ops = 100000;
  app.add_option("--ops", soak_ops, "with --mode none: collectives in the job")->check(CLI::Range(1L, 1L << 40))->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms, "the collectives' deadline")->check(CLI::Range(100, 600000))->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--store", store,
                 "where the ranks meet: file:///DIR, redis://HOST:PORT, or (with --shrink) launcher, optcast's TCP store served by "
                 "this process (default: the store rank 0 hosts, rank 0 then never the victim)")
      ->check([](const std::string& s) {
        return s.rfind("file://", 0) == 0 || s.rfind("redis://", 0) == 0 || s == "launcher"
                   ? std::string()
                   : "'" + s + "' is none of file:///DIR, redis://HOST:PORT, launcher";
      });
  bool shrinking = false, second = false, growing = false;
  long ops_after = 20, rank_shrink = -1;
  int rank_grow = 0;
  app.add_flag("--shrink", shrinking,
               "the survivors shrink and go on: every one must end with the same membership, the victims left out "
               "(with the store rank 0 hosts, rank 0 is spared: the store dies with it)");
  app.add_flag("--grow", growing,
               "with --shrink: once the survivors have shrunk, start a replacement for the victim (OPTCAST_REJOIN=1); they grow, "
               "and every one of them and the replacement must end with the same membership, the replacement in (TCP store only)");
  app.add_flag("--second-kill", second,
               "with --shrink: kill a second rank within 20 ms of the first, while the survivors shrink; with --grow, within 20 ms "
               "of the replacement's start, while they grow");
  int first_victim = -1;
  app.add_option("--victim", first_victim, "with --shrink: always this rank first (default: a random one)")->check(CLI::Range(0, 4095));
  app.add_option("--ops-after", ops_after, "with --shrink: verified collectives on each shrunk communicator")
      ->check(CLI::Range(0L, 100000L))
      ->capture_default_str();
  app.add_flag("--json", json, "one JSON object instead of the table");
  app.add_flag("--quiet", quiet, "no progress line");
  // Internal: how a rank of a trial is started.
  app.add_option("--rank-shrink", rank_shrink)->group("");
  app.add_option("--rank-grow", rank_grow)->group("");
  app.add_option("--rank-report", report_dir)->group("");
  app.add_option("--rank-timeout", rank_timeout)->group("");
  app.add_option("--rank-ops", ops)->group("");
  app.add_option("--rank-store", store)->group("");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!report_dir.empty() && rank_shrink >= 0) return shrink_rank_main(fabric, store, report_dir, seed, rank_timeout, rank_shrink, rank_grow != 0);
  if (!report_dir.empty()) return rank_main(fabric, store, report_dir, seed, rank_timeout, ops);
  if ((second || growing) && !shrinking) {
    std::fprintf(stderr, "optcast-bench chaos: %s goes with --shrink\n", second ? "--second-kill" : "--grow");
    return 2;
  }
  if (store == "launcher" && !shrinking) {
    std::fprintf(stderr, "optcast-bench chaos: --store launcher goes with --shrink\n");
    return 2;
  }
  if (shrinking && mode == "none") {
    std::fprintf(stderr, "optcast-bench chaos: --shrink needs a fault (--mode kill, stop or both)\n");
    return 2;
  }
  if (shrinking)
    return shrink_trials(argv[0], {.fabric = fabric, .store = store, .mode = mode, .np = np, .trials = trials, .victim = first_victim,
                                   .timeout_ms = timeout_ms, .ops_after = ops_after, .seed = seed, .second = second, .grow = growing,
                                   .json = json, .quiet = quiet});
  if (mode == "none") return soak(argv[0], fabric, store, np, soak_ops, timeout_ms, seed, json, quiet);

  std::mt19937_64 rng(seed);
  tally kills, stops;
  progress_line progress(quiet || json);
  const fs::path base = fs::temp_directory_path() / ("optcast-chaos-" + std::to_string(::getpid()));
  for (int t = 0; t < trials; ++t) {
    const bool stop = mode == "stop" || (mode == "both" && t % 2);
    auto& tl = stop ? stops : kills;
    const fs::path dir = base / std::to_string(t);
    fs::create_directories(dir);
    // A file store's entries of a trial's job in a directory of its own, removed with it
    // (a Redis store's expire).
    const fs::path files = store.rfind("file://", 0) == 0 ? fs::path(store.substr(7)) / ("optcast-chaos-" + std::to_string(::getpid()) + "-" + std::to_string(t)) : fs::path();
    if (!files.empty()) fs::create_directories(files);
    const std::vector<std::string> args{argv[0], "chaos", "--fabric", fabric, "--seed", std::to_string(rng()),
                                        "--rank-report", dir.string(), "--rank-timeout", std::to_string(timeout_ms), "--rank-store",
                                        files.empty() ? store : "file://" + files.string()};
    auto pids = start_trial(np, args, dir, rng).pids;
    const int victim = static_cast<int>(rng() % static_cast<std::uint64_t>(np));
    const long long injected = now_ns();
    ::kill(pids[static_cast<std::size_t>(victim)], stop ? SIGSTOP : SIGKILL);
    ++tl.injections;
    // Survivors get a deadline (a stall) or a second (a kill), then as much again, before
    // they count as hung.
    const auto limit = std::chrono::steady_clock::now() + std::chrono::milliseconds(stop ? 2 * timeout_ms + 3000 : 5000);
    std::vector<bool> done(static_cast<std::size_t>(np), false);
    done[static_cast<std::size_t>(victim)] = true;
    for (;;) {
      bool all = true;
      for (int r = 0; r < np; ++r) {
        if (done[static_cast<std::size_t>(r)]) continue;
        int st = 0;
        if (::waitpid(pids[static_cast<std::size_t>(r)], &st, WNOHANG) > 0)
          done[static_cast<std::size_t>(r)] = true;
        else
          all = false;
      }
      if (all || std::chrono::steady_clock::now() > limit) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (int r = 0; r < np; ++r) {
      const auto R = static_cast<std::size_t>(r);
      if (r == victim) continue;
      ++tl.survivors;
      if (!done[R]) {
        ++tl.hangs;
        std::fprintf(stderr, "optcast-bench chaos: trial %d: rank %d (pid %d) still running %s after rank %d was %s\n", t, r, pids[R],
                     stop ? "two deadlines and 3 s" : "5 s", victim, stop ? "stopped" : "killed");
        ::kill(pids[R], SIGKILL);
        continue;
      }
      std::ifstream in(dir / ("rank-" + std::to_string(r) + ".txt"));
      std::string word;
      in >> word;
      if (word == "ok") {
        ++tl.silent;
      } else if (word == "wrong") {
        ++tl.wrong;
      } else if (word == "error") {
        long long code = 0, at = 0;
        in >> code >> at;
        std::string why;
        std::getline(in, why);
        tl.ms.push_back(static_cast<double>(at - injected) / 1e6);
        // The root cause: the victim named (its death, its stall behind a deadline).
        if (why.find("rank " + std::to_string(victim)) != std::string::npos) {
          ++tl.with_cause;
        } else {
          ++tl.other_error;
          if (tl.first_other.empty())
            tl.first_other = "trial " + std::to_string(t) + ", rank " + std::to_string(r) + " (rank " + std::to_string(victim) + " " +
                             (stop ? "stopped" : "killed") + "):" + why;
        }
      } else {
        ++tl.other_error;  // no report: ended by a signal or a setup error
      }
    }
    ::kill(pids[static_cast<std::size_t>(victim)], SIGKILL);
    for (int pid : pids) ::waitpid(pid, nullptr, 0);
    fs::remove_all(dir);
    if (!files.empty()) fs::remove_all(files);
    if (progress.on())
      progress.show("chaos: trial " + std::to_string(t + 1) + " of " + std::to_string(trials) + ": " +
                    std::to_string(kills.hangs + stops.hangs) + " hangs, " + std::to_string(kills.silent + stops.silent) + " silent, " +
                    std::to_string(kills.wrong + stops.wrong) + " wrong so far");
  }
  progress.clear();
  fs::remove_all(base);
  if (json) {
    auto obj = [](const tally& x) {
      return "{\"injections\":" + std::to_string(x.injections) + ",\"survivors\":" + std::to_string(x.survivors) +
             ",\"errors_with_cause\":" + std::to_string(x.with_cause) + ",\"other_errors\":" + std::to_string(x.other_error) +
             ",\"silent_survivors\":" + std::to_string(x.silent) + ",\"wrong_results\":" + std::to_string(x.wrong) +
             ",\"hangs\":" + std::to_string(x.hangs) + ",\"ms_to_error\":" + json_list(x.ms) + "}";
    };
    std::printf("{\"fabric\":\"%s\",\"store\":\"%s\",\"np\":%d,\"timeout_ms\":%d,\"kill\":%s,\"stop\":%s}\n", fabric.c_str(),
                store.empty() ? "tcp" : store.c_str(), np, timeout_ms, obj(kills).c_str(), obj(stops).c_str());
  } else {
    std::printf("chaos over %s, %d ranks per job, deadline %d ms, store %s\n", fabric.c_str(), np, timeout_ms,
                store.empty() ? "rank 0's" : store.c_str());
    std::printf("%-6s %10s %9s %10s %8s %7s %6s %6s   %s\n", "fault", "injections", "survivors", "with cause", "other", "silent", "wrong", "hangs",
                "ms to error: min / median / p99 / max");
    for (const auto& [name, x] : {std::pair<const char*, const tally*>{"kill", &kills}, std::pair<const char*, const tally*>{"stop", &stops}})
      if (x->injections)
        std::printf("%-6s %10d %9d %10d %8d %7d %6d %6d   %s\n", name, x->injections, x->survivors, x->with_cause, x->other_error, x->silent,
                    x->wrong, x->hangs, percentiles(x->ms).c_str());
    for (const auto* x : {&kills, &stops})
      if (!x->first_other.empty()) std::printf("  first error without the cause: %s\n", x->first_other.c_str());
  }
  const bool clean = kills.hangs + stops.hangs + kills.silent + stops.silent + kills.wrong + stops.wrong == 0;
  return clean ? 0 : 1;
}

}  // namespace optcast::bench
