#include "optcast/join.hpp"

#include <cstdlib>

#include "optcast/calibrate.hpp"
#include "optcast/net/ofi.hpp"
#include "optcast/net/tcp.hpp"
#include "optcast/trace.hpp"

namespace optcast {

collective_settings collective_settings::from_env() {
  collective_settings s;
  if (const char* v = std::getenv("OPTCAST_CALIBRATION")) s.calibration = v;
  if (const char* v = std::getenv("OPTCAST_ALGORITHM")) s.algorithm = v;
  if (const char* v = std::getenv("OPTCAST_TRACE")) s.trace = v;
  if (const char* v = std::getenv("OPTCAST_CHECK"); v && *v) {
    const std::string_view c(v);
    if (c != "0" && c != "1") throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_CHECK='" + std::string(c) + "': 1 or 0");
    s.check = c == "1";
  }
  return s;
}

communicator make_communicator(std::shared_ptr<fabric> f, const job_config& cfg, const collective_settings& s) {
  communicator_options o;
  o.timeout = cfg.timeout;
  o.check = s.check;
  if (!s.calibration.empty()) {
    std::string why;
    auto m = load_calibration(s.calibration, &why);
    if (!m) throw setup_error(m.error(), "OPTCAST_CALIBRATION: " + why);
    o.model = *m;
  }
  if (!s.algorithm.empty()) {
    const auto a = parse_algorithm(s.algorithm);
    if (!a) throw setup_error(a.error(), "OPTCAST_ALGORITHM='" + s.algorithm + "' is not an algorithm optcast has");
    if (*a != algorithm::automatic && !find(collective::broadcast, *a))
      throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_ALGORITHM='" + s.algorithm +
                                                                     "' is not a broadcast algorithm (" +
                                                                     algorithm_names(collective::broadcast) + ")");
    o.broadcast_algorithm = *a;
  }
  if (!s.trace.empty())
    f->set_trace(std::make_shared<trace_log>(std::size_t{1} << 22, s.trace + ".rank" + std::to_string(f->rank()) + ".json"));
  return communicator(std::move(f), o);
}

namespace tcp {
communicator join() {
  const auto cfg = job_config::from_env();
  return make_communicator(connect(cfg), cfg);
}
communicator join(asio::io_context& io) {
  const auto cfg = job_config::from_env();
  return make_communicator(connect(io, cfg), cfg);
}
}  // namespace tcp

namespace ofi {
communicator join() {
  const auto cfg = config::from_env();
  return make_communicator(connect(cfg), cfg);
}
communicator join(asio::io_context& io) {
  const auto cfg = config::from_env();
  return make_communicator(connect(io, cfg), cfg);
}
}  // namespace ofi

namespace {
// "tcp" or "ofi": the name given, else OPTCAST_FABRIC's, else tcp.
std::string fabric_named(std::string_view given) {
  std::string name(given);
  if (name.empty()) {
    const char* e = std::getenv("OPTCAST_FABRIC");
    name = e && *e ? e : "tcp";
  }
  if (name != "tcp" && name != "ofi")
    throw setup_error(make_error_code(errc::invalid_argument), "unknown fabric '" + name + "' (tcp or ofi)");
  return name;
}
}  // namespace

communicator join(std::string_view fabric_name) {
  return fabric_named(fabric_name) == "tcp" ? tcp::join() : ofi::join();
}

communicator join(asio::io_context& io, std::string_view fabric_name) {
  return fabric_named(fabric_name) == "tcp" ? tcp::join(io) : ofi::join(io);
}

std::string fabric_description(const communicator& c) {
  std::string out(c.get_fabric().name());
  if (auto p = ofi::provider(c.get_fabric()); !p.empty()) out += " (" + p + ")";
  return out;
}

}  // namespace optcast
