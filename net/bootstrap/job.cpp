#include "optcast/net/job.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
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

// The keys optcast keeps in a program's store (job_config::kv).
const std::string k_joined = "optcast/joined";
const std::string k_job = "optcast/job";
const std::string k_failures = "optcast/failures";
const std::string k_failure = "optcast/failure";
std::string bye_key(int rank) { return "optcast/bye/" + std::to_string(rank); }

// Without optcast's store there is no connection whose local end names the interface
// toward the others: the first IPv4 address of an interface that is up and not loopback.
std::string default_host() {
  ifaddrs* all = nullptr;
  std::string host = "127.0.0.1";
  if (::getifaddrs(&all) != 0) return host;
  for (ifaddrs* a = all; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text)) {
      host = text;
      break;
    }
  }
  ::freeifaddrs(all);
  return host;
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
  if (cfg.kv) {
    join_kv(events);
    return;
  }
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

void job::join_kv(const asio::any_io_executor& events) {
  auto& kv = *cfg_.kv;
  auto n = kv.add(k_joined, 1);
  if (!n) throw setup_error(n.error(), "the job's store refused add('" + k_joined + "'): " + n.error().message());
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
      throw setup_error(r.error(), "cannot publish the job id in the job's store: " + r.error().message());
  } else {
    auto v = kv.get(k_job, cfg_.bootstrap_timeout);
    if (!v)
      throw setup_error(v.error(), v.error() == errc::timeout ? "rank 0 did not publish the job id in the job's store within " +
                                                                    std::to_string(cfg_.bootstrap_timeout.count()) + " ms"
                                                              : "cannot read the job id from the job's store: " + v.error().message());
    try {
      id_ = std::stoull(*v);
    } catch (...) {
      throw setup_error(make_error_code(errc::protocol_violation), "the job's store holds no job id at '" + k_job + "'");
    }
  }
  host_ = cfg_.host.empty() ? default_host() : cfg_.host;
  if (cfg_.host.empty()) log(log_level::info, "rank " + std::to_string(cfg_.rank) + " advertises " + host_ + " (job_config::host chooses)");
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
  if (kv_) return cfg_.kv->set(key, value);
  return client_->set_wait(std::move(key), std::move(value), timeout);
}

result<std::vector<std::string>> job::lookup_all(std::vector<std::string> keys, std::chrono::milliseconds timeout) {
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
  if (!kv_) return client_->get(std::move(key), std::move(done));
  kv_->push([s = kv_.get(), key = std::move(key), done = std::move(done)] {
    auto v = s->get_until(key, std::chrono::steady_clock::now() + s->bootstrap_timeout);
    asio::post(s->events, [done, v = std::move(v)] { done(v); });
  });
}

void job::on_failure(std::function<void(int)> lost, std::function<void(std::string)> gone,
                     std::function<void(std::uint64_t, std::string)> failed) {
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
  if (!kv_) return client_->report_stall(seq, std::move(why), std::move(nobody_stuck));
  // Nobody to ask whether the others are alive: the collective's deadline decides.
  asio::post(kv_->events, std::move(nobody_stuck));
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
    outcome_detail_ = "cannot say goodbye in the job's store: " + r.error().message();
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
      outcome_detail_ = "cannot learn the job's outcome from its store: " + all.error().message();
      return fail(all.error());
    }
    if (left.count() <= 0) {
      outcome_detail_ = "not every rank finished within " + std::to_string(wait.count()) +
                        " ms of this rank's end (a rank stalled, died, or is still in a collective)";
      return fail(errc::timeout);
    }
  }
}

result<void> job::leave(std::chrono::milliseconds wait, bool failed) noexcept {
  if (left_) return outcome_;
  left_ = true;
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
