// The fabrics a program can join at run time, by name: one row each (net/fabrics.cpp).
// join() (optcast/join.hpp), every program's --fabric option, OPTCAST_FABRIC and the
// tests' worlds read this table; a new fabric is its folder in net/ and one row here
// (CONTRIBUTING.md). The in-process fabrics (local, sim) are not in it: their ranks are
// made together, not joined one process at a time.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "optcast/fabric.hpp"
#include "optcast/net/job.hpp"

namespace asio {
class io_context;
}

namespace optcast {

struct fabric_entry {
  std::string_view name;     // as --fabric and OPTCAST_FABRIC take it
  std::string_view summary;  // one line, for --help and docs
  // This process's rank of the job `job` describes: on `io` (the caller's loop), or, with
  // io null, on a loop of the fabric's own (run() drives it). `variant`: the fabric's
  // own choice, empty for the environment's: libfabric's provider ("shm"); "encrypt"
  // for TCP (as OPTCAST_ENCRYPT=1).
  // Throws setup_error with the reason.
  std::shared_ptr<fabric> (*connect)(asio::io_context* io, const job_config& job, std::string_view variant);
  // What runs under it, for printing ("tcp;ofi_rxm"); empty when nothing more is known.
  std::string (*detail)(const fabric& f);
  // Whether this build and machine can run it (libfabric loadable).
  bool (*available)();
};

// In order of preference; the first is the default.
std::span<const fabric_entry> fabric_table() noexcept;
// The row of `name`; nullptr if there is none.
const fabric_entry* find_fabric(std::string_view name) noexcept;
// {"tcp", "ofi"}: for a command line's choices (CLI::IsMember).
std::vector<std::string> fabric_names();
// "tcp or ofi": for messages and --help.
std::string fabric_names_text();

}  // namespace optcast
