// Recycled message buffers for messages that arrive before their receive is posted.
//
// Eager sends let a rank run ahead of its receivers (a broadcast's root receives
// nothing and never waits), so the number of buffered messages at a receiver can reach
// the message count of a whole collective. The pool is bounded by bytes, not by count:
// up to `retain_bytes` of capacity is kept for reuse, so a running collective allocates
// nothing per message as long as what it buffers at once fits that budget.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
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
    if (n == 0) return b;  // holds nothing: no kept buffer to tie up
    // A kept buffer that holds n, the smallest size class first, else the largest kept
    // (grown): a small message must not take the buffer a large one will need next, or
    // the large one allocates and faults in fresh pages every time. Kept buffers sit in
    // size classes (powers of two), so this costs a few steps however many are kept (a
    // simulated world keeps one per message in flight).
    const int c = class_of(n);
    auto& same = free_[static_cast<std::size_t>(c)];
    for (std::size_t looked = 0, i = same.size(); i-- > 0 && looked < 8; ++looked)
      if (same[i].capacity() >= n) return hand_out(same, i, n);
    for (int k = c + 1; k < classes; ++k)
      if (auto& up = free_[static_cast<std::size_t>(k)]; !up.empty()) return hand_out(up, up.size() - 1, n);
    for (int k = c; k >= 0; --k)
      if (auto& down = free_[static_cast<std::size_t>(k)]; !down.empty()) return hand_out(down, down.size() - 1, n);
    b.resize(n);
    return b;
  }

  void give_back(message_buffer&& b) {
    if (b.capacity() == 0 || held_ + b.capacity() > budget_) return;  // freed when b goes out of scope
    held_ += b.capacity();
    free_[static_cast<std::size_t>(class_of(b.capacity()))].push_back(std::move(b));
  }

private:
  static constexpr int classes = 64;
  static int class_of(std::size_t bytes) noexcept { return bytes ? static_cast<int>(std::bit_width(bytes)) - 1 : 0; }
  message_buffer hand_out(std::vector<message_buffer>& list, std::size_t i, std::size_t n) {
    message_buffer b = std::move(list[i]);
    if (i + 1 != list.size()) list[i] = std::move(list.back());
    list.pop_back();
    held_ -= b.capacity();
    b.resize(n);
    return b;
  }

  std::size_t budget_;
  std::size_t held_ = 0;
  std::array<std::vector<message_buffer>, classes> free_;
};

}  // namespace optcast::detail
