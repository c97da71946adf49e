// A job's settings from the environment (job_config::from_env): the launcher that
// started the process (launcher_detect.cpp) and every OPTCAST_* variable, each checked, with a
// message that says what to fix.
#include "optcast/net/job.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "launcher_detect.hpp"
#include "optcast/log.hpp"
#include "pmix.hpp"

namespace optcast {

namespace {


using getenv_fn = std::function<const char*(const char*)>;

std::string env(const getenv_fn& get, const char* name) {
  const char* v = get(name);
  return v ? std::string(v) : std::string();
}

long long env_int(const getenv_fn& get, const char* name, long long def, long long lo, long long hi) {
  const std::string v = env(get, name);
  if (v.empty()) return def;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 0);
  if (errno || !end || *end || x < lo || x > hi)
    throw setup_error(make_error_code(errc::invalid_argument),
                      std::string(name) + "='" + v + "' is not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

// A launcher's rank or size (or OPTCAST_*'s), checked.
long long launcher_int(const std::string& v, const std::string& what, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno || !end || *end || x < lo || x > hi)
    throw setup_error(make_error_code(errc::invalid_argument),
                      what + "='" + v + "' is not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

// A key file, like ssh's: refused when others may read it.
std::string read_secret_file(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_SECRET_FILE '" + path + "': " + std::strerror(errno));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw setup_error(make_error_code(errc::invalid_argument),
                      "OPTCAST_SECRET_FILE '" + path + "' may be read by others: chmod 600 it");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_SECRET_FILE '" + path + "' cannot be read");
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.empty()) throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_SECRET_FILE '" + path + "' is empty");
  return s;
}

}  // namespace

job_config job_config::from_env() {
  return from_env([](const char* name) -> const char* { return std::getenv(name); });
}

job_config job_config::from_env(const getenv_fn& get) {
  job_config c;
  const auto found = launcher::detect(get);
  // Each OPTCAST_* variable over the launcher's word for it.
  const auto pick = [&](const char* name, const std::string& theirs, const char* their_name) -> std::pair<std::string, std::string> {
    if (std::string v = env(get, name); !v.empty()) return {v, name};
    return {theirs, found.name + "'s " + their_name};
  };
  // PMIx: rank and size from the launcher's server, and no store (unless OPTCAST_STORE).
  std::string pmix_rank, pmix_size;
  if (found.name == "PMIx" && (env(get, "OPTCAST_RANK").empty() || env(get, "OPTCAST_SIZE").empty())) {
    const auto place = pmix::init();
    pmix_rank = std::to_string(place.rank);
    pmix_size = std::to_string(place.size);
    c.pmix = env(get, "OPTCAST_STORE").empty();
  }
  const auto [rank_s, rank_from] = found.name == "PMIx" && env(get, "OPTCAST_RANK").empty()
                                       ? std::pair<std::string, std::string>{pmix_rank, "PMIx's rank"}
                                       : pick("OPTCAST_RANK", found.rank, found.name == "Slurm" ? "SLURM_PROCID" : "RANK");
  const auto [size_s, size_from] = found.name == "PMIx" && env(get, "OPTCAST_SIZE").empty()
                                       ? std::pair<std::string, std::string>{pmix_size, "PMIx's job size"}
                                       : pick("OPTCAST_SIZE", found.size, found.name == "Slurm" ? "SLURM_NTASKS" : "WORLD_SIZE");
  if (rank_s.empty() || size_s.empty())
    throw setup_error(make_error_code(errc::invalid_argument),
                      found.name.empty() && env(get, "OPTCAST_RANK").empty() && env(get, "OPTCAST_SIZE").empty() ? "no launcher found to take this process's rank and the job's size from; looked for " +
                                               launcher::looked_for() + ". Start the program with --np N, under one of these, or set "
                                               "OPTCAST_RANK, OPTCAST_SIZE and OPTCAST_STORE for each rank"
                                         : std::string(rank_s.empty() ? "OPTCAST_RANK" : "OPTCAST_SIZE") + " is set but not " +
                                               (rank_s.empty() ? "OPTCAST_RANK" : "OPTCAST_SIZE") + ": set both");
  c.launcher = rank_from == "OPTCAST_RANK" && size_from == "OPTCAST_SIZE" ? "OPTCAST_RANK/OPTCAST_SIZE" : found.name;
  c.size = static_cast<int>(launcher_int(size_s, size_from, 1, 1 << 24));
  c.rank = static_cast<int>(launcher_int(rank_s, rank_from, 0, c.size - 1));
  c.bootstrap_timeout = std::chrono::seconds(env_int(get, "OPTCAST_BOOTSTRAP_TIMEOUT", 60, 1, 86400));
  c.timeout = std::chrono::seconds(env_int(get, "OPTCAST_TIMEOUT", 120, 1, 86400 * 7));

  c.job_id = found.job_id;
  if (const std::string id = env(get, "OPTCAST_JOB_ID"); !id.empty()) {
    char* end = nullptr;
    errno = 0;
    c.job_id = std::strtoull(id.c_str(), &end, 0);
    if (errno || !end || *end || c.job_id == 0)
      throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_JOB_ID='" + id + "' is not a nonzero number");
  }

  const auto [store_s, store_from] = pick("OPTCAST_STORE", c.pmix ? std::string("pmix:") : found.store, "store");
  if (store_s.empty())
    throw setup_error(make_error_code(errc::invalid_argument),
                      found.name.empty() || found.name == "OPTCAST_RANK"
                          ? "OPTCAST_STORE is not set (one of " + launcher::store_forms() + ")"
                          : "OPTCAST_STORE is not set and " + found.name + " does not say where the store is" +
                                (found.name == "torchrun" ? " (MASTER_ADDR and MASTER_PORT)" : found.name == "Slurm" ? " (SLURM_STEP_NODELIST)" : ""));
  std::string why;
  auto url = launcher::parse_store_url(store_s, &why);
  if (!url) throw setup_error(url.error(), store_from + " '" + store_s + "': " + why);
  const auto* scheme = launcher::find_store_scheme(url->scheme);
  if (const long long port = env_int(get, "OPTCAST_STORE_PORT", 0, 1, 65535);
      port && scheme->takes == launcher::store_scheme::shape::address && env(get, "OPTCAST_STORE").empty())
    url->port = static_cast<std::uint16_t>(port);
  if (scheme->needs_job_id && c.job_id == 0)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "a " + url->scheme + ":// store needs a job id that every rank knows, to keep this job's keys apart from "
                      "other jobs' there: set OPTCAST_JOB_ID (the launchers srun and torchrun --rdzv-id give one)");
  scheme->configure(c, *url, get);
  c.store_fd = static_cast<int>(env_int(get, "OPTCAST_STORE_FD", -1, -1, 1 << 20));
  if (env_int(get, "OPTCAST_STORE_EXTERNAL", 0, 0, 1)) {
    if (scheme->takes != launcher::store_scheme::shape::address)
      throw setup_error(make_error_code(errc::invalid_argument),
                        "OPTCAST_STORE_EXTERNAL is for optcast's TCP store (host:port), not a " + url->scheme + ":// store");
    c.host_store = false;
  }
  if (env_int(get, "OPTCAST_REJOIN", 0, 0, 1)) {
    if (scheme->takes != launcher::store_scheme::shape::address)
      throw setup_error(make_error_code(errc::invalid_argument),
                        "OPTCAST_REJOIN: a replacement joins through optcast's TCP store (host:port), not a " + url->scheme + ":// store");
    if (c.rank == 0 && c.host_store)
      throw setup_error(make_error_code(errc::invalid_argument),
                        "OPTCAST_REJOIN: rank 0 hosts the store, so the job ended with it; a job whose rank 0 may be replaced runs "
                        "its store apart (optcast store, OPTCAST_STORE_EXTERNAL=1)");
    c.rejoin = true;
  }
  c.read_rank_env(get);
  log(log_level::debug, "rank " + std::to_string(c.rank) + " of " + std::to_string(c.size) + " (from " + rank_from + "), store " +
                            store_s + (found.job_name.empty() ? std::string() : ", " + found.job_name));
  return c;
}

