// A rank started by a PMIx launcher (Open MPI's mpirun, prterun, srun --mpi=pmix) learns
// its place from the launcher's PMIx server and exchanges what it publishes through it:
// put, commit and a fence that collects everyone's, so that no store is needed. Built on
// Debian's libpmix-dev; without it, available() is false and init() says so.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "optcast/error.hpp"

namespace optcast::pmix {

bool available() noexcept;

struct place {
  int rank = 0;
  int size = 0;
  std::string nspace;
};

// PMIx_Init, once per process (PMIx_Finalize as it exits). Throws setup_error with the
// PMIx server's word when it cannot.
place init();

// Every rank calls these together, the same number of times: this rank's key and value
// put, committed, and everyone's collected (up to `timeout`).
result<void> publish(const std::string& key, const std::string& value, std::chrono::milliseconds timeout, std::string* why);
// A key some rank published (after the fence that collected it).
result<std::string> get(const std::string& key, std::string* why);

// `died(rank, why)`, on PMIx's progress thread, when the launcher's PMIx server says a rank
// of this job ended abnormally (PMIx's event notification: aborted, killed by a signal,
// ended without finalizing: PRRTE documents it with --enable-recovery, not run here);
// null: no more. A launcher that delivers no such event (Debian 12's mpirun and srun:
// Slurm's mpi/pmix plugin does not even import PMIx_Notify_event) leaves it uncalled.
void on_death(std::function<void(int rank, std::string why)> died);

}  // namespace optcast::pmix
