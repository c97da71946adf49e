// Built instead of ofi.cpp when libfabric is not found (meson option ofi): the API
// exists and says plainly that this build has no libfabric.
#include "optcast/net/ofi.hpp"

namespace optcast::ofi {

namespace {
[[noreturn]] void absent() {
  throw setup_error(make_error_code(errc::invalid_argument),
                    "this optcast was built without libfabric (install libfabric-dev and rebuild with -Dofi=enabled)");
}
}  // namespace

bool available() noexcept { return false; }
std::vector<std::string> providers() { return {}; }
config config::from_env() { return from(job_config::from_env()); }
config config::from(const job_config& job) {
  config c;
  static_cast<job_config&>(c) = job;
  return c;
}
std::shared_ptr<optcast::fabric> connect(asio::io_context&, const config&) { absent(); }
std::shared_ptr<optcast::fabric> connect(const config&) { absent(); }
std::string provider(const optcast::fabric&) { return {}; }

}  // namespace optcast::ofi
