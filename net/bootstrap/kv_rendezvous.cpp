// Meeting through a store of the program's own (optcast/net/kv_store.hpp; file:// and
// redis:// are two). Such a store answers what it is asked and tells nobody anything: no
// connection reports a dead rank (the data connections' ends and the collectives'
// deadlines do), and the job's first failure is a key a worker thread polls for. A stall
// is looked into as the TCP store does it, through keys: the rank that reports it first
// opens an inquiry, every rank's worker answers it from its rank's event loop (a stopped
// process answers nothing), and after the store's inquiry window the opener names the
// ranks that neither answered, nor wait in the same collective, nor have left: each is
// written down as lost, and every rank's worker tells its fabric, which goes on without
// it where it can (optcast/survive.hpp), as the TCP store's word of a dead rank does.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <cstdio>
#include <map>
#include <set>
#include <thread>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include "optcast/fabric_base.hpp"
#include "optcast/log.hpp"
#include "rendezvous.hpp"
#include "store_protocol.hpp"

namespace optcast {

namespace {

// The keys optcast keeps in a program's store.
const std::string k_joined = "optcast/joined";
const std::string k_job = "optcast/job";
const std::string k_failures = "optcast/failures";
const std::string k_failure = "optcast/failure";
// Stall inquiries: how many were opened, and the k-th's collective and opener ("SEQ
// RANK"), each rank's answer to it, and the ranks that reported it themselves.
const std::string k_inquiries = "optcast/inquiries";  // the count, taken with add
std::string inquiry_key(std::int64_t k) { return "optcast/inquiry/" + std::to_string(k); }
std::string answer_key(std::int64_t k, int r) { return "optcast/inquiry/" + std::to_string(k) + "/answer/" + std::to_string(r); }
std::string stalled_key(std::int64_t k, int r) { return "optcast/inquiry/" + std::to_string(k) + "/stalled/" + std::to_string(r); }
// Ranks an inquiry found silent, the k-th "RANK CODE WHY": each names one rank, taken for
// lost on every rank (as optcast's TCP store names a dead one), so that the others may
// go on without it (optcast/survive.hpp) rather than the job failing as a whole.
const std::string k_losses = "optcast/losses";  // the count, taken with add
std::string loss_key(std::int64_t k) { return "optcast/loss/" + std::to_string(k); }
// How often the worker looks for the job's failure and for inquiries: an inquiry's
// answers must be in within its window, well before the deadline.
constexpr auto look_every = std::chrono::milliseconds(50);

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
// and for stall inquiries between them (every look_every), since such a store cannot
// tell anyone anything.
struct worker_side {
  std::shared_ptr<kv_store> kv;
  asio::any_io_executor events;
  std::chrono::milliseconds bootstrap_timeout;
  int rank = 0, size = 1;
  // Inquiries: this rank's loop proves it runs by answering (answer_inquiries); those seen
  // so far (collective -> inquiry), and those this rank opened, each decided when due.
  std::function<std::string(std::uint32_t)> call_of;
  std::int64_t inquiries_seen = 0;
  std::int64_t losses_seen = 0;
  std::set<std::string> loss_whys;  // of the losses seen: a job failure that is one of them is no job-wide one
  bool failure_was_loss = false;
  std::map<std::uint32_t, std::vector<std::int64_t>> open_for;
  struct opened {
    std::int64_t k;
    std::uint32_t seq;
    std::chrono::steady_clock::time_point due;
    std::function<void()> nobody_stuck;
  };
  std::vector<opened> mine;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool closing = false;               // drain the tasks, then stop
  std::atomic<bool> stopping{false};  // lookups give up
  std::function<void(std::uint64_t, int, std::string)> failed;
  bool reported = false;  // this rank failed: it is not told of the job's failure
  bool told = false;
  std::thread worker;
  // The inquiries this rank's loop has answered, for the worker to write: shared with the
  // answers posted to the loop, which may run after the worker has gone.
  struct answered_box {
    std::mutex mu;
    std::vector<std::int64_t> ks;
  };
  std::shared_ptr<answered_box> answered = std::make_shared<answered_box>();

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
      cv.wait_for(lock, look_every, [&] { return closing || !tasks.empty(); });
      if (!tasks.empty()) {
        auto t = std::move(tasks.front());
        tasks.pop_front();
        lock.unlock();
        guarded(t);
        lock.lock();
        continue;
      }
      if (closing) return;
      if (failed && !told && !reported && !failure_was_loss) {
        auto lost = failed;
        lock.unlock();
        result<std::string> v = fail(errc::timeout);
        guarded([&] { v = kv->get(k_failure, std::chrono::milliseconds(0)); });
        // A named loss is written before the job's failure it causes: seen now, if so.
        if (v) guarded([&] { look_for_losses(lost); });
        lock.lock();
        if (v && failed && !told && !reported) {
          auto parsed = parse_failure(*v);  // not a structured binding: clang 14 cannot capture one
          auto code = parsed.first;
          auto why = std::move(parsed.second);
          if (loss_whys.count(why)) {
            failure_was_loss = true;  // the job's outcome, at leave(); the ranks named are lost, the rest go on
          } else {
            told = true;
            asio::post(events, [f = failed, code, why] { f(code, -1, why); });
          }
        }
      }
      if (!told && !reported) {
        auto answer = call_of;
        auto lost = failed;
        lock.unlock();
        guarded([&] { look_into_stalls(answer); });
        if (lost) guarded([&] { look_for_losses(lost); });
        lock.lock();
      }
    }
  }

