// Meeting through a store of the program's own (optcast/net/kv_store.hpp; file:// and
// redis:// are two). Such a store answers what it is asked and tells nobody anything: no
// connection reports a dead rank (the collectives' deadlines do), nobody looks into a
// stall, and the job's first failure is a key a worker thread polls for.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include "optcast/fabric_base.hpp"
#include "optcast/log.hpp"
#include "rendezvous.hpp"

namespace optcast {

namespace {

// The keys optcast keeps in a program's store.
const std::string k_joined = "optcast/joined";
const std::string k_job = "optcast/job";
const std::string k_failures = "optcast/failures";
const std::string k_failure = "optcast/failure";

// What went wrong with the program's store, in its words if it has some.
std::string store_says(const kv_store& kv, const std::error_code& ec) {
  std::string s = kv.last_error();
  return s.empty() ? ec.message() : s;
}

// The program's store is the program's code: what it throws is logged, not fatal.
template <class F>
void guarded(F&& f) noexcept {
  try {
    f();
  } catch (const std::exception& e) {
    log(log_level::warn, std::string("the job's store threw: ") + e.what());
  } catch (...) {
    log(log_level::warn, "the job's store threw");
  }
}

// A program's store is called blocking: the lookups the event loop asks for, and the
// failure reports, run on this thread, which also looks for the job's first failure
// between them (every 100 ms), since such a store cannot tell anyone anything.
struct worker_side {
  std::shared_ptr<kv_store> kv;
  asio::any_io_executor events;
  std::chrono::milliseconds bootstrap_timeout;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool closing = false;               // drain the tasks, then stop
  std::atomic<bool> stopping{false};  // lookups give up
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

  // get(key) in slices, so that leaving does not wait for a key that never comes.
  result<std::string> get_until(const std::string& key, std::chrono::steady_clock::time_point until) {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      auto v = kv->get(key, std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(100)));
      if (v || v.error() != errc::timeout || left.count() <= 0 || stopping) return v;
    }
  }

  // The worker finishes what is queued (a failure report) and stops.
  void stop() {
    {
      std::lock_guard l(mu);
      closing = true;
      failed = nullptr;
    }
    stopping = true;  // a lookup still waiting is for a fabric that is closing
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }
};

class via_kv final : public rendezvous {
public:
  via_kv(const asio::any_io_executor& events, const job_config& cfg) : cfg_(cfg) {
    auto& kv = *cfg.kv;
    auto n = kv.add(k_joined, 1);
    if (!n) throw setup_error(n.error(), "the job's store refused add('" + k_joined + "'): " + store_says(kv, n.error()));
    if (*n > cfg.size)
      throw setup_error(make_error_code(errc::invalid_argument),
                        "the job's store already served a job: " + std::to_string(*n - 1) + " ranks counted themselves in before rank " +
                            std::to_string(cfg.rank) + " of a job of " + std::to_string(cfg.size) + " (key '" + k_joined +
                            "'); give each job a store, or a key prefix, of its own");
    if (cfg.job_id) {
      id_ = cfg.job_id;
    } else if (cfg.rank == 0) {
      id_ = draw_job_id();
      if (auto r = kv.set(k_job, std::to_string(id_)); !r)
        throw setup_error(r.error(), "cannot publish the job id in the job's store: " + store_says(kv, r.error()));
    } else {
      auto v = kv.get(k_job, cfg.bootstrap_timeout);
      if (!v)
        throw setup_error(v.error(), v.error() == errc::timeout ? "rank 0 did not publish the job id in the job's store within " +
                                                                      std::to_string(cfg.bootstrap_timeout.count()) + " ms"
                                                                : "cannot read the job id from the job's store: " + store_says(kv, v.error()));
      try {
        id_ = std::stoull(*v);
      } catch (...) {
        throw setup_error(make_error_code(errc::protocol_violation), "the job's store holds no job id at '" + k_job + "'");
      }
    }
    if (cfg.rank == 0 && cfg.secret.empty() && cfg.size > 1)
      log(log_level::warn, "no job secret: any process that reaches this job's ports and knows its id can disturb it");
    w_.kv = cfg.kv;
    w_.events = events;
    w_.bootstrap_timeout = cfg.bootstrap_timeout;
    w_.worker = std::thread([s = &w_] { s->run(); });
  }
  ~via_kv() override { w_.stop(); }

