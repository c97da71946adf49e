// Collective deadlines on an Asio event loop: one steady_timer serves them all.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

namespace optcast::detail {

class deadline_table {
public:
  using clock = std::chrono::steady_clock;

  // `on_warn(seq)`, when given, runs `warn_lead(timeout)` before a deadline (when that
  // is positive): the fabrics ask the store for a stall's root cause there, so that the
  // answer is in by the deadline itself (common/stall.hpp).
  deadline_table(const asio::any_io_executor& ex, std::function<void(std::uint32_t seq)> on_expire,
                 std::function<void(std::uint32_t seq)> on_warn = nullptr,
                 std::function<clock::duration(clock::duration)> warn_lead = nullptr)
      : timer_(ex), on_expire_(std::move(on_expire)), on_warn_(std::move(on_warn)), warn_lead_(std::move(warn_lead)) {}
  ~deadline_table() { *alive_ = false; }

  // On a loop that only the fabric runs, nothing needs the loop to run out of work: the
  // timer then stays set when the table empties and when a later deadline arrives (it
  // fires early, finds nothing due and moves on), which spares two timerfd_settime calls
  // per collective.
  void keep_idle_timer() noexcept { keep_idle_ = true; }
  deadline_table(const deadline_table&) = delete;
  deadline_table& operator=(const deadline_table&) = delete;

  std::uint64_t arm(std::uint32_t seq, std::chrono::nanoseconds timeout) {
    const auto t = std::chrono::duration_cast<clock::duration>(timeout);
    const auto when = clock::now() + t;
    entry e{++last_token_, seq, when, std::nullopt};
    if (on_warn_ && warn_lead_) {
      if (const auto lead = warn_lead_(t); lead > clock::duration::zero() && lead < t) e.warning = when - lead;
    }
    live_.push_back(e);
    rearm_if_moved();
    return e.token;
  }

  void disarm(std::uint64_t token) noexcept {
    const auto it = std::find_if(live_.begin(), live_.end(), [&](const entry& e) { return e.token == token; });
    if (it == live_.end()) return;
    *it = live_.back();
    live_.pop_back();
    // Keep the timer on the nearest entry, and idle when there is none, so that an
    // application's io_context.run() returns once its work is done.
    rearm_if_moved();
  }

private:
  // A fabric has a handful of calls in flight, each arming and disarming a deadline:
  // a flat vector scanned whole costs less than a tree's nodes (a malloc and a free each).
  struct entry {
    std::uint64_t token;
    std::uint32_t seq;
    clock::time_point deadline;
    std::optional<clock::time_point> warning;  // before the deadline, until it fired
  };
  // What fires next, and the order of events at the same instant (arming order, a
  // warning before its deadline).
  struct key {
    clock::time_point when;
    std::uint64_t token;
    bool warning;
    bool operator<(const key& o) const noexcept {
      if (when != o.when) return when < o.when;
      if (token != o.token) return token < o.token;
      return warning < o.warning;
    }
    bool operator==(const key& o) const noexcept { return when == o.when && token == o.token && warning == o.warning; }
  };
  static key next_of(const entry& e) noexcept { return e.warning ? key{*e.warning, e.token, true} : key{e.deadline, e.token, false}; }
  // The live entry that fires first (live_ not empty).
  std::size_t nearest() const noexcept {
    std::size_t best = 0;
    for (std::size_t i = 1; i < live_.size(); ++i)
      if (next_of(live_[i]) < next_of(live_[best])) best = i;
    return best;
  }

  void rearm_if_moved() {
    if (live_.empty()) {
      if (keep_idle_) return;
      if (armed_) timer_.cancel();
      armed_.reset();
      return;
    }
    const key first = next_of(live_[nearest()]);
    if (armed_ && *armed_ == first) return;
    if (keep_idle_ && armed_ && armed_->when <= first.when) return;
    armed_ = first;
    timer_.expires_at(first.when);
    timer_.async_wait([this, alive = alive_](std::error_code ec) {
      if (!*alive || ec) return;  // destroyed, or superseded by a nearer entry
      expire();
    });
  }

  void expire() {
    armed_.reset();
    const auto now = clock::now();
    while (!live_.empty()) {
      const std::size_t i = nearest();
      const key k = next_of(live_[i]);
      if (k.when > now) break;
      const std::uint32_t seq = live_[i].seq;
      auto alive = alive_;
      if (k.warning) {
        live_[i].warning.reset();
        on_warn_(seq);  // may arm or disarm others
      } else {
        live_[i] = live_.back();
        live_.pop_back();
        on_expire_(seq);  // may arm or disarm others, or destroy us with the fabric
      }
      if (!*alive) return;
    }
    rearm_if_moved();
  }

  asio::steady_timer timer_;
  std::function<void(std::uint32_t)> on_expire_;
  std::function<void(std::uint32_t)> on_warn_;
  std::function<clock::duration(clock::duration)> warn_lead_;
  std::vector<entry> live_;
  std::optional<key> armed_;  // the entry the timer waits for
  std::uint64_t last_token_ = 0;
  bool keep_idle_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace optcast::detail
