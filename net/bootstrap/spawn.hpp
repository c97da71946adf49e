// Starting the ranks of a job on this machine, for launch_local (optcast/launch.hpp) and
// for programs that start and watch their ranks themselves (optcast-bench's chaos and
// point-to-point runs). Internal: not installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace optcast {

struct local_job;

// The launcher's first half, for tools that watch their ranks themselves (the chaos
// benchmark): starts `np` copies of this program with `args` (args[0] is the program's
// name) as the ranks of one job, rank 0 holding the store's socket. Returns their pids
// in rank order; throws setup_error if it cannot.
std::vector<int> spawn_local_ranks(int np, const std::vector<std::string>& args);

// The store of a job spawned on this machine, kept by the launcher's process instead of
// rank 0 (OPTCAST_STORE_EXTERNAL), so that any rank, rank 0 too, may die and the others
// go on (optcast/survive.hpp). It serves while this object lives.
class launcher_store {
public:
  launcher_store();
  ~launcher_store();
  launcher_store(const launcher_store&) = delete;
  launcher_store& operator=(const launcher_store&) = delete;
  // Every rank's store connection has closed (after its goodbye, or dead); false if
  // `timeout` passed first.
  bool wait_all_done(std::chrono::milliseconds timeout);
  // A rank reported a failure, or died, and was not excused.
  bool failed() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  friend local_job spawn_local_job(int np, const std::vector<std::string>& args, launcher_store* store);
};

// The same, with the store in `store` (started here) rather than on rank 0.
std::vector<int> spawn_local_ranks(int np, const std::vector<std::string>& args, launcher_store& store);

// A job spawned on this machine, with what a process needs to join it later: a
// replacement for one of its ranks (optcast/survive.hpp, grow).
struct local_job {
  std::vector<int> pids;  // the ranks', in rank order
  std::string store;      // host:port of the job's store
  std::uint64_t id = 0;   // OPTCAST_JOB_ID
  std::string secret;     // the fresh secret the ranks were given; empty: they inherited the user's
  bool store_apart = false;  // served by a launcher_store, not by rank 0
};
// spawn_local_ranks, the job described; with `store` (not null) served there.
local_job spawn_local_job(int np, const std::vector<std::string>& args, launcher_store* store = nullptr);
// Starts `args` (args[0] the program's name; /proc/self/exe is run) as a replacement for
// rank `rank` of `job`: its OPTCAST_RANK, the job's store, id and secret, and
// OPTCAST_REJOIN=1. Its pid. Throws setup_error for a rank out of range, or rank 0 of a
// job whose store rank 0 hosted (the store died with it).
int spawn_replacement(const local_job& job, int rank, const std::vector<std::string>& args);

// A socket listening on a free loopback port, for job_config::store_fd of the rank that
// hosts the job's store (the others reach it at 127.0.0.1:port): bound before anyone
// is told the port, so no other process can take it meanwhile. Throws setup_error.
struct loopback_store {
  int fd = -1;  // the hosting rank's store takes it over
  std::uint16_t port = 0;
};
loopback_store listen_loopback_store();

}  // namespace optcast
