#include "optcast/net/job.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <limits>
#include <random>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include "optcast/fabric.hpp"
#include "optcast/net/file_store.hpp"
#include "optcast/net/launcher.hpp"
#include "optcast/net/redis_store.hpp"
#include "pmix.hpp"
#include "optcast/log.hpp"

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

// The keys optcast keeps in a program's store (job_config::kv).
const std::string k_joined = "optcast/joined";
const std::string k_job = "optcast/job";
const std::string k_failures = "optcast/failures";
const std::string k_failure = "optcast/failure";
std::string bye_key(int rank) { return "optcast/bye/" + std::to_string(rank); }

// What went wrong with the program's store, in its words if it has some.
std::string store_says(const kv_store& kv, const std::error_code& ec) {
  std::string s = kv.last_error();
  return s.empty() ? ec.message() : s;
}

}  // namespace

// A program's store is called blocking: the lookups the event loop asks for, and the
// failure reports, run on this thread, which also looks for the job's first failure
// between them (every 100 ms), since such a store cannot tell anyone anything.
struct job::kv_side {
  std::shared_ptr<kv_store> kv;
  asio::any_io_executor events;
  std::chrono::milliseconds bootstrap_timeout;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool closing = false;                   // drain the tasks, then stop
  std::atomic<bool> stopping{false};      // lookups give up
  std::function<void(std::uint64_t, std::string)> failed;
  bool reported = false;  // this rank failed: it is not told of the job's failure
  bool told = false;
  std::thread worker;

  void push(std::function<void()> t) {
    {
      std::lock_guard l(mu);
      tasks.push_back(std::move(t));
    }
    cv.notify_all();
  }

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return closing || !tasks.empty(); });
      if (!tasks.empty()) {
        auto t = std::move(tasks.front());
        tasks.pop_front();
        lock.unlock();
        guarded(t);
        lock.lock();
        continue;
      }
      if (closing) return;
      if (failed && !told && !reported) {
        lock.unlock();
        result<std::string> v = fail(errc::timeout);
        guarded([&] { v = kv->get(k_failure, std::chrono::milliseconds(0)); });
        lock.lock();
        if (v && failed && !told && !reported) {
          told = true;
          auto [code, why] = parse_failure(*v);
          asio::post(events, [f = failed, code, why] { f(code, why); });
        }
      }
    }
  }

  // The program's store is the program's code: what it throws is logged, not fatal.
  template <class F>
  static void guarded(F&& f) noexcept {
    try {
      f();
    } catch (const std::exception& e) {
      log(log_level::warn, std::string("the job's store threw: ") + e.what());
    } catch (...) {
      log(log_level::warn, "the job's store threw");
    }
  }

  static std::pair<std::uint64_t, std::string> parse_failure(const std::string& v) {
    const auto sp = v.find(' ');
    std::uint64_t code = 0;
    try {
      code = std::stoull(v.substr(0, sp));
    } catch (...) {
    }
    return {code, sp == std::string::npos ? std::string() : v.substr(sp + 1)};
  }

  // get(key) in slices, so that leaving does not wait for a key that never comes.
  result<std::string> get_until(const std::string& key, std::chrono::steady_clock::time_point until) {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      auto v = kv->get(key, std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(100)));
      if (v || v.error() != errc::timeout || left.count() <= 0 || stopping) return v;
    }
  }
};

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
  if (c.pmix) {
    // Where each rank listens goes through the PMIx server; no store to parse.
  } else if (store_s.empty())
    throw setup_error(make_error_code(errc::invalid_argument),
                      found.name.empty() || found.name == "OPTCAST_RANK"
                          ? "OPTCAST_STORE is not set (host:port of the store on rank 0, file:///dir or redis://host:port)"
                          : "OPTCAST_STORE is not set and " + found.name + " does not say where the store is" +
                                (found.name == "torchrun" ? " (MASTER_ADDR and MASTER_PORT)" : found.name == "Slurm" ? " (SLURM_STEP_NODELIST)" : ""));
  std::string why;
  auto url = c.pmix ? result<launcher::store_url>(launcher::store_url{"pmix", "", 0, "", ""}) : launcher::parse_store_url(store_s, &why);
  if (!url) throw setup_error(url.error(), store_from + " '" + store_s + "': " + why);
  if (const long long port = env_int(get, "OPTCAST_STORE_PORT", 0, 1, 65535); port && url->scheme == "tcp" && env(get, "OPTCAST_STORE").empty())
    url->port = static_cast<std::uint16_t>(port);
  if (url->scheme == "pmix") {
  } else if (url->scheme == "tcp") {
    c.store = store::address{url->host, url->port};
  } else {
    // Jobs that share a directory or a server keep apart by their job id, which every
    // rank must know before it reads anything there.
    if (c.job_id == 0)
      throw setup_error(make_error_code(errc::invalid_argument),
                        "a " + url->scheme + ":// store needs a job id that every rank knows, to keep this job's keys apart from "
                        "other jobs' there: set OPTCAST_JOB_ID (the launchers srun and torchrun --rdzv-id give one)");
    const std::string prefix = "job-" + std::to_string(c.job_id);
    if (url->scheme == "file") {
      c.kv = std::make_shared<file_kv_store>(url->path, prefix + ".");
    } else {
      redis_kv_store::options o;
      o.host = url->host;
      o.port = url->port;
      o.password = url->password.empty() ? env(get, "OPTCAST_REDIS_PASSWORD") : url->password;
      o.prefix = (url->path.empty() ? std::string("optcast") : url->path) + "/" + prefix;
      o.connect_timeout = c.bootstrap_timeout;
      c.kv = std::make_shared<redis_kv_store>(std::move(o));
    }
  }
  c.store_fd = static_cast<int>(env_int(get, "OPTCAST_STORE_FD", -1, -1, 1 << 20));
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
  unexpected_limit = static_cast<std::size_t>(env_int(get, "OPTCAST_UNEXPECTED_LIMIT", static_cast<long long>(unexpected_limit), 0,
                                                        std::numeric_limits<long long>::max()));
  unexpected_peer_limit = static_cast<std::size_t>(env_int(get, "OPTCAST_UNEXPECTED_PEER_LIMIT",
                                                             static_cast<long long>(unexpected_peer_limit), 0,
                                                             std::numeric_limits<long long>::max()));
}

