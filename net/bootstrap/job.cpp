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
