// Bytes from one process to another of the same host through memory both map: a ring with
// one writer and one reader, and the doorbells that wake either side only when it sleeps.
//
// Over loopback TCP a message costs two copies through the kernel and, at the reader, an
// epoll wake-up (tens of microseconds on a virtual machine); through a ring, a reader
// that is polling sees the message as soon as the writer's store of `head` reaches it,
// with no system call on either side. A reader about to sleep says so in the ring
// (`reader_asleep`), and only then does the writer ring its doorbell (an eventfd, which a
// loop's epoll waits on with everything else); the same for a writer waiting for room.
//
// The ring is a byte stream, as a socket is: the fabric frames its messages in it the way
// it does on a connection. The segment is a sealed memfd created by the reader and passed
// to the writer over a unix socket (the kernel vouches for the peer there): its size can
// not change under either side, so a peer cannot make the other's reads fault, and
// everything the peer writes into it (the counters as well as the bytes) is checked
// before use, as anything from the network is.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <tl/expected.hpp>

namespace optcast::shm {

// The start of a ring's segment, one page; the data follow. Each counter on a cache line
// of its own, so the writer's stores do not evict the reader's line and back.
struct ring_control {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t reserved;
  std::uint64_t capacity;  // bytes of data after this page: a power of two
  alignas(64) std::atomic<std::uint64_t> head;  // bytes ever written (the writer's)
  alignas(64) std::atomic<std::uint64_t> tail;  // bytes ever read (the reader's)
  alignas(64) std::atomic<std::uint32_t> reader_asleep;  // set by the reader before it sleeps
  alignas(64) std::atomic<std::uint32_t> writer_asleep;  // set by the writer before it waits for room
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "the counters are shared between processes: only lock-free atomics are address-free");

inline constexpr std::uint64_t ring_magic = 0x676e69725f6f7074;  // "tpo_ring"
inline constexpr std::uint32_t ring_version = 1;
inline constexpr std::size_t ring_page = 4096;
inline constexpr std::size_t ring_min_capacity = 4096, ring_max_capacity = std::size_t{1} << 30;
// A writer publishes what it copies in at least this often (ring_writer::write_some).
inline constexpr std::size_t publish_every = std::size_t{8} << 10;

// A mapped ring segment and its descriptor (kept to pass on, or closed).
class segment {
public:
  segment() = default;
  segment(segment&& o) noexcept { *this = std::move(o); }
  segment& operator=(segment&& o) noexcept;
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment() { reset(); }

  // A new ring of `capacity` bytes (a power of two within the limits above), sealed
  // against shrinking and growing. Throws std::system_error, or std::invalid_argument
  // for a capacity out of range.
  static segment create(std::size_t capacity);
  // Maps a ring segment received from a peer (takes the descriptor): refused, with the
  // reason, unless it is a memfd sealed against resizing whose size and header describe
  // a ring this version reads.
  static tl::expected<segment, std::string> adopt(int fd);

  int fd() const noexcept { return fd_; }
  ring_control& control() const noexcept { return *static_cast<ring_control*>(base_); }
  std::byte* data() const noexcept { return static_cast<std::byte*>(base_) + ring_page; }
  std::size_t capacity() const noexcept { return capacity_; }
  explicit operator bool() const noexcept { return base_ != nullptr; }
  void reset() noexcept;
  // Closes the descriptor once it is passed on: the mapping stays (a link would
  // otherwise hold two descriptors more than a socket does).
  void close_fd() noexcept;

private:
  int fd_ = -1;
  void* base_ = nullptr;
  std::size_t capacity_ = 0;
};

// A process's doorbell: an eventfd that its peers write to wake it. Non-blocking; its
// owner waits on it with epoll (or poll) and drains it once awake.
class doorbell {
public:
  doorbell();  // a new eventfd; throws std::system_error
  explicit doorbell(int fd) noexcept : fd_(fd) {}  // one received from a peer (taken)
  doorbell(doorbell&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  doorbell& operator=(doorbell&& o) noexcept;
  doorbell(const doorbell&) = delete;
  doorbell& operator=(const doorbell&) = delete;
  ~doorbell();

  int fd() const noexcept { return fd_; }
  void ring() const noexcept;  // never blocks: a full counter already means "awake"
  bool drain() const noexcept;  // true if it had been rung
  // Sleeps until rung or `timeout_ms` passes (-1: no limit): true if rung. For threads
  // and tests; a fabric waits in its loop's epoll instead.
  bool wait(int timeout_ms) const noexcept;

private:
  int fd_ = -1;
};

// The writing end. `wake` is the reader's doorbell, rung when the reader sleeps.
class ring_writer {
public:
  ring_writer(segment seg, doorbell wake) noexcept : seg_(std::move(seg)), wake_(std::move(wake)) {}

