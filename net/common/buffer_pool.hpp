// Recycled message buffers for messages that arrive before their receive is posted.
//
// Eager sends let a rank run ahead of its receivers (a broadcast's root receives
// nothing and never waits), so the number of buffered messages at a receiver can reach
// the message count of a whole collective. The pool is bounded by bytes, not by count:
// up to `retain_bytes` of capacity is kept for reuse, so a running collective allocates
// nothing per message as long as what it buffers at once fits that budget.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace optcast::detail {

// Leaves new elements uninitialised: a message buffer is written by the read that fills
// it, and zeroing megabytes first (as std::vector<std::byte>::resize does) costs as much
// as the copy, more where the pages are fresh.
template <class T>
struct default_init_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = default_init_allocator<U>;
  };
  using std::allocator<T>::allocator;
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using message_buffer = std::vector<std::byte, default_init_allocator<std::byte>>;

class buffer_pool {
public:
  explicit buffer_pool(std::size_t retain_bytes = std::size_t{64} << 20) : budget_(retain_bytes) {}

  message_buffer take(std::size_t n) {
    message_buffer b;
    // The smallest kept buffer that holds n, else the largest (grown): a small message
    // must not take the buffer a large one will need next, or the large one allocates
    // and faults in fresh pages every time.
    if (!free_.empty()) {
      auto fits = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->capacity() >= n && (fits == free_.end() || it->capacity() < fits->capacity())) fits = it;
      if (fits == free_.end())
        fits = std::max_element(free_.begin(), free_.end(),
                                [](const message_buffer& a, const message_buffer& c) { return a.capacity() < c.capacity(); });
      b = std::move(*fits);
      *fits = std::move(free_.back());
      free_.pop_back();
      held_ -= b.capacity();
    }
    b.resize(n);
    return b;
  }

  void give_back(message_buffer&& b) {
    if (held_ + b.capacity() > budget_) return;  // freed when b goes out of scope
    held_ += b.capacity();
    free_.push_back(std::move(b));
  }

private:
  std::size_t budget_;
  std::size_t held_ = 0;
  std::vector<message_buffer> free_;
};

}  // namespace optcast::detail
