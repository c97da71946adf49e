// Reusable scratch memory for one rank's collectives (fabric::scratch()).
//
// Collectives pack messages and keep partial results in temporary buffers. Allocating
// those afresh every call costs more than the copy: the pages are zeroed and faulted in
// each time (on a virtual machine ~7 us a page, slower than a 1 Gbit/s link), and glibc
// hands large blocks back to the kernel when they are freed. A pool keeps the buffers of
// earlier calls and lends them out again, contents undefined. Each collective takes its
// own lease, so collectives in flight together never share one. Like the fabric it
// belongs to, a pool is used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace optcast {

class scratch_pool {
  struct buffer {
    std::unique_ptr<std::byte[]> data;
    std::size_t size = 0;
  };

public:
  // A buffer on loan; it goes back to the pool when the lease ends.
  class lease {
  public:
    lease() = default;
    lease(lease&& o) noexcept : pool_(o.pool_), buf_(std::move(o.buf_)), used_(o.used_) { o.pool_ = nullptr; }
    lease& operator=(lease&& o) noexcept {
      if (this != &o) {
        give_back();
        pool_ = o.pool_;
        buf_ = std::move(o.buf_);
        used_ = o.used_;
        o.pool_ = nullptr;
      }
      return *this;
    }
    ~lease() { give_back(); }
    std::span<std::byte> span() const noexcept { return {buf_.data.get(), used_}; }
    std::byte* data() const noexcept { return buf_.data.get(); }
    std::size_t size() const noexcept { return used_; }

  private:
    friend class scratch_pool;
    lease(scratch_pool* p, buffer b, std::size_t used) noexcept : pool_(p), buf_(std::move(b)), used_(used) {}
    void give_back() noexcept {
      if (pool_) pool_->give_back(std::move(buf_));
      pool_ = nullptr;
    }
    scratch_pool* pool_ = nullptr;
    buffer buf_;
    std::size_t used_ = 0;
  };

  // At least `bytes` bytes, contents undefined. Throws std::bad_alloc like new.
  lease take(std::size_t bytes);
  // Bytes the pool keeps between calls (default 256 MiB); buffers beyond it are freed
  // when given back. 0 keeps nothing.
  void set_limit(std::size_t bytes) noexcept;
  std::size_t limit() const noexcept { return limit_; }
  std::size_t kept() const noexcept { return kept_; }
  // Frees every buffer not on loan.
  void release() noexcept;

private:
  void give_back(buffer b) noexcept;
  std::vector<buffer> free_;
  std::size_t kept_ = 0;
  std::size_t limit_ = std::size_t{256} << 20;
};

}  // namespace optcast
