// Broadcast among real processes, started with --np like a user would, over TCP and
// over libfabric (tcp;ofi_rxm and shm where present); and a rank that dies in the
// middle of a broadcast.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "optcast/error.hpp"
#include "optcast/fabrics.hpp"
#include "optcast/net/ofi.hpp"
#include "worlds.hpp"

namespace fs = std::filesystem;

namespace {

struct job_outcome {
  int launcher_status = -1;
  std::vector<std::string> reports;  // per rank: "ok", "error <code> <text>", or "" if none
  std::vector<long> exit_ms;         // per rank: from its start to its exit, -1 if unknown
  std::vector<int> checked;          // per rank: broadcasts it checked, -1 if unknown
  long long single_copies = 0;       // messages received by single copy, all ranks
  long long in_memory = 0;           // links through shared memory, both ends counted
  std::string launcher_stderr;
};

// `helper_var` names the environment variable that holds the helper program's path.
job_outcome run_job(int np, const std::string& extra, const std::string& env = {}, const char* helper_var = "OPTCAST_TEST_HELPER") {
  const char* helper = std::getenv(helper_var);
  REQUIRE(helper);
  static int counter = 0;
  const fs::path dir = fs::temp_directory_path() / ("optcast-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::create_directories(dir);
  const std::string cmd = env + " " + std::string(helper) + " --np " + std::to_string(np) + " --report " + dir.string() + " " + extra +
                          " 2>" + (dir / "stderr.txt").string();
  const int st = std::system(cmd.c_str());
  job_outcome out;
  out.launcher_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  for (int r = 0; r < np; ++r) {
    std::ifstream f(dir / ("rank-" + std::to_string(r) + ".txt"));
    std::string line;
    std::getline(f, line);
    out.reports.push_back(line);
    std::string ms;
    out.exit_ms.push_back(std::getline(f, ms) ? std::atol(ms.c_str()) : -1);
    std::string n;
    out.checked.push_back(std::getline(f, n) ? std::atoi(n.c_str()) : -1);
    if (std::getline(f, n)) out.single_copies += std::atoll(n.c_str());
    if (std::getline(f, n)) out.in_memory += std::atoll(n.c_str());
  }
  std::ifstream e(dir / "stderr.txt");
  std::stringstream ss;
  ss << e.rdbuf();
  out.launcher_stderr = ss.str();
  // A rank killed without closing its libfabric shm endpoint leaves its region in
  // /dev/shm, named after its pid; a later process with the same pid would meet it.
  for (std::size_t at = 0; (at = out.launcher_stderr.find("(pid ", at)) != std::string::npos; ++at) {
    const std::string pid = std::to_string(std::atoi(out.launcher_stderr.c_str() + at + 5));
    std::error_code ignored;
    for (const auto& f : fs::directory_iterator("/dev/shm", ignored))
      if (f.path().filename().string().rfind(pid + ":", 0) == 0) fs::remove(f.path(), ignored);
  }
  std::string reports;
  for (std::size_t r = 0; r < out.reports.size(); ++r) reports += "\nrank " + std::to_string(r) + ": " + out.reports[r];
  UNSCOPED_INFO("command: " << cmd << "\nstderr:\n" << ss.str() << "reports:" << reports);
  fs::remove_all(dir);
  return out;
}

}  // namespace

// One job for each p runs the broadcasts of every root and size given in turn (each
// checked by every rank: the helper's report names the first that failed).
static job_outcome broadcasts(int p, const std::string& roots, const std::string& sizes, const std::string& fabric = "tcp",
                              const std::string& env = {}) {
  auto out = run_job(p, "--fabric " + fabric + " --roots " + roots + " --bytes " + sizes + " --blocks 9", env);
  INFO(env << " p=" << p << " roots " << roots << " sizes " << sizes);
  REQUIRE(out.launcher_status == 0);
  const auto count = [](const std::string& list) { return static_cast<int>(std::count(list.begin(), list.end(), ',')) + 1; };
  const int calls = (roots == "all" ? p : count(roots)) * count(sizes);
  for (int r = 0; r < p; ++r) {
    CHECK(out.reports[static_cast<std::size_t>(r)] == "ok");
    CHECK(out.checked[static_cast<std::size_t>(r)] == calls);
  }
  return out;
}

TEST_CASE("broadcast among real processes over TCP", "[tcp][process][beside]") {
  for (int p : {1, 2, 3, 5, 8}) {
    const auto out = broadcasts(p, std::to_string(0) + "," + std::to_string(p - 1) + "," + std::to_string(p / 2), "0,1,1000003,4MiB");
    // The ranks share this host: they talk through shared memory, and their blocks of
    // 4 MiB / 9 went by single copy.
    if (p > 1) CHECK(out.in_memory > 0);
    if (p > 1) CHECK(out.single_copies > 0);
  }
}

TEST_CASE("ranks of one host talk through shared memory and copy large messages out of each other's memory, unless told not to", "[tcp][process][beside]") {
  // Every message, of every size, by reference (OPTCAST_SHM_MIN=1), then none (OPTCAST_SHM=0).
  auto all = broadcasts(5, "0,4", "1,1000003,4MiB", "tcp", "OPTCAST_SHM_MIN=1");
  CHECK(all.single_copies >= 2 * 3 * 4);  // each broadcast reaches every other rank at least once
  CHECK(all.in_memory > 0);
  auto none = broadcasts(5, "0,4", "1,1000003,4MiB", "tcp", "OPTCAST_SHM=0");
  CHECK(none.single_copies == 0);
  CHECK(none.in_memory == 0);
  // No job secret needed: the kernel vouches for the peer's process (same user) on the
  // unix socket the rings are set up on.
  auto open = broadcasts(3, "0", "4MiB", "tcp", "OPTCAST_SECRET=");
  CHECK(open.in_memory > 0);
  CHECK(open.single_copies > 0);
  // Over loopback TCP (shared memory off), single copy is for jobs with a secret only: a
  // peer proves who it is before another reads memory it names.
  auto sockets = broadcasts(3, "0", "4MiB", "tcp", "OPTCAST_SECRET= OPTCAST_SHM=0");
  CHECK(sockets.in_memory == 0);
  CHECK(sockets.single_copies == 0);
}

TEST_CASE("binomial broadcast among real processes", "[tcp][process][beside]") {
  auto out = run_job(6, "--root 4 --bytes 300001 --algorithm binomial");
  REQUIRE(out.launcher_status == 0);
  for (auto& rep : out.reports) CHECK(rep == "ok");
}

TEST_CASE("the launcher gives its ranks a job secret; a user's secret is passed on and checked", "[tcp][process][beside]") {
  auto out = run_job(3, "--bytes 1000");
  CHECK(out.launcher_status == 0);
  CHECK(out.launcher_stderr.find("no job secret") == std::string::npos);  // rank 0 warns without one
  // An explicitly empty secret turns authentication off, with the warning.
  out = run_job(3, "--bytes 1000", "OPTCAST_SECRET=");
  CHECK(out.launcher_status == 0);
  CHECK(out.launcher_stderr.find("no job secret") != std::string::npos);
  out = run_job(3, "--bytes 1000", "OPTCAST_SECRET=short");
  CHECK(out.launcher_status != 0);
  CHECK(out.launcher_stderr.find("use at least 16") != std::string::npos);
  const fs::path key = fs::temp_directory_path() / ("optcast-key-" + std::to_string(::getpid()));
  std::ofstream(key) << "a key file's secret, 32 bytes...\n";
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  out = run_job(3, "--bytes 1000", "OPTCAST_SECRET_FILE=" + key.string());
  CHECK(out.launcher_status != 0);
  CHECK(out.launcher_stderr.find("chmod 600") != std::string::npos);
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  out = run_job(3, "--bytes 1000", "OPTCAST_SECRET_FILE=" + key.string());
  CHECK(out.launcher_status == 0);
  CHECK(out.launcher_stderr.find("no job secret") == std::string::npos);
  fs::remove(key);
}

TEST_CASE("a rank that exits mid-broadcast makes the others fail with peer lost", "[tcp][process]") {
  const int p = 6;
  // Rank 3 dies just before its 100th operation of a 64-block broadcast of 8 MiB; the
  // deadline is far away, so only peer-lost detection can end the others in time. Its
  // blocks through the sockets, then by single copy (its sends lent, its receipts owed).
  const std::string env = GENERATE(as<std::string>{}, "OPTCAST_SHM=0", "OPTCAST_SHM_MIN=1");
  INFO(env);
  const auto start = std::chrono::steady_clock::now();
  auto out = run_job(p, "--root 0 --bytes 8MiB --blocks 64 --die-rank 3 --die-after 100 --timeout-ms 60000", env);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK(out.launcher_status != 0);
  // The launcher names the dead rank and how it ended.
  CHECK(out.launcher_stderr.find("rank 3 (pid") != std::string::npos);
  CHECK(out.launcher_stderr.find("exited with status 3") != std::string::npos);
  CHECK(out.reports[3].empty());                // it died before writing anything
  const std::string lost = "error " + std::to_string(static_cast<int>(optcast::errc::peer_lost));
  INFO("launcher: " << out.launcher_stderr);  // the ranks' own logs of what failed them
  int failed = 0;
  for (int r = 0; r < p; ++r) {
    if (r == 3) continue;
    INFO("rank " << r << ": " << out.reports[static_cast<std::size_t>(r)]);
    const auto& rep = out.reports[static_cast<std::size_t>(r)];
    CHECK((rep == "ok" || rep.rfind(lost, 0) == 0));  // finished before it mattered, or peer lost
    if (rep != "ok") ++failed;
  }
  CHECK(failed >= 2);
}

namespace {
// "FI_PROVIDER='tcp;ofi_rxm'" for each provider the libfabric run tests (these cases are
// tagged [ofi]: they run only there, where tests/main.cpp found every provider).
std::vector<std::string> ofi_envs() {
  std::vector<std::string> out;
  for (const auto& prov : optcast::testing::ofi_providers()) out.push_back("FI_PROVIDER='" + prov + "'");
  return out;
}
}  // namespace

// Roots 0 and p - 1 with an empty and a 4 MiB message (the quick suite); the full suite
// every root with three sizes (README's command runs both).
static void ofi_broadcasts(bool every_root) {
  for (const auto& env : ofi_envs())
    for (int p : {1, 2, 3, 5, 8}) {
      if (every_root)
        broadcasts(p, "all", "0,1000003,4MiB", "ofi", env);
      else
        broadcasts(p, "0," + std::to_string(p - 1), "0,4MiB", "ofi", env);
    }
}

TEST_CASE("broadcast among real processes over libfabric, roots 0 and p - 1", "[ofi][process][beside]") { ofi_broadcasts(false); }

TEST_CASE("broadcast among real processes over libfabric, every root", "[ofi][process][full][beside]") { ofi_broadcasts(true); }

// liboptcast loads libfabric when a rank first makes a libfabric fabric: one that cannot
// be loaded fails every rank at start-up, saying which and why, and the job with them.
TEST_CASE("a libfabric that cannot be loaded fails the job with the reason", "[ofi][process][beside]") {
  auto out = run_job(2, "--fabric ofi --bytes 1000", "OPTCAST_LIBFABRIC=/nonexistent/libfabric.so.1");
  CHECK(out.launcher_status != 0);
  CHECK(out.launcher_stderr.find("cannot load libfabric (/nonexistent/libfabric.so.1)") != std::string::npos);
  // A library that loads but is not libfabric (or an older one) lacks the functions.
  out = run_job(2, "--fabric ofi --bytes 1000", "OPTCAST_LIBFABRIC=libm.so.6");
  CHECK(out.launcher_status != 0);
  CHECK(out.launcher_stderr.find("libfabric (libm.so.6) has no fi_getinfo@") != std::string::npos);
  // The same program over TCP never loads it.
  out = run_job(2, "--fabric tcp --bytes 1000", "OPTCAST_LIBFABRIC=/nonexistent/libfabric.so.1");
  CHECK(out.launcher_status == 0);
}

TEST_CASE("a rank that exits mid-broadcast over libfabric fails the others, no hang", "[ofi][process]") {
  for (const auto& env : ofi_envs()) {
    const int p = 6;
    const auto start = std::chrono::steady_clock::now();
    auto out = run_job(p, "--fabric ofi --root 0 --bytes 8MiB --blocks 64 --die-rank 3 --die-after 100 --timeout-ms 60000", env);
    INFO(env);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
    CHECK(out.launcher_status != 0);
    CHECK(out.launcher_stderr.find("exited with status 3") != std::string::npos);
    const std::string lost = "error " + std::to_string(static_cast<int>(optcast::errc::peer_lost));
    int failed = 0;
    for (int r = 0; r < p; ++r) {
      if (r == 3) continue;
      const auto& rep = out.reports[static_cast<std::size_t>(r)];
      INFO("rank " << r << ": " << rep);
      CHECK((rep == "ok" || rep.rfind(lost, 0) == 0));
      if (rep != "ok") ++failed;
    }
    CHECK(failed >= 2);
  }
}

// A failed job fails on every rank: also on those whose own calls succeeded (the root of
// a broadcast that only sends), which learn the job's outcome when they leave.
TEST_CASE("no rank exits 0 from a failed job; rank 0 leaves within one deadline", "[fabrics][process]") {
  const auto code = [](optcast::errc e) { return "error " + std::to_string(static_cast<int>(e)) + " "; };
  for (const auto& row : optcast::fabric_table()) {
    const auto job_env = optcast::testing::job_env_for(row.name);
    if (!job_env) continue;
    const std::string fabric(row.name), env = *job_env;
    INFO("fabric " << fabric);
    {
      INFO("rank 2 names root 1, the others root 0");
      auto out = run_job(4, "--fabric " + fabric + " --bytes 100000 --odd-rank 2 --odd-root 1 --timeout-ms 20000", env);
      CHECK(out.launcher_status != 0);
      for (int r = 0; r < 4; ++r) {
        const auto& rep = out.reports[static_cast<std::size_t>(r)];
        INFO("rank " << r << ": " << rep);
        // broken: told before it made the call; either way with the cause.
        CHECK((rep.rfind(code(optcast::errc::call_mismatch), 0) == 0 || rep.rfind(code(optcast::errc::broken), 0) == 0));
        CHECK(rep.find("called differently") != std::string::npos);
        CHECK(out.exit_ms[static_cast<std::size_t>(r)] < 10000);  // told, not timed out
      }
    }
    {
      // Past the bound on rank 0's exit below, so that rank 2's waking cannot be what ends
      // it (the launcher waits for rank 2, which must report the failure too).
      INFO("rank 2 stalls for 2.5 deadlines");
      const long deadline = 2000;
      auto out = run_job(4, "--fabric " + fabric + " --bytes 1000 --stall-rank 2 --stall-ms 5000 --timeout-ms " + std::to_string(deadline), env);
      CHECK(out.launcher_status != 0);
      for (int r = 0; r < 4; ++r) {
        const auto& rep = out.reports[static_cast<std::size_t>(r)];
        INFO("rank " << r << ": " << rep);
        CHECK(rep.rfind("error ", 0) == 0);
        // The root cause, found by the store's inquiry, not the rank each waited on.
        if (r != 2) CHECK(rep.find("rank 2 stopped responding") != std::string::npos);
      }
      // A deadline, the bootstrap before it, and the second the store stays for ranks
      // just told; not two deadlines.
      CHECK(out.exit_ms[0] > 0);
      CHECK(out.exit_ms[0] < deadline + 1500 + 1000);
    }
  }
}

// Users' jobs are never in step: a root runs ahead, finishes its last call and leaves
// while the others still forward its data to a slow rank. Its goodbye is not a loss: no
// rank may fail for it (every collective, roots moving so each rank in turn runs ahead,
// rank 3 sleeping 20 ms after each call; every result checked on every rank).
static void uneven_job(const std::string& fabric, const std::string& env) {
  const int p = 8;
  INFO("fabric " << fabric << " " << env);
  struct {
    const char* what;
    std::string args;
    int calls;
  } const cases[] = {
      {"one root broadcasting up to 4 MiB", "--collectives broadcast --root 0 --repeat 60 --bytes 1000,1MiB,4MiB", 60},
      {"every collective, 6 calls of each in a row", "--repeat 6 --bytes 1000,1MiB,64KiB", 13 * 6},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto out = run_job(p, "--fabric " + fabric + " " + c.args + " --slow-rank 3 --slow-ms 20", env, "OPTCAST_UNEVEN_HELPER");
    CHECK(out.launcher_status == 0);
    for (int r = 0; r < p; ++r) {
      INFO("rank " << r);
      CHECK(out.reports[static_cast<std::size_t>(r)] == "ok " + std::to_string(c.calls));
    }
  }
}

TEST_CASE("a rank that finishes first and leaves does not fail the others (TCP)", "[tcp][process][beside]") {
  // Ranks of one host (single copy, a connection per direction), and as ranks of different
  // hosts (one connection per pair both ways: goodbyes and closes on shared sockets).
  uneven_job("tcp", "");
  uneven_job("tcp", "OPTCAST_SHM=0");
  uneven_job("tcp", "OPTCAST_SHM=0 OPTCAST_ENCRYPT=1");
}

TEST_CASE("a rank that finishes first and leaves does not fail the others (libfabric)", "[ofi][process][beside]") {
  for (const auto& env : ofi_envs()) uneven_job("ofi", env);
}

// A gather whose ranks name different roots is a call mismatch, and every rank says so,
// whichever rank differs: not "peer lost" because a rank that finished first has left
// (its goodbye names its call, or the rank sending to it asks the store), nor a timeout
// when the differing calls wait on each other (the store compares the stalled calls).
TEST_CASE("a gather with different roots is reported as a mismatch, not a lost peer", "[fabrics][process]") {
  for (const auto& row : optcast::fabric_table()) {
    const auto job_env = optcast::testing::job_env_for(row.name);
    if (!job_env) continue;
    const std::string fabric(row.name), env = *job_env;
    for (int odd : {7, 3, 2}) {
      INFO("fabric " << fabric << ", rank " << odd << " names root 1, the others root 0");
      auto out = run_job(8,
                         "--fabric " + fabric + " --collectives gather --root 0 --odd-rank " + std::to_string(odd) +
                             " --odd-root 1 --bytes 80000 --timeout-ms 3000",
                         env + " OPTCAST_CHECK=0", "OPTCAST_UNEVEN_HELPER");
      CHECK(out.launcher_status != 0);
      // (A rank once wrote nothing under load in CI: still joining, join() threw the job's
      // failure; the helper now reports that too. What the launcher saw of each rank:)
      INFO("launcher: " << out.launcher_stderr);
      const std::string mismatch = "error " + std::to_string(static_cast<int>(optcast::errc::call_mismatch)) + " ";
      for (int r = 0; r < 8; ++r) {
        const auto& rep = out.reports[static_cast<std::size_t>(r)];
        INFO("rank " << r << ": " << rep);
        CHECK(rep.rfind(mismatch, 0) == 0);
        CHECK(rep.find("called differently: ") != std::string::npos);
        // Both calls named, where the messages carry them whole (libfabric's carry a hash:
        // a message that was never received names only the receiver's call).
        if (fabric == "tcp" || rep.find("was never received") == std::string::npos) {
          CHECK(rep.find("root 1") != std::string::npos);
          CHECK(rep.find("root 0") != std::string::npos);
        }
      }
    }
  }
}
