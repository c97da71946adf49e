// The table of fabrics a process joins by name (optcast/fabrics.hpp), and join() on it.
// A new fabric: its folder beside tcp/ and ofi/, and one row below.
#include "optcast/fabrics.hpp"

#include <algorithm>
#include <cstdlib>

#include "optcast/join.hpp"
#include "optcast/net/ofi.hpp"
#include "optcast/net/tcp.hpp"

namespace optcast {

namespace {

std::string nothing_more(const fabric&) { return {}; }
bool always() { return true; }

const fabric_entry table[] = {
    {"tcp", "TCP sockets (standalone Asio): a connection per peer and direction, opened on first use",
     [](asio::io_context* io, const job_config& job, std::string_view variant) {
       auto c = job;
       if (variant == "encrypt") {
         c.encrypt = true;
       } else if (variant == "shm") {  // every message between ranks of one host by single copy
         c.single_copy = 1;
         c.single_copy_min = 0;
       } else if (!variant.empty()) {
         throw setup_error(make_error_code(errc::invalid_argument), "tcp: unknown variant '" + std::string(variant) + "' (encrypt, shm)");
       }
       return io ? tcp::connect(*io, c) : tcp::connect(c);
     },
     nothing_more, always},
    {"ofi", "libfabric RDM endpoints (provider from the variant, OPTCAST_OFI_PROVIDER or FI_PROVIDER, else the best one)",
     [](asio::io_context* io, const job_config& job, std::string_view provider) {
       auto c = ofi::config::from(job);
       if (!provider.empty()) c.provider = provider;
       return io ? ofi::connect(*io, c) : ofi::connect(c);
     },
     [](const fabric& f) { return ofi::provider(f); }, [] { return ofi::available(); }},
};

// The row named, else OPTCAST_FABRIC's, else the first.
const fabric_entry& fabric_named(std::string_view given) {
  std::string name(given);
  if (name.empty()) {
    const char* e = std::getenv("OPTCAST_FABRIC");
    name = e && *e ? e : std::string(table[0].name);
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

std::span<const fabric_entry> fabric_table() noexcept { return table; }

const fabric_entry* find_fabric(std::string_view name) noexcept {
  const auto it = std::find_if(std::begin(table), std::end(table), [&](const fabric_entry& f) { return f.name == name; });
  return it == std::end(table) ? nullptr : &*it;
}

std::vector<std::string> fabric_names() {
  std::vector<std::string> out;
  for (const auto& f : table) out.emplace_back(f.name);
  return out;
}

std::string fabric_names_text() {
  std::string out;
  const std::size_t n = std::size(table);
  for (std::size_t i = 0; i < n; ++i) out += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::string(table[i].name);
  return out;
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
