// Joining a job: the fabric (optcast/net/tcp.hpp, ofi.hpp) connects this process to its
// job from the OPTCAST_* environment (optcast/net/job.hpp); the communicator on it takes
// the job's defaults and what the environment says of the collectives:
//   OPTCAST_TIMEOUT        the default collective deadline, seconds (job_config's)
//   OPTCAST_CALIBRATION    a JSON file from `optcast calibrate --output`: its L, o, g, G
//                          (and gamma) become every communicator's cost model
//   OPTCAST_ALGORITHM      the broadcast algorithm when a call says automatic (default
//                          automatic: the model's choice, choose.hpp)
//   OPTCAST_CHECK          1: compare every call's signature across ranks first
//                          (communicator_options::check); 0 (default): do not
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "optcast/communicator.hpp"
#include "optcast/net/job.hpp"

namespace asio {
class io_context;
}

namespace optcast {

// What a job's communicators take from the environment beyond the bootstrap.
struct collective_settings {
  std::string calibration;  // OPTCAST_CALIBRATION: a calibration file
  std::string algorithm;    // OPTCAST_ALGORITHM: the default broadcast algorithm, by name
  std::string trace;        // OPTCAST_TRACE: a directory; each rank records its calls and operations into DIR/rank<r>.json (trace.hpp)
  bool check = false;       // OPTCAST_CHECK=1
  static collective_settings from_env();
};

// A communicator on `f` with the job's deadline and `s`; throws setup_error naming the
// variable whose value is wrong (a file that cannot be read or parsed, an unknown
// algorithm or one that is not a broadcast's).
communicator make_communicator(std::shared_ptr<fabric> f, const job_config& cfg,
                               const collective_settings& s = collective_settings::from_env());

// Records c's calls and operations into DIR/rank<r>.json (trace.hpp), after measuring
// its clock's offset from rank 0's (a collective: every rank calls it, or none); what
// make_communicator does with OPTCAST_TRACE=DIR. Throws setup_error when DIR cannot be
// created or written.
void start_trace(communicator& c, const std::string& dir);

// The common case, on the fabric named at run time: "tcp", "ofi", or empty for the
// OPTCAST_FABRIC environment variable (default tcp). The communicator's fabric owns its
// io_context (tcp::connect(cfg)): for plain programs, which call run() and leave().
communicator join(std::string_view fabric_name = {});
// The same on the caller's io_context, for programs that run one (asio.hpp).
communicator join(asio::io_context& io, std::string_view fabric_name = {});

namespace tcp {
// make_communicator(tcp::connect(job_config::from_env()), ...), and on `io`.
communicator join();
communicator join(asio::io_context& io);
}  // namespace tcp
namespace ofi {
// The same over libfabric (provider from OPTCAST_OFI_PROVIDER or FI_PROVIDER).
communicator join();
communicator join(asio::io_context& io);
}  // namespace ofi

// "tcp", or "ofi (tcp;ofi_rxm)": what a communicator runs on, for printing.
std::string fabric_description(const communicator& c);

}  // namespace optcast
