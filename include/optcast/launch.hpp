// Starting ranks on this machine: a program run with --np N becomes a launcher that
// starts N copies of itself as ranks 0..N-1 of one job over TCP loopback.
//
//   int main(int argc, char** argv) {
//     if (auto status = optcast::launch_local(argc, argv)) return *status;
//     auto comm = optcast::tcp::join();  // this process is one rank
//     ...
//   }
#pragma once

#include <optional>

namespace optcast {

// With --np N (or --np=N) on the command line, this process is the launcher: it starts
// N copies of the program (same arguments without --np) with OPTCAST_RANK, OPTCAST_SIZE,
// OPTCAST_STORE, OPTCAST_JOB_ID and a fresh OPTCAST_SECRET set (unless the user gave a
// secret), hands rank 0 the store's listening socket, waits
// for all of them, names every rank that fails (exit status or signal), stops the rest
// if they outlive a failure by OPTCAST_LAUNCH_GRACE seconds (default 30), and returns
// the exit status for main to return (0 when every rank succeeded). Without --np it
// returns nothing and the program goes on as a rank. (How it starts them is
// net/bootstrap/spawn.hpp's, internal.)
std::optional<int> launch_local(int argc, char** argv);

}  // namespace optcast
