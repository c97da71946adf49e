#include "store_url.hpp"

#include <charconv>
#include <memory>

#include "file_store.hpp"
#include "redis_store.hpp"
#include "parse_number.hpp"

namespace optcast::launcher {

namespace {

std::string var(const std::function<const char*(const char*)>& env, const char* name) {
  const char* v = env(name);
  return v ? std::string(v) : std::string();
}

// Jobs that share a directory or a server keep apart by their job id.
std::string job_prefix(const job_config& c) { return "job-" + std::to_string(c.job_id); }

void optcast_store(job_config& c, const store_url& u, const std::function<const char*(const char*)>&) {
  c.store = store::address{u.host, u.port};
}

void file_store(job_config& c, const store_url& u, const std::function<const char*(const char*)>&) {
  c.kv = std::make_shared<file_kv_store>(u.path, job_prefix(c) + ".");
}

void redis_store(job_config& c, const store_url& u, const std::function<const char*(const char*)>& env) {
  redis_kv_store::options o;
  o.host = u.host;
  o.port = u.port;
  o.password = u.password.empty() ? var(env, "OPTCAST_REDIS_PASSWORD") : u.password;
  o.prefix = (u.path.empty() ? std::string("optcast") : u.path) + "/" + job_prefix(c);
  o.connect_timeout = c.bootstrap_timeout;
  c.kv = std::make_shared<redis_kv_store>(std::move(o));
}

void pmix_server(job_config& c, const store_url&, const std::function<const char*(const char*)>&) {
  if (!c.pmix)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "pmix: is the store of ranks whose PMIx launcher (mpirun, prterun, srun --mpi=pmix) gives their rank and "
                      "size; with OPTCAST_RANK and OPTCAST_SIZE set, set OPTCAST_STORE too");
}

using shape = store_scheme::shape;
constexpr store_scheme table[] = {
    {"tcp", "host:port", "optcast's store, which rank 0 hosts", shape::address, 0, false, false, optcast_store},
    {"file", "file:///shared/dir", "a directory every rank reaches", shape::absolute_path, 0, false, true, file_store},
    {"redis", "redis://[:password@]host[:port][/prefix]", "a Redis server", shape::address, 6379, true, true, redis_store},
    {"pmix", "pmix:", "the PMIx server of the launcher (mpirun, srun --mpi=pmix)", shape::nothing, 0, false, false, pmix_server},
};

}  // namespace

std::span<const store_scheme> store_schemes() noexcept { return table; }

const store_scheme* find_store_scheme(std::string_view name) noexcept {
  for (const auto& s : table)
    if (s.name == name) return &s;
  return nullptr;
}

std::string store_forms() {
  std::string out;
  for (const auto& s : table) out += (out.empty() ? "" : ", ") + std::string(s.form);
  return out;
}

result<store_url> parse_store_url(std::string_view s, std::string* why) {
  const auto no = [&](std::string w) -> result<store_url> {
    if (why) *why = std::move(w);
    return fail(errc::invalid_argument);
  };
  store_url u;
  std::string_view rest = s;
  if (const auto sep = s.find("://"); sep != std::string_view::npos) {
    u.scheme = std::string(s.substr(0, sep));
    rest = s.substr(sep + 3);
  } else if (s.ends_with(':') && find_store_scheme(s.substr(0, s.size() - 1))) {
    u.scheme = std::string(s.substr(0, s.size() - 1));  // "pmix:"
    rest = {};
  } else {
    u.scheme = "tcp";
  }
  const store_scheme* scheme = find_store_scheme(u.scheme);
  if (!scheme) {
    std::string names;
    for (const auto& row : table)
      names += (names.empty() ? "" : ", ") + std::string(row.name) + (row.takes == shape::nothing ? ":" : "://");
    return no("the store's scheme '" + u.scheme + "' is none of " + names);
  }
  switch (scheme->takes) {
    case shape::nothing:
      if (!rest.empty()) return no(std::string(scheme->name) + ": takes nothing after it");
      return u;
    case shape::absolute_path:
      if (rest.empty() || rest.front() != '/') return no("a " + std::string(scheme->name) + " store is an absolute directory: " + std::string(scheme->form));
      u.path = std::string(rest);
      return u;
    case shape::address:
      break;
  }
  if (scheme->credentials) {
    if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
      u.path = std::string(rest.substr(slash + 1));
      rest = rest.substr(0, slash);
    }
    if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
      std::string_view cred = rest.substr(0, at);
      if (const auto colon = cred.find(':'); colon != std::string_view::npos) cred = cred.substr(colon + 1);
      u.password = std::string(cred);
      rest = rest.substr(at + 1);
    }
  }
  // host, [v6], host:port, [v6]:port
  std::string_view host = rest, port;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) return no("an IPv6 address in brackets has no ']'");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return no("after ']' comes ':port'");
      port = rest.substr(close + 2);
    }
  } else if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (rest.find(':') != colon) return no("an IPv6 address goes in brackets: [" + std::string(rest) + "]:port");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return no("the store's address has no host");
  u.host = std::string(host);
  unsigned p = scheme->default_port;
  if (!port.empty() && (!parse_number(port, p) || p == 0 || p > 65535)) return no("'" + std::string(port) + "' is not a port");
  if (p == 0) return no("the store's address has no port (host:port)");
  u.port = static_cast<std::uint16_t>(p);
  return u;
}

}  // namespace optcast::launcher
