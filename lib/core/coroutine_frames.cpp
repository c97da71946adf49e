// Coroutine frames: from the heap, or from the frame_arena of the frame_scope this
// thread is in (task.hpp, runtime/frame_arena.hpp).
#include "core/frame_arena.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#include "optcast/task.hpp"

namespace optcast::detail {

namespace {

// The general dynamic model (a call to __tls_get_addr at each frame's allocation and free):
// initial-exec would spare it, but a library loaded by dlopen (the torch module, into a
// Python that has loaded torch) then fails to load: "cannot allocate memory in static TLS
// block" (tried; the install and torch tests caught it).
thread_local frame_arena* current = nullptr;

// Before every frame: the arena it came from, nullptr for the heap (freed frames are
// handed back to where they came from, whichever scope is current then).
constexpr std::size_t header = frame_arena::align;
static_assert(sizeof(frame_arena*) <= header);

constexpr std::size_t rounded(std::size_t n) { return (n + frame_arena::align - 1) & ~(frame_arena::align - 1); }

std::atomic<std::size_t> arenas{0};

constexpr std::size_t huge_page = std::size_t{2} << 20;
constexpr std::size_t biggest_chunk = std::size_t{32} << 20;

}  // namespace

frame_arena* frame_arena::create() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers see each frame only as a heap block of its own.
  return nullptr;
#else
  auto* a = new frame_arena;
  arenas.fetch_add(1, std::memory_order_relaxed);
  return a;
#endif
}

std::size_t frame_arena::alive() noexcept { return arenas.load(std::memory_order_relaxed); }

void frame_arena::release() noexcept {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

frame_arena::~frame_arena() {
  arenas.fetch_sub(1, std::memory_order_relaxed);
  for (const auto& c : chunks_) {
    if (c.mapped)
      unmap_pages(c.base, c.size);
    else
      std::free(c.base);
  }
}

void* frame_arena::allocate(std::size_t n) {
  void* p;
  if (free_block*& f = free_[n / align]; f) {
    p = f;
    f = f->next;
  } else if (static_cast<std::size_t>(end_ - next_) < n) {
    p = refill(n);
  } else {
    p = next_;
    next_ += n;
  }
  acquire();
  return p;
}

void frame_arena::recycle(void* p, std::size_t n) noexcept {
  auto* b = static_cast<free_block*>(p);
  b->next = free_[n / align];
  free_[n / align] = b;
}

void frame_arena::expect(std::size_t bytes) noexcept {
  if (chunks_.empty() && bytes >= huge_page) next_chunk_ = std::min((bytes + huge_page - 1) / huge_page * huge_page, biggest_chunk);
}

// Chunks double from 64 KiB (a small world costs little), and from 2 MiB on they are
// mapped at a 2 MiB boundary and offered to the kernel as huge pages: a page fault per
// 2 MiB instead of per 4 KiB while a large world starts its ranks.
void* frame_arena::refill(std::size_t n) {
  const std::size_t size = next_chunk_;
  next_chunk_ = std::min(next_chunk_ * 2, biggest_chunk);
  chunks_.reserve(chunks_.size() + 1);  // before the chunk: nothing leaks if this throws
  chunk c{nullptr, size, size >= huge_page};
  c.base = c.mapped ? map_pages(size, true) : std::malloc(size);
  if (!c.base) throw std::bad_alloc();
  chunks_.push_back(c);
  next_ = static_cast<char*>(c.base) + n;
  end_ = static_cast<char*>(c.base) + size;
  return c.base;
}

void* map_pages(std::size_t size, bool huge) noexcept {
  const std::size_t extra = huge ? huge_page : 0;
  void* m = ::mmap(nullptr, size + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  if (!huge) return m;
  // At a 2 MiB boundary (the tails given back), where the kernel can place huge pages.
  const auto at = reinterpret_cast<std::uintptr_t>(m);
  const auto aligned = (at + huge_page - 1) & ~(huge_page - 1);
  if (aligned > at) ::munmap(m, aligned - at);
  if (const auto tail = at + size + extra - (aligned + size)) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
#ifdef MADV_HUGEPAGE
  ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice: without it, 4 KiB pages
#endif
  return reinterpret_cast<void*>(aligned);
}

void unmap_pages(void* p, std::size_t size) noexcept { ::munmap(p, size); }

#ifdef MADV_COLLAPSE
constexpr int madv_collapse = MADV_COLLAPSE;
#else
constexpr int madv_collapse = 25;  // Linux's number, where the C library's headers predate it
#endif

void prefer_huge_pages(void* p, std::size_t bytes) noexcept {
#ifdef MADV_HUGEPAGE
  if (bytes < huge_page / 4) return;
  constexpr std::uintptr_t small_page = 4096;
  const auto at = reinterpret_cast<std::uintptr_t>(p), stop = at + bytes;
  auto first = (at + huge_page - 1) & ~(huge_page - 1), end = stop & ~(huge_page - 1);
  bool head_touched = false;  // malloc wrote its header into the first page
  if (const auto below = at & ~(huge_page - 1); below >= (at & ~(small_page - 1))) first = below, head_touched = below < at;
  if (const auto above = (stop + huge_page - 1) & ~(huge_page - 1); above <= ((stop - 1) | (small_page - 1)) + 1) end = above;
  if (end <= first) return;
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);
  // A huge page is not placed over a range with a page already present: the first 2 MiB
  // would fault per 4 KiB (512 faults, 4 ms on a paravirtualised VM). Collapsing it now
  // (Linux 6.1; refused elsewhere, harmlessly) makes it one huge page.
  if (head_touched) ::madvise(reinterpret_cast<void*>(first), huge_page, madv_collapse);
#else
  (void)p;
  (void)bytes;
#endif
}

void* frame_allocate(std::size_t n) {
  const std::size_t total = rounded(n + header);
  char* b;
  frame_arena* from = current;
  if (from && total <= frame_arena::largest) {
    b = static_cast<char*>(from->allocate(total));
  } else {
    b = static_cast<char*>(::operator new(total));
    from = nullptr;
  }
  *reinterpret_cast<frame_arena**>(b) = from;
  return b + header;
}

void frame_free(void* p, std::size_t n) noexcept {
  char* b = static_cast<char*>(p) - header;
  frame_arena* from = *reinterpret_cast<frame_arena**>(b);
  const std::size_t total = rounded(n + header);
  if (!from) {
#if defined(__cpp_sized_deallocation)
    ::operator delete(b, total);
#else  // clang before 19 declares the sized form only with -fsized-deallocation
    ::operator delete(b);
#endif
    return;
  }
  if (from == current) from->recycle(b, total);
  from->release();
}

frame_scope::frame_scope(frame_arena* a) noexcept : mine_(a), prev_(current) {
  if (a) a->acquire();
  current = a;
}

frame_scope::~frame_scope() {
  current = prev_;
  if (mine_) mine_->release();
}

}  // namespace optcast::detail
