// Collective deadlines on an Asio event loop: one steady_timer serves them all.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

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
    const std::uint64_t token = ++last_token_;
    entries_.emplace(key{when, token, false}, seq);
    auto& w = when_[token];
    w.deadline = when;
    if (on_warn_ && warn_lead_) {
      if (const auto lead = warn_lead_(t); lead > clock::duration::zero() && lead < t) {
        w.warning = when - lead;
        entries_.emplace(key{*w.warning, token, true}, seq);
      }
    }
    rearm_if_moved();
    return token;
  }

  void disarm(std::uint64_t token) noexcept {
    auto it = when_.find(token);
    if (it == when_.end()) return;
    entries_.erase(key{it->second.deadline, token, false});
    if (it->second.warning) entries_.erase(key{*it->second.warning, token, true});
    when_.erase(it);
    // Keep the timer on the nearest entry, and idle when there is none, so that an
    // application's io_context.run() returns once its work is done.
    rearm_if_moved();
  }

private:
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
  struct times {
    clock::time_point deadline;
    std::optional<clock::time_point> warning;
  };

  void rearm_if_moved() {
    if (entries_.empty()) {
      if (keep_idle_) return;
      if (armed_) timer_.cancel();
      armed_.reset();
      return;
    }
    if (armed_ && *armed_ == entries_.begin()->first) return;
    if (keep_idle_ && armed_ && armed_->when <= entries_.begin()->first.when) return;
    armed_ = entries_.begin()->first;
    timer_.expires_at(armed_->when);
    timer_.async_wait([this, alive = alive_](std::error_code ec) {
      if (!*alive || ec) return;  // destroyed, or superseded by a nearer entry
      expire();
    });
  }

  void expire() {
    armed_.reset();
    const auto now = clock::now();
    while (!entries_.empty() && entries_.begin()->first.when <= now) {
      auto it = entries_.begin();
      const key k = it->first;
      const std::uint32_t seq = it->second;
      entries_.erase(it);
      auto alive = alive_;
      if (k.warning) {
        when_[k.token].warning.reset();
        on_warn_(seq);  // may arm or disarm others
      } else {
        when_.erase(k.token);
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
  std::map<key, std::uint32_t> entries_;
  std::unordered_map<std::uint64_t, times> when_;
  std::optional<key> armed_;  // the entry the timer waits for
  std::uint64_t last_token_ = 0;
  bool keep_idle_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace optcast::detail
