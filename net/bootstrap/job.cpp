#include "optcast/net/job.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <limits>
#include <random>

#include "optcast/log.hpp"

namespace optcast {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

long long env_int(const char* name, long long def, long long lo, long long hi) {
  const std::string v = env(name);
  if (v.empty()) return def;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 0);
  if (errno || !end || *end || x < lo || x > hi)
    throw setup_error(make_error_code(errc::invalid_argument),
                      std::string(name) + "='" + v + "' is not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
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
  job_config c;
  if (env("OPTCAST_RANK").empty() || env("OPTCAST_SIZE").empty())
    throw setup_error(make_error_code(errc::invalid_argument),
                      "OPTCAST_RANK and OPTCAST_SIZE are not set: start the program with --np N, "
                      "or set OPTCAST_RANK, OPTCAST_SIZE and OPTCAST_STORE for each rank");
  c.size = static_cast<int>(env_int("OPTCAST_SIZE", 1, 1, 1 << 24));
  c.rank = static_cast<int>(env_int("OPTCAST_RANK", 0, 0, c.size - 1));
  const std::string s = env("OPTCAST_STORE");
  if (s.empty())
    throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_STORE is not set (host:port of the store on rank 0)");
  auto a = store::parse_address(s);
  if (!a) throw setup_error(a.error(), "OPTCAST_STORE='" + s + "' is not host:port");
  c.store = *a;
  c.store_fd = static_cast<int>(env_int("OPTCAST_STORE_FD", -1, -1, 1 << 20));
  c.host = env("OPTCAST_HOST");
  const std::string id = env("OPTCAST_JOB_ID");
  if (!id.empty()) {
    char* end = nullptr;
    errno = 0;
    c.job_id = std::strtoull(id.c_str(), &end, 0);
    if (errno || !end || *end)
      throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_JOB_ID='" + id + "' is not a number");
  }
  c.secret = env("OPTCAST_SECRET");
  if (const std::string f = env("OPTCAST_SECRET_FILE"); !f.empty()) {
    if (!c.secret.empty())
      throw setup_error(make_error_code(errc::invalid_argument), "both OPTCAST_SECRET and OPTCAST_SECRET_FILE are set: set one");
    c.secret = read_secret_file(f);
  }
  c.encrypt = env_int("OPTCAST_ENCRYPT", 0, 0, 1) != 0;
  c.ports = static_cast<int>(env_int("OPTCAST_PORTS", 1, 1, 64));
  c.unexpected_limit = static_cast<std::size_t>(
      env_int("OPTCAST_UNEXPECTED_LIMIT", static_cast<long long>(c.unexpected_limit), 0, std::numeric_limits<long long>::max()));
  c.unexpected_peer_limit = static_cast<std::size_t>(env_int("OPTCAST_UNEXPECTED_PEER_LIMIT", static_cast<long long>(c.unexpected_peer_limit), 0,
                                                              std::numeric_limits<long long>::max()));
  c.bootstrap_timeout = std::chrono::seconds(env_int("OPTCAST_BOOTSTRAP_TIMEOUT", 60, 1, 86400));
  c.timeout = std::chrono::seconds(env_int("OPTCAST_TIMEOUT", 120, 1, 86400 * 7));
  return c;
}

job::job(const asio::any_io_executor& events, const job_config& cfg) : cfg_(cfg) {
  if (cfg.size < 1 || cfg.rank < 0 || cfg.rank >= cfg.size)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "rank " + std::to_string(cfg.rank) + " is not in a job of " + std::to_string(cfg.size));
  if (cfg.ports < 1) throw setup_error(make_error_code(errc::invalid_argument), "ports must be at least 1");
  if (cfg.encrypt && cfg.secret.empty())
    throw setup_error(make_error_code(errc::invalid_argument),
                      "OPTCAST_ENCRYPT needs a job secret (OPTCAST_SECRET or OPTCAST_SECRET_FILE): the connections' keys come from it");
  if (cfg.rank == 0 && cfg.host_store) {
    std::uint64_t id = cfg.job_id;
    while (id == 0) id = (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    server_ = cfg.store_fd >= 0 ? std::make_unique<store::server>(cfg.store_fd, cfg.size, id, cfg.secret)
                                : std::make_unique<store::server>(cfg.store.host, cfg.store.port, cfg.size, id, cfg.secret);
    if (cfg.secret.empty() && cfg.size > 1)
      log(log_level::warn, "no job secret (OPTCAST_SECRET or OPTCAST_SECRET_FILE): any process that reaches the store at " +
                               cfg.store.str() + " can join this job or disturb it");
  }
  client_ = std::make_unique<store::client>(events, cfg.store, cfg.rank, cfg.size, cfg.bootstrap_timeout, cfg.secret);
  id_ = client_->job_id();
  if (cfg.job_id && cfg.job_id != id_)
    throw setup_error(make_error_code(errc::protocol_violation),
                      "OPTCAST_JOB_ID differs from the job id the store hands out: another job's store?");
  host_ = cfg.host.empty() ? client_->local_host() : cfg.host;
}

job::~job() { leave(std::chrono::milliseconds(0)); }

void job::on_failure(std::function<void(int)> lost, std::function<void(std::string)> gone,
                     std::function<void(std::uint64_t, std::string)> failed) {
  client_->on_events(
      std::move(lost),
      [gone = std::move(gone)](std::error_code ec) {
        gone("lost the connection to the store on rank 0 (" + ec.message() + "): rank 0 died?");
      },
      std::move(failed));
}

void job::report_failure(int code, std::string why) {
  if (!left_) client_->report_failure(static_cast<std::uint32_t>(code), std::move(why));
}

void job::report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck) {
  if (!left_) client_->report_stall(seq, std::move(why), std::move(nobody_stuck));
}

result<void> job::leave(std::chrono::milliseconds wait, bool failed) noexcept {
  if (left_) return outcome_;
  left_ = true;
  client_->on_events(nullptr, nullptr);
  outcome_ = client_->bye(wait, &outcome_detail_);
  // The store stays while the other ranks finish (up to the deadline), and take the
  // outcome; when the job failed, they have been told: a little longer for those told
  // just now, not a deadline for a stalled one.
  const auto grace = !outcome_ && outcome_.error() != errc::timeout ? std::chrono::milliseconds(1000)
                     : failed || (server_ && server_->failed())     ? std::chrono::milliseconds(1000)
                                                                    : cfg_.timeout;
  if (server_ && !server_->wait_all_done(grace) && grace == cfg_.timeout)
    log(log_level::warn, "rank 0 closed before every rank had finished (waited " + std::to_string(cfg_.timeout.count()) + " ms)");
  client_.reset();
  server_.reset();
  return outcome_;
}

}  // namespace optcast