  // The inquiries opened since the last look, answered from this rank's loop; and this
  // rank's own, decided once their window has passed. Inquiry k is looked for once k - 1
  // was seen (k + 1 too: an opener that died between counting and writing its inquiry
  // leaves a hole).
  void look_into_stalls(const std::function<std::string(std::uint32_t)>& answer) {
    {
      std::vector<std::int64_t> done;
      {
        std::lock_guard l(answered->mu);
        done.swap(answered->ks);
      }
      for (auto k : done) (void)kv->set(answer_key(k, rank), "1");
    }
    discover(answer);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = mine.begin(); it != mine.end();) {
      if (it->due > now) {
        ++it;
        continue;
      }
      decide(*it);
      it = mine.erase(it);
    }
  }

  // The ranks found silent since the last look, told to this rank's loop (k + 1 looked
  // for too: a rank that died between counting and writing leaves a hole).
  void look_for_losses(const std::function<void(std::uint64_t, int, std::string)>& lost) {
    for (int found = 1; found;) {
      found = 0;
      for (std::int64_t k = losses_seen + 1; k <= losses_seen + 2 && !found; ++k) {
        auto v = kv->get(loss_key(k), std::chrono::milliseconds(0));
        if (!v) continue;
        found = 1;
        losses_seen = k;
        int r = -1, at = 0;
        unsigned long long code = 0;
        if (std::sscanf(v->c_str(), "%d %llu %n", &r, &code, &at) < 2 || r < 0 || r >= size || at <= 0) continue;
        loss_whys.insert(v->substr(static_cast<std::size_t>(at)));
        asio::post(events, [lost, r, code = std::uint64_t{code}, why = v->substr(static_cast<std::size_t>(at))] { lost(code, r, why); });
      }
    }
  }

  // The inquiries opened since the last look (each answered from this rank's loop, with
  // `answer`), into open_for.
  void discover(const std::function<std::string(std::uint32_t)>& answer) {
    for (int found = 1; found;) {
      found = 0;
      for (std::int64_t k = inquiries_seen + 1; k <= inquiries_seen + 2 && !found; ++k) {
        auto v = kv->get(inquiry_key(k), std::chrono::milliseconds(0));
        if (!v) continue;
        found = 1;
        inquiries_seen = k;
        std::uint32_t seq = 0;
        int opener = -1;
        if (std::sscanf(v->c_str(), "%u %d", &seq, &opener) != 2) break;
        auto& ks = open_for[seq];
        if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
        if (opener == rank || !answer) break;
        // That the loop runs is the answer; the worker writes it at its next look.
        asio::post(events, [answer, box = answered, k, seq] {
          (void)answer(seq);
          std::lock_guard l(box->mu);
          box->ks.push_back(k);
        });
      }
    }
  }

  // The ranks that neither answered inquiry k, nor reported it, nor have left: each is
  // named lost, to every rank (this one at its next look), which goes on without it
  // where its fabric can (a fabric that cannot fails). Else nobody is stuck.
  void decide(const opened& o) {
    // Every inquiry into the same collective counts: two ranks may open one at once.
    const auto& ks = open_for[o.seq];
    std::string silent, waiting;
    for (int r = 0; r < size; ++r) {
      auto in_any = [&](auto key_of) {
        return std::any_of(ks.begin(), ks.end(), [&](std::int64_t k) { return static_cast<bool>(kv->get(key_of(k, r), std::chrono::milliseconds(0))); });
      };
      if (in_any(stalled_key))
        waiting += (waiting.empty() ? "" : ", ") + std::to_string(r);
      else if (r != rank && !in_any(answer_key) && !kv->get(bye_key(r), std::chrono::milliseconds(0)))
        silent += (silent.empty() ? "" : ", ") + std::to_string(r);
    }
    if (silent.empty()) {
      asio::post(events, o.nobody_stuck);
      return;
    }
    const auto code = static_cast<std::uint64_t>(errc::timeout);
    const std::string why = (silent.find(',') == std::string::npos ? "rank " : "ranks ") + silent +
                            " stopped responding: no answer in the job's store within " + std::to_string(store::proto::inquiry_window.count()) +
                            " ms while rank" + (waiting.find(',') == std::string::npos ? " " : "s ") + waiting + " waited in collective " +
                            std::to_string(o.seq) + " near its deadline (stopped, hung, or not calling it)";
    for (std::size_t at = 0; at < silent.size();) {
      const auto comma = std::min(silent.find(", ", at), silent.size());
      const std::string r = silent.substr(at, comma - at);
      at = comma + 2;
      if (auto n = kv->add(k_losses, 1); n) (void)kv->set(loss_key(*n), r + " " + std::to_string(code) + " " + why);
    }
    // The job's outcome: a file, Redis or program's store still counts the loss a failure.
    if (auto n = kv->add(k_failures, 1); n && *n == 1) (void)kv->set(k_failure, std::to_string(code) + " " + why);
  }

  // A stall of this rank's in collective seq: into the inquiry another opened for it, or a
  // new one.
  void stalled(std::uint32_t seq, std::function<void()> nobody_stuck, const std::function<std::string(std::uint32_t)>& answer) {
    discover(answer);
    if (auto it = open_for.find(seq); it != open_for.end() && !it->second.empty()) {
      (void)kv->set(stalled_key(it->second.front(), rank), "1");
      asio::post(events, std::move(nobody_stuck));  // the opener decides, and the job's failure says so
      return;
    }
    auto n = kv->add(k_inquiries, 1);
    if (!n || *n <= inquiries_seen) {  // a store whose count went back: none to open
      asio::post(events, std::move(nobody_stuck));
      return;
    }
    (void)kv->set(stalled_key(*n, rank), "1");
    (void)kv->set(inquiry_key(*n), std::to_string(seq) + " " + std::to_string(rank));
    open_for[seq].push_back(*n);
    mine.push_back({*n, seq, std::chrono::steady_clock::now() + store::proto::inquiry_window, std::move(nobody_stuck)});
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
      asio::post(s->events, [done, v = std::move(v)] { done(v); });
    });
  }

  // No store connection to lose, no store to say who died.
  void on_failure(std::function<void(int)>, std::function<void(std::string)>, std::function<void(std::uint64_t, int, std::string)> failed) override {
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
