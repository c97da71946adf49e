#include "ring.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>

namespace optcast::shm {

namespace {

[[noreturn]] void fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

bool valid_capacity(std::size_t c) noexcept {
  return c >= ring_min_capacity && c <= ring_max_capacity && std::has_single_bit(c);
}

// The data region is used modulo its capacity: a copy that reaches its end goes on at
// its start.
void copy_in(std::byte* data, std::size_t capacity, std::uint64_t at, const std::byte* from, std::size_t n) noexcept {
  const std::size_t off = static_cast<std::size_t>(at & (capacity - 1));
  const std::size_t first = std::min(n, capacity - off);
  std::memcpy(data + off, from, first);
  std::memcpy(data, from + first, n - first);
}

void copy_out(const std::byte* data, std::size_t capacity, std::uint64_t at, std::byte* to, std::size_t n) noexcept {
  const std::size_t off = static_cast<std::size_t>(at & (capacity - 1));
  const std::size_t first = std::min(n, capacity - off);
  std::memcpy(to, data + off, first);
  std::memcpy(to + first, data, n - first);
}

}  // namespace

segment& segment::operator=(segment&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    base_ = o.base_;
    capacity_ = o.capacity_;
    o.fd_ = -1;
    o.base_ = nullptr;
    o.capacity_ = 0;
  }
  return *this;
}

void segment::reset() noexcept {
  if (base_) ::munmap(base_, ring_page + capacity_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  base_ = nullptr;
  capacity_ = 0;
}

void segment::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

segment segment::create(std::size_t capacity) {
  if (!valid_capacity(capacity))
    throw std::invalid_argument("shared-memory ring: capacity " + std::to_string(capacity) +
                                " is not a power of two from 4 KiB to 1 GiB");
  segment s;
  s.fd_ = ::memfd_create("optcast-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s.fd_ < 0) fail("shared-memory ring: memfd_create");
  const std::size_t size = ring_page + capacity;
  if (::ftruncate(s.fd_, static_cast<off_t>(size)) != 0) fail("shared-memory ring: ftruncate");
  // Sealed before the peer sees it: neither side can shrink it under the other's reads.
  if (::fcntl(s.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) fail("shared-memory ring: sealing");
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd_, 0);
  if (base == MAP_FAILED) fail("shared-memory ring: mmap");
  s.base_ = base;
  s.capacity_ = capacity;
  auto* c = new (base) ring_control;  // the file is zeros: counters and flags start at 0
  c->magic = ring_magic;
  c->version = ring_version;
  c->capacity = capacity;
  return s;
}

tl::expected<segment, std::string> segment::adopt(int fd) {
  segment s;
  s.fd_ = fd;  // closed by s on every refusal
  if (fd < 0) return tl::unexpected(std::string("no descriptor"));
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return tl::unexpected(std::string("not a sealable memory file (") + std::strerror(errno) + ")");
  if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
    return tl::unexpected(std::string("not sealed against resizing: its owner could make reads fault"));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return tl::unexpected(std::string("not a memory file"));
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size <= ring_page || !valid_capacity(size - ring_page))
    return tl::unexpected("a size of " + std::to_string(size) + " bytes is no ring's");
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return tl::unexpected(std::string("mmap: ") + std::strerror(errno));
  s.base_ = base;
  s.capacity_ = size - ring_page;  // from the size the kernel keeps, never from the header
  const auto& c = s.control();
  if (c.magic != ring_magic || c.version != ring_version || c.capacity != s.capacity_)
    return tl::unexpected(std::string("its header is no ring's of this version"));
  return s;
}

doorbell::doorbell() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) fail("shared-memory doorbell: eventfd");
}

doorbell& doorbell::operator=(doorbell&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

doorbell::~doorbell() {
  if (fd_ >= 0) ::close(fd_);
}

void doorbell::ring() const noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(fd_, &one, sizeof one);  // EAGAIN: rung 2^64 - 2 times unanswered
}

bool doorbell::drain() const noexcept {
  std::uint64_t count = 0;
  return ::read(fd_, &count, sizeof count) == static_cast<ssize_t>(sizeof count);
}

bool doorbell::wait(int timeout_ms) const noexcept {
  pollfd pfd{fd_, POLLIN, 0};
  int n;
  do n = ::poll(&pfd, 1, timeout_ms);
  while (n < 0 && errno == EINTR);
  return n > 0 && drain();
}

