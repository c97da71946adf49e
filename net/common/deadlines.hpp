// Collective deadlines on an Asio event loop: one steady_timer serves them all.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

namespace optcast::detail {

class deadline_table {
public:
  using clock = std::chrono::steady_clock;

  deadline_table(asio::io_context& io, std::function<void(std::uint32_t seq)> on_expire)
      : timer_(io), on_expire_(std::move(on_expire)) {}
  ~deadline_table() { *alive_ = false; }
  deadline_table(const deadline_table&) = delete;
  deadline_table& operator=(const deadline_table&) = delete;

  std::uint64_t arm(std::uint32_t seq, std::chrono::nanoseconds timeout) {
    const auto when = clock::now() + std::chrono::duration_cast<clock::duration>(timeout);
    const std::uint64_t token = ++last_token_;
    entries_.emplace(key{when, token}, seq);
    when_.emplace(token, when);
    if (entries_.begin()->first.token == token) rearm();
    return token;
  }

  void disarm(std::uint64_t token) noexcept {
    auto it = when_.find(token);
    if (it == when_.end()) return;
    const bool was_first = entries_.begin()->first.token == token;
    entries_.erase(key{it->second, token});
    when_.erase(it);
    // Keep the timer on the nearest deadline, and idle when there is none, so that an
    // application's io_context.run() returns once its work is done.
    if (entries_.empty())
      timer_.cancel();
    else if (was_first)
      rearm();
  }

private:
  struct key {
    clock::time_point when;
    std::uint64_t token;
    bool operator<(const key& o) const noexcept {
      return when != o.when ? when < o.when : token < o.token;
    }
  };

  void rearm() {
    timer_.expires_at(entries_.begin()->first.when);
    timer_.async_wait([this, alive = alive_](std::error_code ec) {
      if (!*alive || ec) return;  // destroyed, or superseded by a nearer deadline
      expire();
    });
  }

  void expire() {
    const auto now = clock::now();
    while (!entries_.empty() && entries_.begin()->first.when <= now) {
      auto it = entries_.begin();
      const std::uint32_t seq = it->second;
      when_.erase(it->first.token);
      entries_.erase(it);
      auto alive = alive_;
      on_expire_(seq);  // may arm or disarm others, or destroy us with the fabric
      if (!*alive) return;
    }
    if (!entries_.empty()) rearm();
  }

  asio::steady_timer timer_;
  std::function<void(std::uint32_t)> on_expire_;
  std::map<key, std::uint32_t> entries_;
  std::unordered_map<std::uint64_t, clock::time_point> when_;
  std::uint64_t last_token_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace optcast::detail
