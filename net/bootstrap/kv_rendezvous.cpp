// Meeting through a store of the program's own (optcast/net/kv_store.hpp; file:// and
// redis:// are two). Such a store answers what it is asked and tells nobody anything: no
// connection reports a dead rank (the data connections' ends and the collectives'
// deadlines do); a worker thread (kv_worker.hpp) asks it for the job's failures, the
// ranks found lost and the stall inquiries to answer.
#include "optcast/fabric_base.hpp"
#include "kv_worker.hpp"

namespace optcast {

namespace {

using namespace kv_side;
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
    w_.rank = cfg.rank;
    w_.size = cfg.size;
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
      // A store that fails (not a key that is missing: a timeout) fails this rank as a
      // whole, in the store's words, first: the rank whose entry was asked for is not
      // the one to blame (it was, as lost, when rank 0's torch TCPStore went with rank 0).
      std::function<void(std::string)> gone;
      if (!v && v.error() != errc::timeout && !s->stopping) {
        std::lock_guard l(s->mu);
        gone = s->gone;
      }
      const std::string why = gone ? "the job's store failed: " + store_says(*s->kv, v.error()) : std::string();
      asio::post(s->events, [done, gone, why, v = std::move(v)] {
        if (gone) gone(why);
        done(v);
      });
    });
  }

  // No store connection to lose, no store to say who died: a failing store is said
  // (gone) where a lookup finds it.
  void on_failure(std::function<void(int)>, std::function<void(std::string)> gone, std::function<void(std::uint64_t, int, std::string)> failed) override {
    std::lock_guard l(w_.mu);
    w_.failed = std::move(failed);
    w_.gone = std::move(gone);
  }

  void report_failure(int code, std::string why) override {
    {
      std::lock_guard l(w_.mu);
      if (w_.reported) return;
      w_.reported = true;
    }
    // The first to count itself in writes the job's failure; the others' are consequences.
    w_.push([s = &w_, code, why = std::move(why)] {
      s->write_failure(std::to_string(s->rank), static_cast<std::uint64_t>(code), why);
    });
  }

  void excuse(const std::vector<int>& ranks) override {
    w_.push([s = &w_, ranks] {
      for (int r : ranks)
        if (r >= 0 && r < s->size && r != s->rank) (void)s->kv->set(excused_key(r), "1");
    });
  }

  void report_stall(std::uint32_t seq, std::string, std::function<void()> nobody_stuck) override {
    w_.push([s = &w_, seq, nobody_stuck = std::move(nobody_stuck)]() mutable {
      std::function<std::string(std::uint32_t)> answer;
      {
        std::lock_guard l(s->mu);
        answer = s->call_of;
      }
      s->stalled(seq, std::move(nobody_stuck), answer);
    });
  }

  // Set before the fabric's loop runs collectives; read by the worker.
  void answer_inquiries(std::function<std::string(std::uint32_t)> call_of) override {
    std::lock_guard l(w_.mu);
    w_.call_of = std::move(call_of);
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
    const auto until = std::chrono::steady_clock::now() + wait;
    for (std::int64_t seen = 0;;) {
      if (auto job_failed = w_.next_job_failure(seen)) {
        detail = job_failed->second;
        return fail(told_error(job_failed->first));
      }
      std::vector<std::string> keys;
      for (int r = 0; r < cfg_.size; ++r)
        if (r == cfg_.rank || !kv.get(excused_key(r), std::chrono::milliseconds(0))) keys.push_back(bye_key(r));
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