job::job(const asio::any_io_executor& events, const job_config& cfg) : cfg_(cfg) {
  if (cfg.size < 1 || cfg.rank < 0 || cfg.rank >= cfg.size)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "rank " + std::to_string(cfg.rank) + " is not in a job of " + std::to_string(cfg.size));
  if (cfg.ports < 1) throw setup_error(make_error_code(errc::invalid_argument), "ports must be at least 1");
  if (cfg.encrypt && cfg.secret.empty())
    throw setup_error(make_error_code(errc::invalid_argument),
                      "OPTCAST_ENCRYPT needs a job secret (OPTCAST_SECRET or OPTCAST_SECRET_FILE): the connections' keys come from it");
  // Where this rank listens, when the environment says: checked before anything else,
  // so that a bad OPTCAST_IFNAME or OPTCAST_HOST is what this rank reports.
  if (!cfg.host.empty() || !cfg.ifname.empty()) host_ = choose_host({});
  if (cfg.kv) {
    join_kv(events);
    return;
  }
  if (cfg.pmix) {
    // The launcher names the job; each rank advertises an interface of its host's.
    id_ = cfg.job_id;
    if (host_.empty()) host_ = choose_host({});
    pmix_events_ = std::make_unique<asio::any_io_executor>(events);
    return;
  }
  if (cfg.rank == 0 && cfg.host_store) {
    std::uint64_t id = cfg.job_id;
    while (id == 0) id = (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    if (cfg.store_fd >= 0) {
      server_ = std::make_unique<store::server>(cfg.store_fd, cfg.size, id, cfg.secret);
    } else if (launcher::resolve(cfg.store.host, 0) == cfg.store.host) {
      server_ = std::make_unique<store::server>(cfg.store.host, cfg.store.port, cfg.size, id, cfg.secret);
    } else {
      // A name (a Slurm node's, MASTER_ADDR) may mean loopback here and an interface's
      // address elsewhere (Debian's "127.0.1.1 host" line): every address, as
      // torch.distributed's store does, so that the other hosts reach it either way.
      try {
        server_ = std::make_unique<store::server>("::", cfg.store.port, cfg.size, id, cfg.secret);
      } catch (const setup_error&) {  // a kernel without IPv6
        server_ = std::make_unique<store::server>("0.0.0.0", cfg.store.port, cfg.size, id, cfg.secret);
      }
      log(log_level::info, "the store listens on every address, port " + std::to_string(cfg.store.port) + " (the ranks reach it as " +
                               cfg.store.str() + ")");
    }
    server_->expect_all_within(cfg.bootstrap_timeout);
    if (cfg.secret.empty() && cfg.size > 1)
      log(log_level::warn, "no job secret (OPTCAST_SECRET or OPTCAST_SECRET_FILE): any process that reaches the store at " +
                               cfg.store.str() + " can join this job or disturb it");
  }
  // A name with addresses of both families: the family asked for (IPv4 unless 6), as
  // for the address this rank advertises, so that a job does not mix them by accident.
  std::string why;
  auto store_ip = launcher::resolve(cfg.store.host, cfg.family, &why);
  if (!store_ip) throw setup_error(store_ip.error(), "the store's host: " + why);
  client_ = std::make_unique<store::client>(events, store::address{*store_ip, cfg.store.port}, cfg.rank, cfg.size,
                                            cfg.bootstrap_timeout, cfg.secret, cfg.job_id);
  id_ = client_->job_id();
  if (cfg.job_id && cfg.job_id != id_)
    throw setup_error(make_error_code(errc::protocol_violation),
                      "OPTCAST_JOB_ID differs from the job id the store hands out: another job's store?");
  if (host_.empty()) host_ = choose_host(client_->local_host());
}