  std::uint64_t id() const noexcept override { return id_; }

  result<void> publish(std::string key, std::string value, std::chrono::milliseconds) override { return cfg_.kv->set(key, value); }

  result<std::vector<std::string>> lookup_all(std::vector<std::string> keys, std::chrono::milliseconds timeout) override {
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::vector<std::string> out;
    for (const auto& k : keys) {
      auto v = w_.get_until(k, until);
      if (!v) return fail(v.error());
      out.push_back(std::move(*v));
    }
    return out;
  }

  void lookup(std::string key, std::function<void(result<std::string>)> done) override {
    w_.push([s = &w_, key = std::move(key), done = std::move(done)] {
      auto v = s->get_until(key, std::chrono::steady_clock::now() + s->bootstrap_timeout);
      asio::post(s->events, [done, v = std::move(v)] { done(v); });
    });
  }

  // No store connection to lose, no store to say who died.
  void on_failure(std::function<void(int)>, std::function<void(std::string)>, std::function<void(std::uint64_t, std::string)> failed) override {
    std::lock_guard l(w_.mu);
    w_.failed = std::move(failed);
  }

  void report_failure(int code, std::string why) override {
    {
      std::lock_guard l(w_.mu);
      if (w_.reported) return;
      w_.reported = true;
    }
    // The first to count itself in writes the job's failure; the others' are consequences.
    w_.push([s = &w_, code, why = std::move(why)] {
      if (auto n = s->kv->add(k_failures, 1); n && *n == 1) s->kv->set(k_failure, std::to_string(code) + " " + why);
    });
  }

  // Nobody to ask whether the others are alive: the collective's deadline decides.
  void report_stall(std::uint32_t, std::string, std::function<void()> nobody_stuck) override {
    asio::post(w_.events, std::move(nobody_stuck));
  }

  result<void> leave(std::chrono::milliseconds wait, bool failed, last_call, std::string& detail) noexcept override {
    w_.stop();  // after the failure report, if one is queued
    try {
      return goodbye(wait, failed, detail);
    } catch (const std::exception& e) {
      detail = std::string("the job's store threw: ") + e.what();
      return fail(errc::protocol_violation);
    }
  }

private:
  result<void> goodbye(std::chrono::milliseconds wait, bool failed, std::string& detail) {
    auto& kv = *cfg_.kv;
    if (auto r = kv.set(bye_key(cfg_.rank), failed ? "failed" : "ok"); !r) {
      detail = "cannot say goodbye in the job's store: " + store_says(kv, r.error());
      return fail(r.error());
    }
    std::vector<std::string> keys;
    for (int r = 0; r < cfg_.size; ++r) keys.push_back(bye_key(r));
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
      if (auto f = kv.get(k_failure, std::chrono::milliseconds(0))) {
        auto [code, why] = parse_failure(*f);
        detail = why;
        return fail(told_error(code));
      }
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      auto all = kv.wait(keys, std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(100)));
      if (all) return {};
      if (all.error() != errc::timeout) {
        detail = "cannot learn the job's outcome from its store: " + store_says(kv, all.error());
        return fail(all.error());
      }
      if (left.count() <= 0) {
        detail = "not every rank finished within " + std::to_string(wait.count()) +
                 " ms of this rank's end (a rank stalled, died, or is still in a collective)";
        return fail(errc::timeout);
      }
    }
  }

  job_config cfg_;
  std::uint64_t id_ = 0;
  worker_side w_;
};

}  // namespace

std::unique_ptr<rendezvous> kv_rendezvous(const asio::any_io_executor& events, const job_config& cfg) {
  return std::make_unique<via_kv>(events, cfg);
}

}  // namespace optcast
