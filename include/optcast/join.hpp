// Joining a job on the fabric named at run time: "tcp", "ofi", or empty for the
// OPTCAST_FABRIC environment variable (default tcp). The job itself comes from the
// OPTCAST_* environment (optcast/net/job.hpp).
#pragma once

#include <string>
#include <string_view>

#include "optcast/communicator.hpp"

namespace asio {
class io_context;
}

namespace optcast {

communicator join(asio::io_context& io, std::string_view fabric_name = {});

// "tcp", or "ofi (tcp;ofi_rxm)": what a communicator runs on, for printing.
std::string fabric_description(const communicator& c);

}  // namespace optcast
