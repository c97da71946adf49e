// Splitting a buffer of m bytes into n blocks whose sizes differ by at most one byte:
// block i has m / n bytes, plus one for the first m mod n blocks.
#pragma once

#include <cassert>
#include <cstddef>
#include <span>

namespace optcast {

class block_partition {
public:
  block_partition(std::size_t bytes, std::size_t n) noexcept
      : n_(n), base_(n ? bytes / n : 0), extra_(n ? bytes % n : 0) {
    assert(n >= 1);
  }
  std::size_t count() const noexcept { return n_; }
  std::size_t offset(std::size_t i) const noexcept { return i * base_ + (i < extra_ ? i : extra_); }
  std::size_t size(std::size_t i) const noexcept { return base_ + (i < extra_ ? 1 : 0); }
  // The block that holds byte `at` (< the partition's bytes).
  std::size_t index_of(std::size_t at) const noexcept {
    const std::size_t long_part = extra_ * (base_ + 1);
    return at < long_part ? at / (base_ + 1) : extra_ + (at - long_part) / base_;
  }
  template <class B>
  std::span<B> block(std::span<B> buf, std::size_t i) const noexcept {
    return buf.subspan(offset(i), size(i));
  }

private:
  std::size_t n_, base_, extra_;
};

}  // namespace optcast