std::string job::choose_host(const std::string& toward_store) const {
  const auto& cfg = cfg_;
  const std::string me = "rank " + std::to_string(cfg.rank);
  std::string why;
  if (!cfg.host.empty()) {
    auto a = launcher::resolve(cfg.host, cfg.family, &why);
    if (!a) throw setup_error(a.error(), "OPTCAST_HOST: " + why);
    log(log_level::info, me + " advertises " + *a + (*a == cfg.host ? std::string(" (OPTCAST_HOST)") : " (OPTCAST_HOST=" + cfg.host + ")"));
    return *a;
  }
  if (!cfg.ifname.empty()) {
    auto a = launcher::choose_address(cfg.ifname, cfg.family, &why);
    if (!a) throw setup_error(a.error(), me + ": " + why);
    log(log_level::info, me + " advertises " + *a + " (OPTCAST_IFNAME=" + cfg.ifname + ")");
    return *a;
  }
  const bool named = launcher::resolve(cfg.store.host, 0) != cfg.store.host;
  const bool local_name = cfg.store.host == "localhost" || cfg.store.host.starts_with("localhost.") || cfg.store.host == "ip6-localhost";
  if (!toward_store.empty() && !(launcher::is_loopback(toward_store) && named && !local_name)) {
    log(log_level::info, me + " advertises " + toward_store + " (its address toward the store; OPTCAST_IFNAME chooses)");
    return toward_store;
  }
  // No store connection to go by, or one over loopback only because the store's host name
  // means loopback here: the first interface that is up and not loopback.
  auto a = launcher::choose_address("", cfg.family, &why);
  const std::string host = a ? *a : std::string("127.0.0.1");
  log(log_level::info, me + " advertises " + host + " (the first interface up that is not loopback; OPTCAST_IFNAME chooses)");
  return host;
}

void job::join_kv(const asio::any_io_executor& events) {
  auto& kv = *cfg_.kv;
  auto n = kv.add(k_joined, 1);
  if (!n) throw setup_error(n.error(), "the job's store refused add('" + k_joined + "'): " + store_says(kv, n.error()));
  if (*n > cfg_.size)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "the job's store already served a job: " + std::to_string(*n - 1) + " ranks counted themselves in before rank " +
                          std::to_string(cfg_.rank) + " of a job of " + std::to_string(cfg_.size) +
                          " (key '" + k_joined + "'); give each job a store, or a key prefix, of its own");
  if (cfg_.job_id) {
    id_ = cfg_.job_id;
  } else if (cfg_.rank == 0) {
    while (id_ == 0) id_ = (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    if (auto r = kv.set(k_job, std::to_string(id_)); !r)
      throw setup_error(r.error(), "cannot publish the job id in the job's store: " + store_says(kv, r.error()));
  } else {
    auto v = kv.get(k_job, cfg_.bootstrap_timeout);
    if (!v)
      throw setup_error(v.error(), v.error() == errc::timeout ? "rank 0 did not publish the job id in the job's store within " +
                                                                    std::to_string(cfg_.bootstrap_timeout.count()) + " ms"
                                                              : "cannot read the job id from the job's store: " + store_says(kv, v.error()));
    try {
      id_ = std::stoull(*v);
    } catch (...) {
      throw setup_error(make_error_code(errc::protocol_violation), "the job's store holds no job id at '" + k_job + "'");
    }
  }
  if (host_.empty()) host_ = choose_host({});
  if (cfg_.rank == 0 && cfg_.secret.empty() && cfg_.size > 1)
    log(log_level::warn, "no job secret: any process that reaches this job's ports and knows its id can disturb it");
  kv_ = std::make_unique<kv_side>();
  kv_->kv = cfg_.kv;
  kv_->events = events;
  kv_->bootstrap_timeout = cfg_.bootstrap_timeout;
  kv_->worker = std::thread([s = kv_.get()] { s->run(); });
}