void job_config::read_rank_env(const getenv_fn& get) {
  host = env(get, "OPTCAST_HOST");
  ifname = env(get, "OPTCAST_IFNAME");
  family = static_cast<int>(env_int(get, "OPTCAST_FAMILY", 0, 0, 6));
  if (family != 0 && family != 4 && family != 6)
    throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_FAMILY='" + env(get, "OPTCAST_FAMILY") + "' is neither 4 nor 6");
  secret = env(get, "OPTCAST_SECRET");
  if (const std::string f = env(get, "OPTCAST_SECRET_FILE"); !f.empty()) {
    if (!secret.empty())
      throw setup_error(make_error_code(errc::invalid_argument), "both OPTCAST_SECRET and OPTCAST_SECRET_FILE are set: set one");
    secret = read_secret_file(f);
  }
  encrypt = env_int(get, "OPTCAST_ENCRYPT", 0, 0, 1) != 0;
  ports = static_cast<int>(env_int(get, "OPTCAST_PORTS", 1, 1, 64));
  shm = env_int(get, "OPTCAST_SHM", shm ? 1 : 0, 0, 1) != 0;
  shm_copy_min = static_cast<std::size_t>(env_int(get, "OPTCAST_SHM_MIN", static_cast<long long>(shm_copy_min), 0,
                                                    std::numeric_limits<long long>::max()));
  shm_move_min = static_cast<std::size_t>(env_int(get, "OPTCAST_SHM_MOVE_MIN", static_cast<long long>(shm_move_min), 0,
                                                    std::numeric_limits<long long>::max()));
  unexpected_limit = static_cast<std::size_t>(env_int(get, "OPTCAST_UNEXPECTED_LIMIT", static_cast<long long>(unexpected_limit), 0,
                                                        std::numeric_limits<long long>::max()));
  unexpected_peer_limit = static_cast<std::size_t>(env_int(get, "OPTCAST_UNEXPECTED_PEER_LIMIT",
                                                             static_cast<long long>(unexpected_peer_limit), 0,
                                                             std::numeric_limits<long long>::max()));
  if (const std::string p = env(get, "OPTCAST_POLL"); p == "adaptive" || p.empty())
    poll = poll_mode::adaptive;
  else if (p == "spin")
    poll = poll_mode::spin;
  else if (p == "block")
    poll = poll_mode::block;
  else
    throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_POLL='" + p + "' is none of adaptive, spin, block");
  poll_limit = std::chrono::microseconds(env_int(get, "OPTCAST_POLL_US", poll_limit.count(), 0, 1000000));
}

job_config::held_limits job_config::limits_for(int ranks_here) const noexcept {
  // Proportionate to what the host has: the ranks of a host share its memory, and a limit
  // the host cannot honour protects nothing.
  constexpr std::size_t least = std::size_t{64} << 20, most = std::size_t{1} << 30;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const std::size_t memory = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : most * 4;
  const std::size_t share = memory / 4 / static_cast<std::size_t>(std::max(ranks_here, 1));
  held_limits l;
  l.total = unexpected_limit ? unexpected_limit : std::clamp(share, least, most);
  l.peer = unexpected_peer_limit ? unexpected_peer_limit : l.total;
  return l;
}

}  // namespace optcast
