// What the shared-memory tests share: a listening unix socket that forked peers connect
// to, and an introduction between two ranks of one test job.
#pragma once

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "shm/introduce.hpp"

namespace optcast::shm::testing {

// A listening unix socket in the abstract namespace, and how to reach it: SO_PEERCRED
// names the process that connected or listened (a socketpair's would name its creator for
// both ends).
struct listener {
  int fd = -1;
  sockaddr_un addr{};
  socklen_t len = 0;
  listener() {
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    addr.sun_family = AF_UNIX;
    const std::string name = "optcast-shm-test-" + std::to_string(::getpid());
    std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    REQUIRE(::listen(fd, 4) == 0);
  }
  ~listener() { ::close(fd); }
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;
  int connect() const {
    const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return c >= 0 && ::connect(c, reinterpret_cast<const sockaddr*>(&addr), len) == 0 ? c : -1;
  }
  int accept() const { return ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC); }
};

// The byte at stream position i of a test's data: a lost, repeated or shifted byte breaks
// the pattern.
inline std::byte pattern_at(std::uint64_t i) { return static_cast<std::byte>((i * 2654435761u) >> 13); }

inline introduction as(int rank, int peer_rank, std::size_t capacity = 1 << 16, std::uint64_t job = 42) {
  introduction i;
  i.job = job;
  i.rank = rank;
  i.peer_rank = peer_rank;
  i.capacity = capacity;
  i.user = ::getuid();
  return i;
}

}  // namespace optcast::shm::testing