std::size_t ring_writer::room() const noexcept {
  const auto tail = seg_.control().tail.load(std::memory_order_acquire);
  const std::uint64_t used = head_ - tail;  // a reader ahead of the writer wraps to huge
  if (used > seg_.capacity()) {
    broken_ = true;
    return 0;
  }
  tail_seen_ = tail;
  return seg_.capacity() - static_cast<std::size_t>(used);
}

std::size_t ring_writer::room_for(std::size_t want) const noexcept {
  if (broken_) return 0;
  // The reader only moves its counter forwards: the room last seen is there still.
  const std::size_t seen = seg_.capacity() - static_cast<std::size_t>(head_ - tail_seen_);
  return seen >= want ? seen : room();
}

void ring_writer::publish() noexcept {
  auto& c = seg_.control();
  // Sequentially consistent with the reader's sleep(): either it sees this head, or
  // this side sees it asleep and rings; never both miss.
  c.head.store(head_, std::memory_order_seq_cst);
  if (c.reader_asleep.load(std::memory_order_seq_cst) && c.reader_asleep.exchange(0, std::memory_order_acq_rel))
    wake_.ring();
}

std::size_t ring_writer::write_some(std::span<const std::byte> bytes) noexcept {
  const std::span<const std::byte> one[] = {bytes};
  return write_some(std::span<const std::span<const std::byte>>(one));
}

std::size_t ring_writer::write_some(std::span<const std::span<const std::byte>> parts) noexcept {
  std::size_t total = 0;
  for (const auto& p : parts) total += p.size();
  const std::size_t n = std::min(room_for(total), total);
  if (n == 0) return 0;
  // Published a piece at a time: a reader that is polling copies the first piece out
  // while this side copies the next in, and a large message costs about one copy's time
  // rather than two.
  std::size_t left = n, unpublished = 0;
  for (const auto& p : parts) {
    for (std::size_t off = 0; off < p.size() && left > 0;) {
      const std::size_t k = std::min({p.size() - off, left, publish_every - unpublished});
      copy_in(seg_.data(), seg_.capacity(), head_, p.data() + off, k);
      head_ += k;
      off += k;
      left -= k;
      unpublished += k;
      if (unpublished == publish_every || left == 0) {
        publish();
        unpublished = 0;
      }
    }
    if (left == 0) break;
  }
  return n;
}

bool ring_writer::sleep_for_room(std::size_t want) noexcept {
  auto& c = seg_.control();
  want = std::min(want, seg_.capacity());
  c.writer_asleep.store(1, std::memory_order_seq_cst);
  const std::uint64_t used = head_ - c.tail.load(std::memory_order_seq_cst);
  if (used > seg_.capacity()) {
    broken_ = true;
    c.writer_asleep.store(0, std::memory_order_relaxed);
    return false;
  }
  if (seg_.capacity() - used >= want) {
    c.writer_asleep.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

std::size_t ring_reader::available() const noexcept {
  if (broken_) return 0;
  const std::uint64_t waiting = seg_.control().head.load(std::memory_order_acquire) - tail_;
  if (waiting > seg_.capacity()) {  // behind the reader, or more than the ring holds
    broken_ = true;
    return 0;
  }
  return static_cast<std::size_t>(waiting);
}

std::size_t ring_reader::read_some(std::span<std::byte> to) noexcept {
  const std::size_t n = std::min(available(), to.size());
  if (n == 0) return 0;
  auto& c = seg_.control();
  copy_out(seg_.data(), seg_.capacity(), tail_, to.data(), n);
  tail_ += n;
  c.tail.store(tail_, std::memory_order_seq_cst);  // the bytes are copied out: their room is the writer's
  if (c.writer_asleep.load(std::memory_order_seq_cst) && c.writer_asleep.exchange(0, std::memory_order_acq_rel))
    wake_.ring();
  return n;
}

bool ring_reader::sleep() noexcept {
  auto& c = seg_.control();
  c.reader_asleep.store(1, std::memory_order_seq_cst);
  if (broken_ || c.head.load(std::memory_order_seq_cst) != tail_) {
    c.reader_asleep.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

}  // namespace optcast::shm
