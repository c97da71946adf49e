// Where a simulated world's coroutine frames come from (task.hpp's frame_scope): a
// million ranks start a few frames each, a few hundred bytes apiece, in one burst,
// and malloc's small-block bookkeeping and the kernel's 4 KiB page faults cost more than
// running the collective did (optcast-bench sim, docs/GUIDE.md). An arena hands out frames from
// large chunks backed by transparent huge pages where the kernel allows them, and keeps
// freed frames on a free list per size for the next collective of the same world.
//
// Lifetime: the arena lives while its owner (the world) holds it or any frame of it is
// alive, whichever is longer: a task made in a world may be destroyed after the world.
// Threads: only a thread inside a frame_scope of the arena allocates from it or puts
// frames on its free lists; a frame freed anywhere else only drops its reference (its
// memory comes back when the arena goes).
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

namespace optcast::detail {

// Fresh zeroed memory from the kernel; `huge`: at a 2 MiB boundary and offered as
// transparent huge pages (a page fault per 2 MiB, not per 4 KiB, for memory that a large
// simulated world fills in one sweep). nullptr when the kernel refuses.
void* map_pages(std::size_t size, bool huge) noexcept;
void unmap_pages(void* p, std::size_t size) noexcept;

class frame_arena {
public:
  // One reference, the owner's.
  static frame_arena* create();
  // Drops a reference: the owner's, or a frame's (frame_free).
  void release() noexcept;

  // A block of n bytes (a multiple of align, at most largest), holding a reference;
  // recycle puts a block back on its free list (the reference is the caller's to drop).
  void* allocate(std::size_t n);
  void recycle(void* p, std::size_t n) noexcept;
  void acquire() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // The owner expects about this many bytes of frames: a large world's first chunk is then
  // already huge pages (the small chunks a small world starts with fault per 4 KiB).
  void expect(std::size_t bytes) noexcept;
  // Arenas not yet freed, in this process (for tests of their lifetime).
  static std::size_t alive() noexcept;

  static constexpr std::size_t align = 16;
  static constexpr std::size_t largest = 4096;  // larger frames come from the heap

private:
  frame_arena() = default;
  ~frame_arena();
  void* refill(std::size_t n);

  std::atomic<std::size_t> refs_{1};
  struct free_block {
    free_block* next;
  };
  free_block* free_[largest / align + 1] = {};
  char* next_ = nullptr;
  char* end_ = nullptr;
  struct chunk {
    void* base;
    std::size_t size;
    bool mapped;
  };
  std::vector<chunk> chunks_;
  std::size_t next_chunk_ = 64 << 10;
};

}  // namespace optcast::detail
