// Two processes of a host setting up their rings over a unix socket (net/shm/introduce.hpp):
// the kernel names the peer, the rings carry data both ways, and a peer of another user,
// job or rank, or one that sends anything but a sealed ring and an eventfd, is refused with
// the reason, every descriptor it sent closed.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <future>
#include <vector>

#include "shm_peers.hpp"

using namespace optcast::shm;
using namespace optcast::shm::testing;

namespace {

struct socket_pair {
  int a = -1, b = -1;
  socket_pair() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    a = sv[0];
    b = sv[1];
  }
  ~socket_pair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};

std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Reads exactly n bytes from a link, sleeping on `bell` when none are there.
std::vector<std::byte> read_exactly(channel& l, const doorbell& bell, std::size_t n) {
  std::vector<std::byte> out(n);
  std::size_t got = 0;
  while (got < n) {
    const std::size_t k = l.in.read_some(std::span(out).subspan(got));
    got += k;
    if (k == 0 && l.in.sleep() && !bell.wait(10000)) break;
    if (l.in.broken()) break;
  }
  out.resize(got);
  return out;
}

void write_all(channel& l, const doorbell& bell, std::span<const std::byte> b) {
  while (!b.empty()) {
    const std::size_t k = l.out.write_some(b);
    b = b.subspan(k);
    if (k == 0 && l.out.sleep_for_room(b.size()) && !bell.wait(10000)) return;
    if (l.out.broken()) return;
  }
}

}  // namespace

TEST_CASE("two processes introduced over a unix socket exchange a megabyte each way through their rings", "[shm]") {
  listener ear;
  std::vector<std::byte> data(1 << 20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7 + i / 4096);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // echoes what it reads; exit status says what went wrong
    doorbell bell;
    const int sock = ear.connect();
    if (sock < 0) std::_Exit(9);
    auto l = introduce(sock, as(1, 0), bell);
    if (!l) std::_Exit(10);
    if (l->peer.pid != ::getppid()) std::_Exit(11);
    auto got = read_exactly(*l, bell, data.size());
    if (got != data) std::_Exit(12);
    write_all(*l, bell, got);
    std::_Exit(0);
  }
  doorbell bell;
  const int sock = ear.accept();
  REQUIRE(sock >= 0);
  auto l = introduce(sock, as(0, 1), bell);
  ::close(sock);  // the rings outlive it (a fabric keeps it, to see the peer go)
  REQUIRE(l);
  CHECK(l->peer.pid == child);
  CHECK(l->peer.uid == ::getuid());
  write_all(*l, bell, data);
  CHECK(read_exactly(*l, bell, data.size()) == data);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a peer of another user, job or rank is refused, and its side is told", "[shm]") {
  socket_pair s;
  doorbell bell_a, bell_b;
  const auto before = open_descriptors();
  introduction a = as(0, 1), b = as(1, 0);
  std::string want_a, want_b;
  SECTION("another user") {
    a.user = ::getuid() + 1;  // the kernel says the peer is this process's user: not the one asked for
    want_a = "runs as user";
    want_b = "the peer closed the socket";
  }
  SECTION("another job") {
    b.job = 43;
    want_a = want_b = "another job";
  }
  SECTION("another rank") {
    b.rank = 2;
    want_a = "the peer says it is rank 2 meeting rank 0, not rank 1 meeting rank 0";
    want_b = "the peer says it is rank 0 meeting rank 1, not rank 0 meeting rank 2";
  }
  auto fb = std::async(std::launch::async, [&] { return introduce(s.b, b, bell_b); });
  auto la = introduce(s.a, a, bell_a);
  REQUIRE_FALSE(la);
  CHECK_THAT(la.error(), Catch::Contains(want_a));
  ::shutdown(s.a, SHUT_RDWR);
  auto lb = fb.get();
  REQUIRE_FALSE(lb);
  CHECK_THAT(lb.error(), Catch::Contains(want_b));
  CHECK(open_descriptors() == before);  // nothing the refused peers sent is left open
}

TEST_CASE("a peer that sends anything but a sealed ring and an eventfd is refused, its descriptors closed", "[shm]") {
  // The fake peer answers a real introduction with that side's own hello (rank 0 meeting
  // rank 0, so it is the hello expected) and descriptors of its choosing.
  socket_pair s;
  doorbell bell;
  const auto before = open_descriptors();
  auto real = std::async(std::launch::async, [&] { return introduce(s.a, as(0, 0), bell); });
  std::vector<std::byte> hello(32);
  auto fds = recv_with_fds(s.b, hello, 2);
  REQUIRE(fds);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  std::string want;
  std::vector<int> send;
  SECTION("a pipe for a ring") {
    send = {p[0], (*fds)[1]};
    want = "the peer's ring: not a sealable memory file";
  }
  SECTION("a pipe for a doorbell: writing to it could block") {
    send = {(*fds)[0], p[1]};
    want = "its doorbell is no eventfd";
  }
  SECTION("three descriptors") {
    send = {(*fds)[0], (*fds)[1], p[0]};
    want = "expected 2 descriptors, got 3";
  }
  SECTION("none") { want = "expected 2 descriptors, got 0"; }
  REQUIRE(send_with_fds(s.b, hello, send).empty());
  auto l = real.get();
  REQUIRE_FALSE(l);
  CHECK_THAT(l.error(), Catch::Contains(want));
  for (int fd : *fds) ::close(fd);
  ::close(p[0]);
  ::close(p[1]);
  CHECK(open_descriptors() == before);
}
