// Recycled message buffers for messages that arrive before their receive is posted.
//
// Eager sends let a rank run ahead of its receivers (a broadcast's root receives
// nothing and never waits), so the number of buffered messages at a receiver can reach
// the message count of a whole collective. The pool is bounded by bytes, not by count:
// up to `retain_bytes` of capacity is kept for reuse, so a running collective allocates
// nothing per message as long as what it buffers at once fits that budget.
#pragma once

#include <cstddef>
#include <vector>

namespace optcast::detail {

class buffer_pool {
public:
  explicit buffer_pool(std::size_t retain_bytes = std::size_t{64} << 20) : budget_(retain_bytes) {}

  std::vector<std::byte> take(std::size_t n) {
    std::vector<std::byte> b;
    // Prefer the most recently returned buffer; a buffer too small is grown in place.
    if (!free_.empty()) {
      b = std::move(free_.back());
      free_.pop_back();
      held_ -= b.capacity();
    }
    b.resize(n);
    return b;
  }

  void give_back(std::vector<std::byte>&& b) {
    if (held_ + b.capacity() > budget_) return;  // freed when b goes out of scope
    held_ += b.capacity();
    free_.push_back(std::move(b));
  }

private:
  std::size_t budget_;
  std::size_t held_ = 0;
  std::vector<std::vector<std::byte>> free_;
};

}  // namespace optcast::detail
