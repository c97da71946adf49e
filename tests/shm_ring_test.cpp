// The shared-memory ring between two processes (net/shm/ring.hpp): every byte arrives in
// order across the ring's end, whatever the sizes; a side that sleeps is woken by its
// doorbell and never misses one; and a segment or counter from a peer that breaks the
// ring's rules is refused, not trusted.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "shm/ring.hpp"
#include "shm_peers.hpp"

using namespace optcast::shm;
using namespace optcast::shm::testing;

namespace {


// Writes `total` bytes of the pattern in random pieces, now and then pausing (so that the
// reader sleeps), waiting on its own doorbell when the ring is full. Exit status 0 if it
// waited for room at least once and every wait ended by a ring, not a timeout; in the
// child, so it ends with _exit.
[[noreturn]] void writer_process(int ring_fd, int reader_bell, int writer_bell, std::uint64_t total, unsigned seed) {
  auto seg = segment::adopt(ring_fd);
  if (!seg) _exit(10);
  ring_writer w(std::move(*seg), doorbell(reader_bell));
  doorbell mine(writer_bell);
  std::mt19937 rng(seed);
  std::vector<std::byte> piece;
  std::uint64_t sent = 0;
  long slept = 0;
  while (sent < total) {
    const std::size_t want = std::min<std::uint64_t>(total - sent, rng() % 3 == 0 ? rng() % 200000 : rng() % 100);
    piece.resize(want);
    for (std::size_t i = 0; i < want; ++i) piece[i] = pattern_at(sent + i);
    std::size_t done = 0;
    while (done < want) {
      const std::size_t n = w.write_some(std::span(piece).subspan(done));
      done += n;
      if (n == 0 && w.sleep_for_room(want - done)) {
        ++slept;
        if (!mine.wait(10000)) _exit(11);  // a lost wake-up
      }
      if (w.broken()) _exit(12);
    }
    sent += want;
    if (rng() % 50 == 0) ::usleep(200);
  }
  _exit(slept > 0 ? 0 : 13);
}

}  // namespace

TEST_CASE("a ring carries every byte in order between two processes, and each side that sleeps is woken", "[shm]") {
  const std::size_t capacity = GENERATE(std::size_t{4096}, std::size_t{1} << 16);
  const std::uint64_t total = 24u << 20;
  auto seg = segment::create(capacity);
  doorbell reader_bell, writer_bell;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) writer_process(::dup(seg.fd()), ::dup(reader_bell.fd()), ::dup(writer_bell.fd()), total, 7);

  ring_reader r(std::move(seg), doorbell(::dup(writer_bell.fd())));
  std::mt19937 rng(11);
  std::vector<std::byte> buf(300000);
  std::uint64_t got = 0;
  long slept = 0, woken = 0;
  bool timed_out = false, corrupt = false;
  while (got < total && !timed_out && !corrupt) {
    const std::size_t n = r.read_some(std::span(buf).first(1 + rng() % buf.size()));
    for (std::size_t i = 0; i < n; ++i)
      if (buf[i] != pattern_at(got + i)) corrupt = true;
    got += n;
    if (n == 0 && r.sleep()) {
      ++slept;
      if (reader_bell.wait(10000))
        ++woken;
      else
        timed_out = true;
    }
    if (rng() % 40 == 0) ::usleep(300);  // the writer fills the ring and waits for room
    REQUIRE_FALSE(r.broken());
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK_FALSE(corrupt);
  CHECK_FALSE(timed_out);
  CHECK(got == total);
  REQUIRE(WIFEXITED(status));
  // 11: the writer waited for room and was never woken; 13: it never waited.
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(r.available() == 0);
  // Both sides slept and were woken (the pauses see to it): the doorbells were tried, not
  // only the polling path.
  CHECK(slept > 0);
  CHECK(woken == slept);
}