job::~job() { leave(std::chrono::milliseconds(0)); }

result<void> job::publish(std::string key, std::string value, std::chrono::milliseconds timeout) {
  if (cfg_.pmix) {
    std::string why;
    auto r = pmix::publish(key, value, timeout, &why);
    if (!r) log(log_level::error, why);
    return r;
  }
  if (kv_) return cfg_.kv->set(key, value);
  return client_->set_wait(std::move(key), std::move(value), timeout);
}

result<std::vector<std::string>> job::lookup_all(std::vector<std::string> keys, std::chrono::milliseconds timeout) {
  if (cfg_.pmix) {  // collected by the fence of every rank's publish
    std::vector<std::string> out;
    for (const auto& k : keys) {
      std::string why;
      auto v = pmix::get(k, &why);
      if (!v) {
        log(log_level::error, why);
        return fail(v.error());
      }
      out.push_back(std::move(*v));
    }
    return out;
  }
  if (!kv_) return client_->get_all_wait(std::move(keys), timeout);
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> out;
  for (const auto& k : keys) {
    auto v = kv_->get_until(k, until);
    if (!v) return fail(v.error());
    out.push_back(std::move(*v));
  }
  return out;
}

void job::lookup(std::string key, std::function<void(result<std::string>)> done) {
  if (cfg_.pmix) {
    std::string why;
    auto v = pmix::get(key, &why);
    if (!v) log(log_level::error, why);
    asio::post(*pmix_events_, [done = std::move(done), v = std::move(v)] { done(v); });
    return;
  }
  if (!kv_) return client_->get(std::move(key), std::move(done));
  kv_->push([s = kv_.get(), key = std::move(key), done = std::move(done)] {
    auto v = s->get_until(key, std::chrono::steady_clock::now() + s->bootstrap_timeout);
    asio::post(s->events, [done, v = std::move(v)] { done(v); });
  });
}

void job::on_failure(std::function<void(int)> lost, std::function<void(std::string)> gone,
                     std::function<void(std::uint64_t, std::string)> failed) {
  if (cfg_.pmix) return;  // nobody to tell: data connections and the launcher find dead ranks
  if (kv_) {  // no store connection to lose, no store to say who died
    std::lock_guard l(kv_->mu);
    kv_->failed = std::move(failed);
    return;
  }
  client_->on_events(
      std::move(lost),
      [gone = std::move(gone)](std::error_code ec) {
        gone("lost the connection to the store on rank 0 (" + ec.message() + "): rank 0 died?");
      },
      std::move(failed));
}

void job::report_failure(int code, std::string why) {
  if (left_) return;
  if (cfg_.pmix) {  // said in its goodbye, for the job's outcome
    if (!pmix_failure_) pmix_failure_ = std::to_string(code) + " " + why;
    return;
  }
  if (!kv_) return client_->report_failure(static_cast<std::uint32_t>(code), std::move(why));
  {
    std::lock_guard l(kv_->mu);
    if (kv_->reported) return;
    kv_->reported = true;
  }
  // The first to count itself in writes the job's failure; the others' are consequences.
  kv_->push([s = kv_.get(), code, why = std::move(why)] {
    if (auto n = s->kv->add(k_failures, 1); n && *n == 1) s->kv->set(k_failure, std::to_string(code) + " " + why);
  });
}

