#include "optcast/net/kv_store.hpp"

#include <charconv>

namespace optcast {

result<void> memory_kv_store::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    kv_[key] = value;
  }
  cv_.notify_all();
  return {};
}

result<std::string> memory_kv_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return kv_.contains(key); })) return fail(errc::timeout);
  return kv_.find(key)->second;
}

result<std::int64_t> memory_kv_store::add(const std::string& key, std::int64_t delta) {
  std::int64_t sum = 0;
  {
    std::lock_guard lock(mu_);
    auto& v = kv_[key];
    std::int64_t now = 0;
    if (!v.empty()) {
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), now);
      if (ec != std::errc{} || end != v.data() + v.size()) return fail(errc::invalid_argument);
    }
    sum = now + delta;
    v = std::to_string(sum);
  }
  cv_.notify_all();
  return sum;
}

result<void> memory_kv_store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  const bool all = cv_.wait_for(lock, timeout, [&] {
    for (const auto& k : keys)
      if (!kv_.contains(k)) return false;
    return true;
  });
  if (!all) return fail(errc::timeout);
  return {};
}

}  // namespace optcast
