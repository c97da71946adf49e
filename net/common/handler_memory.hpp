// Memory for the one asynchronous operation a connection has in flight at a time, so
// that reading and writing frames allocates nothing (asio's per-thread recycling cache
// holds only two blocks, and a rank has a read pending on every connection at once).
// Bind it to a handler with asio::bind_allocator(handler_allocator<int>(mem), handler);
// the handler must keep the memory alive (capture the shared_ptr that owns it).
#pragma once

#include <cstddef>
#include <new>

namespace optcast::detail {

class handler_memory {
public:
  handler_memory() = default;
  handler_memory(const handler_memory&) = delete;
  handler_memory& operator=(const handler_memory&) = delete;

  void* allocate(std::size_t n) {
    if (!in_use_ && n <= sizeof storage_) {
      in_use_ = true;
      return &storage_;
    }
    return ::operator new(n);
  }
  void deallocate(void* p) noexcept {
    if (p == &storage_)
      in_use_ = false;
    else
      ::operator delete(p);
  }

private:
  alignas(std::max_align_t) unsigned char storage_[1024];
  bool in_use_ = false;
};

template <class T>
class handler_allocator {
public:
  using value_type = T;
  explicit handler_allocator(handler_memory& m) noexcept : m_(&m) {}
  template <class U>
  handler_allocator(const handler_allocator<U>& o) noexcept : m_(o.m_) {}  // NOLINT
  T* allocate(std::size_t n) { return static_cast<T*>(m_->allocate(sizeof(T) * n)); }
  void deallocate(T* p, std::size_t) noexcept { m_->deallocate(p); }
  template <class U>
  bool operator==(const handler_allocator<U>& o) const noexcept { return m_ == o.m_; }

private:
  template <class>
  friend class handler_allocator;
  handler_memory* m_;
};

}  // namespace optcast::detail