  // Copies as many leading bytes of `bytes` as there is room for and publishes them:
  // how many (0 when full). Wakes the reader if it sleeps.
  std::size_t write_some(std::span<const std::byte> bytes) noexcept;
  // The same for `parts` one after the other (a frame's header and body): published
  // together, so the reader sees them at once and the ring's counters are touched once.
  std::size_t write_some(std::span<const std::span<const std::byte>> parts) noexcept;
  // Bytes there is room for now (0 also when the reader's counter is out of bounds).
  std::size_t room() const noexcept;
  // Before waiting on this side's doorbell for room: says so in the ring, then looks
  // again. False if `want` bytes (at most the capacity) fit after all (the flag is
  // cleared): write instead of sleeping.
  bool sleep_for_room(std::size_t want) noexcept;
  // Takes back sleep_for_room's word (this side polls instead): the reader need not ring.
  void awake() noexcept { seg_.control().writer_asleep.store(0, std::memory_order_relaxed); }
  // Whether the reader broke the ring's rules (its counter behind or past the data).
  bool broken() const noexcept { return broken_; }

  const segment& seg() const noexcept { return seg_; }

private:
  segment seg_;
  doorbell wake_;
  // Room for `want` bytes, reading the reader's counter only when the last reading of it
  // shows too little (its cache line is the reader's: a miss on every write otherwise).
  std::size_t room_for(std::size_t want) const noexcept;
  void publish() noexcept;

  std::uint64_t head_ = 0;  // this side's copy: the shared one is only ever stored
  mutable std::uint64_t tail_seen_ = 0;  // the reader's counter when last read
  mutable bool broken_ = false;
};

// The reading end. `wake` is the writer's doorbell, rung when the writer waits for room.
class ring_reader {
public:
  ring_reader(segment seg, doorbell wake) noexcept : seg_(std::move(seg)), wake_(std::move(wake)) {}

  // Copies up to to.size() waiting bytes into `to` and frees their room: how many (0
  // when there are none). Wakes the writer if it waits for room.
  std::size_t read_some(std::span<std::byte> to) noexcept;
  // Bytes waiting (0 also when the writer's counter is out of bounds: see broken()).
  std::size_t available() const noexcept;
  // Whether the writer's counter moved since this side last read (or the ring broke):
  // one load, for a loop that looks many times for every time something came.
  bool changed() const noexcept { return broken_ || seg_.control().head.load(std::memory_order_acquire) != tail_; }
  // Before sleeping on this side's doorbell: says so in the ring, then looks again. False
  // if bytes came meanwhile (the flag is cleared): read instead of sleeping.
  bool sleep() noexcept;
  // Takes back sleep()'s word (this side polls instead): the writer need not ring.
  void awake() noexcept { seg_.control().reader_asleep.store(0, std::memory_order_relaxed); }
  // Whether the writer broke the ring's rules (its counter behind the reader's or more
  // than the capacity ahead): nothing more is read.
  bool broken() const noexcept { return broken_; }

  const segment& seg() const noexcept { return seg_; }

private:
  segment seg_;
  doorbell wake_;
  std::uint64_t tail_ = 0;
  mutable bool broken_ = false;
};

}  // namespace optcast::shm