TEST_CASE("a reader that says it sleeps after the last write still sees it: the flag and the counter are ordered", "[shm]") {
  auto seg = segment::create(4096);
  doorbell reader_bell;
  auto peer = segment::adopt(::dup(seg.fd()));
  REQUIRE(peer);
  ring_writer w(std::move(*peer), doorbell(::dup(reader_bell.fd())));
  ring_reader r(std::move(seg), doorbell());

  REQUIRE(r.sleep());  // nothing written: it may sleep
  const std::byte b[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
  REQUIRE(w.write_some(b) == 3);
  CHECK(reader_bell.wait(0));  // the write rang at once: the sleeper would wake
  CHECK_FALSE(reader_bell.wait(0));  // once
  CHECK_FALSE(r.sleep());  // bytes are waiting: no sleep
  std::byte out[8];
  CHECK(r.read_some(out) == 3);
  CHECK(std::memcmp(out, b, 3) == 0);
  REQUIRE(w.write_some(b) == 3);
  CHECK_FALSE(reader_bell.wait(0));  // awake readers are not rung: no system call
}

TEST_CASE("a full ring takes nothing more, and a writer waiting for room is rung when the reader frees it", "[shm]") {
  auto seg = segment::create(4096);
  doorbell writer_bell;
  auto peer = segment::adopt(::dup(seg.fd()));
  REQUIRE(peer);
  ring_writer w(std::move(*peer), doorbell());
  ring_reader r(std::move(seg), doorbell(::dup(writer_bell.fd())));
  std::vector<std::byte> big(5000, std::byte{9});
  CHECK(w.write_some(big) == 4096);
  CHECK(w.write_some(big) == 0);
  CHECK(w.room() == 0);
  REQUIRE(w.sleep_for_room(100));
  std::vector<std::byte> out(50);
  CHECK(r.read_some(out) == 50);
  CHECK(writer_bell.wait(0));  // rung: the writer looks again
  CHECK(w.room() == 50);
  CHECK_FALSE(w.sleep_for_room(50));  // room enough: write, do not sleep
  CHECK(w.write_some(big) == 50);
}

// A frame's parts are published together, and cut where the room ends; the writer that
// saw the ring full reads the reader's counter again rather than trusting its old reading.
TEST_CASE("parts written together arrive together, cut at the room there is, and freed room is seen again", "[shm]") {
  auto seg = segment::create(4096);
  auto peer = segment::adopt(::dup(seg.fd()));
  REQUIRE(peer);
  ring_writer w(std::move(*peer), doorbell());
  ring_reader r(std::move(seg), doorbell());
  std::vector<std::byte> head(56), body(8);
  for (std::size_t i = 0; i < head.size(); ++i) head[i] = std::byte(i);
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = std::byte(200 + i);
  const std::span<const std::byte> frame[] = {head, body};
  REQUIRE(w.write_some(std::span<const std::span<const std::byte>>(frame)) == 64);
  REQUIRE(r.available() == 64);
  std::vector<std::byte> out(64);
  REQUIRE(r.read_some(out) == 64);
  CHECK(std::equal(head.begin(), head.end(), out.begin()));
  CHECK(std::equal(body.begin(), body.end(), out.begin() + 56));

  std::vector<std::byte> fill(4096 - 60, std::byte{7});
  REQUIRE(w.write_some(fill) == fill.size());  // 60 bytes of room left
  CHECK(w.write_some(std::span<const std::span<const std::byte>>(frame)) == 60);  // all of the head, 4 of the body
  CHECK(w.write_some(std::span<const std::span<const std::byte>>(frame)) == 0);
  std::vector<std::byte> drain(4096);
  CHECK(r.read_some(drain) == 4096);
  CHECK(std::equal(body.begin(), body.begin() + 4, drain.end() - 4));
  CHECK(w.write_some(std::span<const std::span<const std::byte>>(frame)) == 64);  // the freed room, seen
}

TEST_CASE("a segment from a peer is refused unless it is a sealed ring of this version", "[shm]") {
  SECTION("no descriptor") { CHECK_FALSE(segment::adopt(-1)); }
  SECTION("a pipe") {
    int p[2];
    REQUIRE(::pipe(p) == 0);
    ::close(p[1]);
    const auto s = segment::adopt(p[0]);
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error(), Catch::Contains("not a sealable memory file"));
  }
  SECTION("a memory file its owner could shrink under the reader") {
    const int fd = ::memfd_create("t", MFD_CLOEXEC);  // no sealing allowed: F_GET_SEALS says F_SEAL_SEAL only
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, ring_page + 4096) == 0);
    const auto s = segment::adopt(fd);
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error(), Catch::Contains("not sealed against resizing"));
  }
  SECTION("a sealed file of a size no ring has") {
    const int fd = ::memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, ring_page + 5000) == 0);
    REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    const auto s = segment::adopt(fd);
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error(), Catch::Contains("no ring's"));
  }
  SECTION("a sealed file of a ring's size that holds no ring") {
    const int fd = ::memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, ring_page + 4096) == 0);
    REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    const auto s = segment::adopt(fd);
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error(), Catch::Contains("header"));
  }
  SECTION("a ring whose header claims more than its size") {
    auto seg = segment::create(4096);
    seg.control().capacity = 1 << 20;
    const auto s = segment::adopt(::dup(seg.fd()));
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error(), Catch::Contains("header"));
  }
  SECTION("a ring") {
    auto seg = segment::create(1 << 16);
    const auto s = segment::adopt(::dup(seg.fd()));
    REQUIRE(s);
    CHECK(s->capacity() == (1u << 16));
  }
  SECTION("a capacity out of range is not created") {
    CHECK_THROWS_AS(segment::create(5000), std::invalid_argument);
    CHECK_THROWS_AS(segment::create(1024), std::invalid_argument);
  }
}

TEST_CASE("counters a peer set out of bounds break the ring: nothing is read or written past them", "[shm]") {
  auto seg = segment::create(4096);
  auto peer = segment::adopt(::dup(seg.fd()));
  REQUIRE(peer);
  auto& shared = seg.control();
  ring_writer w(std::move(*peer), doorbell());
  ring_reader r(std::move(seg), doorbell());
  std::vector<std::byte> out(10000);

  SECTION("a writer's head more than the capacity ahead") {
    shared.head.store(4097);
    CHECK(r.read_some(out) == 0);
    CHECK(r.broken());
    CHECK_FALSE(r.sleep());  // broken: its owner must not wait on it
  }
  SECTION("a writer's head behind the reader") {
    std::byte b[10]{};
    REQUIRE(w.write_some(b) == 10);
    REQUIRE(r.read_some(out) == 10);
    shared.head.store(5);
    CHECK(r.read_some(out) == 0);
    CHECK(r.broken());
  }
  SECTION("a reader's tail ahead of the writer") {
    shared.tail.store(100);
    CHECK(w.write_some(out) == 0);
    CHECK(w.broken());
  }
}
