#include "optcast/join.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "optcast/calibrate.hpp"
#include "optcast/fabrics.hpp"
#include "optcast/log.hpp"
#include "optcast/trace.hpp"

namespace optcast {

namespace {

// The row named, else OPTCAST_FABRIC's, else the first.
const fabric_entry& fabric_named(std::string_view given) {
  std::string name(given);
  if (name.empty()) {
    const char* e = std::getenv("OPTCAST_FABRIC");
    name = e && *e ? e : std::string(fabric_table()[0].name);
  }
  if (const auto* f = find_fabric(name)) return *f;
  throw setup_error(make_error_code(errc::invalid_argument), "unknown fabric '" + name + "' (" + fabric_names_text() + ")");
}

communicator join_on(asio::io_context* io, std::string_view name) {
  const auto& f = fabric_named(name);
  const auto cfg = job_config::from_env();
  return make_communicator(f.connect(io, cfg, {}), cfg);
}

}  // namespace

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
  communicator c(std::move(f), o);
  if (!s.trace.empty()) start_trace(c, s.trace);
  return c;
}

void start_trace(communicator& c, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_TRACE='" + dir + "': cannot create the directory: " + ec.message());
  const std::string path = (std::filesystem::path(dir) / ("rank" + std::to_string(c.rank()) + ".json")).string();
  if (!std::ofstream(path))
    throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_TRACE='" + dir + "': cannot write " + path);
  const std::string file = std::filesystem::weakly_canonical(path, ec).string();
  std::shared_ptr<trace_log> log;
  try {
    log = std::make_shared<trace_log>(std::size_t{1} << 22, ec ? path : file);
  } catch (const std::invalid_argument& e) {
    throw setup_error(make_error_code(errc::invalid_argument), std::string("OPTCAST_TRACE='") + dir + "': " + e.what());
  }
  // Before the trace starts (the exchange is not part of it); every rank of the job runs
  // it, so OPTCAST_TRACE must be set on all or none.
  if (c.size() > 1) {
    try {
      auto off = run(c, measure_clock_offset(c, std::min<std::chrono::milliseconds>(c.options().timeout, std::chrono::seconds(30))));
      if (!off)  // the ranks' collectives no longer line up: nothing later could work
        throw setup_error(off.error(), "OPTCAST_TRACE: the clock exchange with rank 0 failed (" +
                                           describe(off.error(), c.get_fabric().failure_detail()) +
                                           "); OPTCAST_TRACE must be set on every rank or on none");
      log->set_clock_offset(*off);
    } catch (const std::logic_error& e) {  // join(io) on the loop's own thread: nothing may block it
      optcast::log(log_level::warn, std::string("OPTCAST_TRACE: clock offsets not measured (") + e.what() +
                                        "): `optcast trace merge` aligns this rank as if on rank 0's clock");
    }
  }
  c.get_fabric().set_trace(std::move(log));
}

communicator join(std::string_view fabric_name) { return join_on(nullptr, fabric_name); }
communicator join(asio::io_context& io, std::string_view fabric_name) { return join_on(&io, fabric_name); }

namespace tcp {
communicator join() { return join_on(nullptr, "tcp"); }
communicator join(asio::io_context& io) { return join_on(&io, "tcp"); }
}  // namespace tcp

namespace ofi {
communicator join() { return join_on(nullptr, "ofi"); }
communicator join(asio::io_context& io) { return join_on(&io, "ofi"); }
}  // namespace ofi

std::string fabric_description(const communicator& c) {
  std::string out(c.get_fabric().name());
  if (const auto* f = find_fabric(out))
    if (auto d = f->detail(c.get_fabric()); !d.empty()) out += " (" + d + ")";
  return out;
}

}  // namespace optcast
