// Arrays that a large simulated world fills in one sweep (its ranks, ports, trees and
// buffers), on huge pages of their own. On this project's VMs a page fault costs about
// 10 us, and malloc's blocks of a few MiB fault per 4 KiB: a 10^5-rank broadcast's
// set-up spent more on them than on its collective. malloc cannot be told to use huge
// pages (its mmap threshold also moves with what was freed, so a block may come from the
// heap), hence an allocator that maps 2 MiB-aligned memory for large arrays itself.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#include "core/frame_arena.hpp"

namespace optcast::detail {

template <class T>
struct huge_allocator {
  using value_type = T;
  // Smaller arrays come from the heap, whose memory the next small world reuses.
  static constexpr std::size_t least = std::size_t{256} << 10;
  static constexpr std::size_t unit = std::size_t{2} << 20;

  huge_allocator() = default;
  template <class U>
  huge_allocator(const huge_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < least) return std::allocator<T>{}.allocate(n);
    void* p = map_pages(mapped(bytes), true);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < least) return std::allocator<T>{}.deallocate(p, n);
    unmap_pages(p, mapped(bytes));
  }
  friend bool operator==(const huge_allocator&, const huge_allocator&) noexcept { return true; }

private:
  // Whole huge pages: a partial one at the end would fault per 4 KiB.
  static std::size_t mapped(std::size_t bytes) noexcept { return (bytes + unit - 1) / unit * unit; }
};

template <class T>
using huge_vector = std::vector<T, huge_allocator<T>>;

}  // namespace optcast::detail
