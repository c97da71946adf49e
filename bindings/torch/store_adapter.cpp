// torch's store as the job's store (optcast/net/kv_store.hpp): how the ranks of a
// process group meet.
#include <mutex>

#include "process_group.hpp"

namespace optcast::torch_backend {

// torch's stores throw when they cannot answer: the server gone (rank 0's TCPStore), a
// file store's directory unreadable. Waits never reach them (poll_until times out
// here), so what they throw is a lost store, kept for last_error().
template <class F>
auto store_adapter::guarded(F&& f) -> result<decltype(f())> {
  std::lock_guard lock(mu_);
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      return {};
    } else {
      return f();
    }
  } catch (const std::exception& e) {
    last_error_ = e.what();
    return fail(errc::peer_lost);
  }
}

result<bool> store_adapter::has(const std::vector<std::string>& keys) {
  return guarded([&] { return store_->check(keys); });
}

result<void> store_adapter::set(const std::string& key, const std::string& value) {
  return guarded([&] { store_->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
}

result<std::string> store_adapter::get(const std::string& key, std::chrono::milliseconds timeout) {
  if (auto r = poll_until([&] { return has({key}); }, timeout); !r) return fail(r.error());
  return guarded([&] {
    auto v = store_->get(key);
    return std::string(v.begin(), v.end());
  });
}

result<std::int64_t> store_adapter::add(const std::string& key, std::int64_t delta) {
  return guarded([&] { return store_->add(key, delta); });
}

result<void> store_adapter::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return poll_until([&] { return has(keys); }, timeout);
}

std::string store_adapter::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_.empty() ? std::string() : "torch's store: " + last_error_;
}

}  // namespace optcast::torch_backend
