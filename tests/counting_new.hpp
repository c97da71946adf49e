// Replaces the global operator new of a test binary with one that counts: every
// allocation, and those of at least `large_allocation` bytes. Include it in exactly one
// file of the binary (a replacement function must be defined once).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace counting_new {
inline std::atomic<long> allocations{0};
inline std::atomic<long> large_allocations{0};
inline constexpr std::size_t large_allocation = 64 << 10;
// The largest allocation asked for since it was last set to 0 (asked: one that fails
// counts too).
inline std::atomic<std::size_t> largest{0};
}  // namespace counting_new

// The replacements pair malloc with free; GCC, seeing the inlined std::allocator use the
// replaced operator new, warns of a mismatch that is not one.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  counting_new::allocations.fetch_add(1, std::memory_order_relaxed);
  if (n >= counting_new::large_allocation) {
    counting_new::large_allocations.fetch_add(1, std::memory_order_relaxed);
    std::size_t seen = counting_new::largest.load(std::memory_order_relaxed);
    while (n > seen && !counting_new::largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
    }
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::get_temporary_buffer uses them): every allocation must
// pair with these deletes, or a sanitizer reports new against free.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