void job::report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck) {
  if (left_) return;
  if (cfg_.pmix) return asio::post(*pmix_events_, std::move(nobody_stuck));
  if (!kv_) return client_->report_stall(seq, std::move(why), std::move(nobody_stuck), call_of_ ? call_of_(seq) : std::string());
  // Nobody to ask whether the others are alive: the collective's deadline decides.
  asio::post(kv_->events, std::move(nobody_stuck));
}

void job::answer_inquiries(std::function<std::string(std::uint32_t)> call_of) {
  call_of_ = call_of;
  if (client_) client_->answer_inquiries(std::move(call_of));
}

result<void> job::leave_kv(std::chrono::milliseconds wait, bool failed) {
  {
    std::lock_guard l(kv_->mu);
    kv_->closing = true;
    kv_->failed = nullptr;
  }
  kv_->stopping = true;  // a lookup still waiting is for a fabric that is closing
  kv_->cv.notify_all();
  kv_->worker.join();  // after the failure report, if one is queued
  auto& kv = *cfg_.kv;
  if (auto r = kv.set(bye_key(cfg_.rank), failed ? "failed" : "ok"); !r) {
    outcome_detail_ = "cannot say goodbye in the job's store: " + store_says(kv, r.error());
    return fail(r.error());
  }
  std::vector<std::string> keys;
  for (int r = 0; r < cfg_.size; ++r) keys.push_back(bye_key(r));
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (auto f = kv.get(k_failure, std::chrono::milliseconds(0))) {
      auto [code, why] = kv_side::parse_failure(*f);
      outcome_detail_ = why;
      return fail(told_error(code));
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    auto all = kv.wait(keys, std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(100)));
    if (all) return {};
    if (all.error() != errc::timeout) {
      outcome_detail_ = "cannot learn the job's outcome from its store: " + store_says(kv, all.error());
      return fail(all.error());
    }
    if (left.count() <= 0) {
      outcome_detail_ = "not every rank finished within " + std::to_string(wait.count()) +
                        " ms of this rank's end (a rank stalled, died, or is still in a collective)";
      return fail(errc::timeout);
    }
  }
}

// Every rank's goodbye (ok, or its failure) collected by one more fence: the job's
// outcome is its first failure by rank. Not from the destructor of a job never left (a
// fence the others may never reach).
result<void> job::leave_pmix(std::chrono::milliseconds wait, bool failed) {
  if (wait.count() == 0) {
    outcome_detail_ = "left without waiting for the others";
    return fail(errc::timeout);
  }
  const std::string mine = pmix_failure_ ? "failed " + *pmix_failure_ : failed ? std::string("failed") : std::string("ok");
  std::string why;
  if (auto r = pmix::publish(bye_key(cfg_.rank), mine, wait, &why); !r) {
    outcome_detail_ = why;
    return fail(r.error());
  }
  for (int r = 0; r < cfg_.size; ++r) {
    auto v = pmix::get(bye_key(r), &why);
    if (!v) {
      outcome_detail_ = why;
      return fail(v.error());
    }
    if (v->starts_with("failed")) {
      auto [code, text] = kv_side::parse_failure(v->size() > 7 ? v->substr(7) : std::string("0"));
      outcome_detail_ = text.empty() ? "rank " + std::to_string(r) + " failed" : text;
      return fail(code ? told_error(code) : make_error_code(errc::peer_lost));
    }
  }
  return {};
}

result<void> job::leave(std::chrono::milliseconds wait, bool failed, last_call last) noexcept {
  if (left_) return outcome_;
  left_ = true;
  if (cfg_.pmix) {
    try {
      outcome_ = leave_pmix(wait, failed);
    } catch (const std::exception& e) {
      outcome_detail_ = e.what();
      outcome_ = fail(errc::protocol_violation);
    }
    return outcome_;
  }
  if (kv_) {
    try {
      outcome_ = leave_kv(wait, failed);
    } catch (const std::exception& e) {
      outcome_detail_ = std::string("the job's store threw: ") + e.what();
      outcome_ = fail(errc::protocol_violation);
    }
    if (kv_->worker.joinable()) kv_->worker.join();
    kv_.reset();
    return outcome_;
  }
  client_->on_events(nullptr, nullptr);
  outcome_ = client_->bye(wait, &outcome_detail_, last.seq, std::move(last.signature));
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
