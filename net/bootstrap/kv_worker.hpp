// The thread that talks to a program's store for one rank (kv_rendezvous.cpp). Such a
// store answers what it is asked and tells nobody anything, so this thread asks: for the
// job's failures (a numbered list, each saying whom it is about), for the ranks found
// lost, and for stall inquiries, every look_every. A stall is looked into as the TCP
// store does it, through keys: the rank that reports it first opens an inquiry, every
// rank's worker answers it from its rank's event loop (a stopped process answers
// nothing), and after the store's inquiry window the opener names the ranks that neither
// answered, nor wait in the same collective, nor have left: each is written down as lost,
// and every rank's worker tells its fabric, which goes on without it where it can
// (optcast/survive.hpp), as the TCP store's word of a dead rank does.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include "optcast/log.hpp"
#include "optcast/net/kv_store.hpp"
#include "rendezvous.hpp"
#include "store_protocol.hpp"

namespace optcast::kv_side {

// The keys optcast keeps in a program's store.
const std::string k_joined = "optcast/joined";
const std::string k_job = "optcast/job";
// Failures, numbered from 1 (the count taken with add): the n-th "CODE WHY", and whom it
// is about ("R" or "R, S": the rank that failed, or the ranks an inquiry found silent),
// written before it. The job's failure is the first not about excused ranks alone.
const std::string k_failures = "optcast/failures";
inline std::string failure_key(std::int64_t n) { return "optcast/failure/" + std::to_string(n); }
inline std::string failure_about_key(std::int64_t n) { return "optcast/failure/" + std::to_string(n) + "/about"; }
// Ranks the survivors went on without (optcast::shrink): their goodbye is not waited for,
// and what they do or is said of them fails the job no more (as optcast's TCP store does).
inline std::string excused_key(int r) { return "optcast/excused/" + std::to_string(r); }
// Stall inquiries: how many were opened, and the k-th's collective and opener ("SEQ
// RANK"), each rank's answer to it, and the ranks that reported it themselves.
const std::string k_inquiries = "optcast/inquiries";  // the count, taken with add
inline std::string inquiry_key(std::int64_t k) { return "optcast/inquiry/" + std::to_string(k); }
inline std::string answer_key(std::int64_t k, int r) { return "optcast/inquiry/" + std::to_string(k) + "/answer/" + std::to_string(r); }
inline std::string stalled_key(std::int64_t k, int r) { return "optcast/inquiry/" + std::to_string(k) + "/stalled/" + std::to_string(r); }
// Ranks an inquiry found silent, the k-th "RANK CODE WHY": each names one rank, taken for
// lost on every rank (as optcast's TCP store names a dead one), so that the others may
// go on without it (optcast/survive.hpp) rather than the job failing as a whole.
const std::string k_losses = "optcast/losses";  // the count, taken with add
inline std::string loss_key(std::int64_t k) { return "optcast/loss/" + std::to_string(k); }
// How often the worker looks for the job's failure and for inquiries: an inquiry's
// answers must be in within its window, well before the deadline.
inline constexpr auto look_every = std::chrono::milliseconds(50);

// What went wrong with the program's store, in its words if it has some.
inline std::string store_says(const kv_store& kv, const std::error_code& ec) {
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
  std::int64_t failures_seen = 0;
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
  std::function<void(std::string)> gone;  // the store failed
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
      if (failed && !told && !reported) {
        auto lost = failed;
        lock.unlock();
        std::optional<std::pair<std::uint64_t, std::string>> job_failed;
        guarded([&] {
          // A named loss is written before the failure it causes: seen first. Such a
          // failure is the job's outcome, at leave(); the ranks named are lost, the rest go on.
          look_for_losses(lost);
          job_failed = next_job_failure(failures_seen, &loss_whys);
        });
        lock.lock();
        if (job_failed && failed && !told && !reported) {
          told = true;
          asio::post(events, [f = failed, code = job_failed->first, why = job_failed->second] { f(code, -1, why); });
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

  // Entries seen + 1, seen + 2, ... of a numbered list in the store, each handed to `each`
  // in order (k + 1 looked for too: a rank that died between counting and writing leaves
  // a hole).
  template <class Key, class Each>
  void scan_numbered(std::int64_t& seen, Key key_of, Each each) {
    for (bool found = true; found;) {
      found = false;
      for (std::int64_t k = seen + 1; k <= seen + 2 && !found; ++k) {
        auto v = kv->get(key_of(k), std::chrono::milliseconds(0));
        if (!v) continue;
        found = true;
        seen = k;
        each(k, *v);
      }
    }
  }

  // The ranks found silent since the last look, told to this rank's loop.
  void look_for_losses(const std::function<void(std::uint64_t, int, std::string)>& lost) {
    scan_numbered(losses_seen, loss_key, [&](std::int64_t, const std::string& v) {
      int r = -1, at = 0;
      unsigned long long code = 0;
      if (std::sscanf(v.c_str(), "%d %llu %n", &r, &code, &at) < 2 || r < 0 || r >= size || at <= 0) return;
      loss_whys.insert(v.substr(static_cast<std::size_t>(at)));
      asio::post(events, [lost, r, code = std::uint64_t{code}, why = v.substr(static_cast<std::size_t>(at))] { lost(code, r, why); });
    });
  }

  // The inquiries opened since the last look (each answered from this rank's loop, with
  // `answer`), into open_for.
  void discover(const std::function<std::string(std::uint32_t)>& answer) {
    scan_numbered(inquiries_seen, inquiry_key, [&](std::int64_t k, const std::string& v) {
      std::uint32_t seq = 0;
      int opener = -1;
      if (std::sscanf(v.c_str(), "%u %d", &seq, &opener) != 2) return;
      auto& ks = open_for[seq];
      if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
      if (opener == rank || !answer) return;
      // That the loop runs is the answer; the worker writes it at its next look.
      asio::post(events, [answer, box = answered, k, seq] {
        (void)answer(seq);
        std::lock_guard l(box->mu);
        box->ks.push_back(k);
      });
    });
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
    // The job's outcome, unless the others go on without them (excuse_ranks).
    write_failure(silent, code, why);
  }

  // A failure about `about` ("R" or "R, S"), numbered in the store.
  void write_failure(const std::string& about, std::uint64_t code, const std::string& why) {
    if (auto n = kv->add(k_failures, 1); n) {
      (void)kv->set(failure_about_key(*n), about);
      (void)kv->set(failure_key(*n), std::to_string(code) + " " + why);
    }
  }

  // The job's failure among those written since `seen`: the first not about excused ranks
  // alone (nor, with `losses`, a named loss's, which fails only the rank it names).
  std::optional<std::pair<std::uint64_t, std::string>> next_job_failure(std::int64_t& seen, const std::set<std::string>* losses = nullptr) {
    std::optional<std::pair<std::uint64_t, std::string>> out;
    scan_numbered(seen, failure_key, [&](std::int64_t n, const std::string& v) {
      auto f = parse_failure(v);
      if (!out && !(losses && losses->count(f.second)) && !about_excused(n)) out = std::move(f);
    });
    return out;
  }

  // Failure n is about excused ranks alone.
  bool about_excused(std::int64_t n) {
    auto about = kv->get(failure_about_key(n), std::chrono::milliseconds(0));
    if (!about || about->empty()) return false;
    for (std::size_t at = 0; at < about->size();) {
      const auto comma = std::min(about->find(", ", at), about->size());
      if (!excused(about->substr(at, comma - at))) return false;
      at = comma + 2;
    }
    return true;
  }
  bool excused(const std::string& r) {
    int v = -1;
    if (std::sscanf(r.c_str(), "%d", &v) != 1 || v < 0 || v >= size) return false;
    return static_cast<bool>(kv->get(excused_key(v), std::chrono::milliseconds(0)));
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
      gone = nullptr;
    }
    stopping = true;  // a lookup still waiting is for a fabric that is closing
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }
};

}  // namespace optcast::kv_side
