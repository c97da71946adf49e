// The libfabric fabric: one reliable-datagram (FI_EP_RDM) endpoint per rank, tagged
// messages carrying the collective's tag, directed receives.
//
// Endpoint names go through the job's store (optcast/net/job.hpp) and into the address
// vector on first use. Progress runs on the rank's asio::io_context: through the CQ's
// wait fd where the provider has one (no spinning while idle; rxm's connection setup
// also progresses there), by polling while operations are pending where it has none.
// Buffers are registered where the provider asks for it (FI_MR_LOCAL).
//
// Provider: config::provider, else OPTCAST_OFI_PROVIDER or FI_PROVIDER (as libfabric
// users expect), else the best available (tcp;ofi_rxm, then shm). The sockets,
// udp;ofi_rxd and net providers are only used when named: on Debian 12's libfabric 1.17
// the first two hang on large messages and net loses messages between more than three
// ranks. OPTCAST_OFI_PROGRESS=poll polls the CQ instead of sleeping on its wait fd.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "optcast/fabric.hpp"
#include "optcast/net/job.hpp"

namespace asio {
class io_context;
}

namespace optcast::ofi {

struct config : job_config {
  std::string provider;         // empty: see above
  bool register_always = false;  // register every buffer even when the provider does not ask
                                 // (OPTCAST_OFI_MR=always; exercises the FI_MR_LOCAL path)
  static config from_env();
  // The job's settings `job`, and the environment's for libfabric (OPTCAST_OFI_PROVIDER,
  // OPTCAST_OFI_MR).
  static config from(const job_config& job);
};

// True when optcast was built with libfabric and can load it: liboptcast loads
// libfabric when it first needs it ($OPTCAST_LIBFABRIC, else the soname of the
// libfabric it was built with); connect() says why where it cannot.
bool available() noexcept;
// RDM providers with tagged messages on this machine, in libfabric's order.
std::vector<std::string> providers();

// Joins the job over libfabric; throws setup_error (no provider, setup failed, ...).
// The fabric owns its io_context, as tcp::connect(cfg)'s does.
std::shared_ptr<optcast::fabric> connect(const config& cfg);
// On the caller's io_context, as tcp::connect(io, cfg).
std::shared_ptr<optcast::fabric> connect(asio::io_context& io, const config& cfg);

// The provider an ofi fabric runs on ("tcp;ofi_rxm"); empty for other fabrics.
std::string provider(const optcast::fabric& f);

}  // namespace optcast::ofi
