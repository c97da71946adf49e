// The table of fabrics a process joins by name (optcast/fabrics.hpp); join() on it is
// lib/membership/join.cpp's.
// A new fabric: its folder beside tcp/ and ofi/, and one row below.
#include "optcast/fabrics.hpp"

#include <algorithm>
#include <cstdlib>

#include "optcast/net/ofi.hpp"
#include "optcast/net/tcp.hpp"

namespace optcast {

namespace {

std::string nothing_more(const fabric&) { return {}; }
bool always() { return true; }

const fabric_entry table[] = {
    {"tcp", "TCP sockets (standalone Asio), and shared memory between ranks of a host: a connection per peer and direction, opened on first use",
     [](asio::io_context* io, const job_config& job, std::string_view variant) {
       auto c = job;
       if (variant == "encrypt") {
         c.encrypt = true;
       } else if (variant == "shm") {  // shared memory between ranks of a host, whatever OPTCAST_SHM says
         c.shm = true;
       } else if (variant == "socket") {  // loopback TCP between ranks of a host too
         c.shm = false;
       } else if (!variant.empty()) {
         throw setup_error(make_error_code(errc::invalid_argument), "tcp: unknown variant '" + std::string(variant) + "' (encrypt, shm, socket)");
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

}  // namespace optcast
