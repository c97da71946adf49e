#include "optcast/join.hpp"

#include <cstdlib>

#include "optcast/net/ofi.hpp"
#include "optcast/net/tcp.hpp"

namespace optcast {

communicator join(asio::io_context& io, std::string_view fabric_name) {
  std::string name(fabric_name);
  if (name.empty()) {
    const char* e = std::getenv("OPTCAST_FABRIC");
    name = e && *e ? e : "tcp";
  }
  if (name == "tcp") return tcp::join(io);
  if (name == "ofi") return ofi::join(io);
  throw setup_error(make_error_code(errc::invalid_argument), "unknown fabric '" + name + "' (tcp or ofi)");
}

std::string fabric_description(const communicator& c) {
  std::string out(c.get_fabric().name());
  if (auto p = ofi::provider(c.get_fabric()); !p.empty()) out += " (" + p + ")";
  return out;
}

}  // namespace optcast
