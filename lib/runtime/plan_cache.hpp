// Plans shared by the collectives that use them, built once per key. Entries are weak: a
// plan lives while a collective uses it, and the few built last are held as well, so that
// repeated collectives on one communicator do not rebuild theirs. Keys that vary with the
// message size (a LogP model's L, o and g) would otherwise leave an expired entry per
// size for good (a soak of random sizes grew the heap by 4 MiB in 90,000 calls): expired
// entries are swept whenever the map has doubled since the last sweep, so it stays within
// about twice the plans alive.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace optcast::detail {

template <class Key, class T, std::size_t Recent = 4>
class plan_cache {
public:
  // The plan for `key`, from `make()` (returning T) if none is alive.
  template <class Make>
  std::shared_ptr<const T> get(const Key& key, Make&& make) {
    std::lock_guard lock(mu_);
    auto& slot = map_[key];
    if (auto p = slot.lock()) return p;
    auto p = std::make_shared<const T>(make());
    slot = p;
    recent_[next_++ % Recent] = p;
    if (map_.size() >= 2 * swept_) {
      std::erase_if(map_, [](const auto& e) { return e.second.expired(); });
      swept_ = std::max(map_.size(), min_sweep);
    }
    return p;
  }

  std::size_t entries() {
    std::lock_guard lock(mu_);
    return map_.size();
  }

private:
  static constexpr std::size_t min_sweep = 16;
  std::mutex mu_;
  std::map<Key, std::weak_ptr<const T>> map_;
  std::array<std::shared_ptr<const T>, Recent> recent_{};
  std::size_t next_ = 0, swept_ = min_sweep;
};

}  // namespace optcast::detail
