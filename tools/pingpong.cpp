// optcast pingpong: what one message between two processes of this host costs, by each way
// it can travel: a shared-memory ring (net/shm) read by a polling process, the same ring
// with its reader asleep until the doorbell, a unix socket, and loopback TCP (the way
// ranks of a host talk today). Half a round trip, the median of ten batches: the floor
// under a small collective's every round.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "shm/ring.hpp"
#include "tools.hpp"

namespace optcast::tools {

namespace {

using clock = std::chrono::steady_clock;

// One side of a two-way channel: sends n bytes, receives n bytes (whole messages).
struct channel {
  std::function<void(const std::byte*, std::size_t)> send;
  std::function<void(std::byte*, std::size_t)> recv;
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "optcast pingpong: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// A socket as a channel: blocking, whole messages.
channel socket_channel(int fd) {
  return {[fd](const std::byte* p, std::size_t n) {
            while (n) {
              const ssize_t k = ::write(fd, p, n);
              if (k < 0 && errno == EINTR) continue;
              if (k <= 0) die("write");
              p += k;
              n -= static_cast<std::size_t>(k);
            }
          },
          [fd](std::byte* p, std::size_t n) {
            while (n) {
              const ssize_t k = ::read(fd, p, n);
              if (k < 0 && errno == EINTR) continue;
              if (k <= 0) die("read");
              p += k;
              n -= static_cast<std::size_t>(k);
            }
          }};
}

// Rings as a channel; `sleeping`: a side with nothing to do sleeps on its doorbell (a
// wake-up per message, as an idle rank's would be), else it polls.
struct ring_pair {
  shm::ring_writer out;
  shm::ring_reader in;
  shm::doorbell mine;
};

channel ring_channel(ring_pair& r, bool sleeping) {
  return {[&r, sleeping](const std::byte* p, std::size_t n) {
            while (n) {
              const std::size_t k = r.out.write_some({p, n});
              p += k;
              n -= k;
              if (k == 0 && sleeping && r.out.sleep_for_room(n)) r.mine.wait(-1);
              if (r.out.broken()) die("ring broken");
            }
          },
          [&r, sleeping](std::byte* p, std::size_t n) {
            while (n) {
              const std::size_t k = r.in.read_some({p, n});
              p += k;
              n -= k;
              if (k == 0 && sleeping && r.in.sleep()) r.mine.wait(-1);
              if (r.in.broken()) die("ring broken");
            }
          }};
}

// Round trips of `bytes` between this process (which times them) and `peer_side`, run in
// a child: the median over batches of half a round trip, in microseconds.
double time_pingpong(std::size_t bytes, int count, const std::function<channel(bool child)>& make) {
  const pid_t pid = ::fork();
  if (pid < 0) die("fork");
  std::vector<std::byte> buf(std::max<std::size_t>(bytes, 1));
  if (pid == 0) {
    auto ch = make(true);
    for (int i = 0; i < count + count / 10; ++i) {
      ch.recv(buf.data(), bytes);
      ch.send(buf.data(), bytes);
    }
    std::_Exit(0);
  }
  auto ch = make(false);
  for (int i = 0; i < count / 10; ++i) {  // warm-up: pages touched, cores awake
    ch.send(buf.data(), bytes);
    ch.recv(buf.data(), bytes);
  }
  std::vector<double> batches;
  const int per = std::max(1, count / 10);
  for (int b = 0; b < 10; ++b) {
    const auto t0 = clock::now();
    for (int i = 0; i < per; ++i) {
      ch.send(buf.data(), bytes);
      ch.recv(buf.data(), bytes);
    }
    batches.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count() / per / 2);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::sort(batches.begin(), batches.end());
  return (batches[4] + batches[5]) / 2;
}

double ring_time(std::size_t bytes, int count, bool sleeping) {
  constexpr std::size_t capacity = std::size_t{1} << 18;
  auto to_parent = shm::segment::create(capacity), to_child = shm::segment::create(capacity);
  shm::doorbell parent_bell, child_bell;
  // Each side adopts the other's receiving ring as it would from a peer.
  auto adopt = [](const shm::segment& s) {
    auto a = shm::segment::adopt(::dup(s.fd()));
    if (!a) {
      std::fprintf(stderr, "optcast pingpong: %s\n", a.error().c_str());
      std::exit(1);
    }
    return std::move(*a);
  };
  std::vector<ring_pair> sides;
  sides.reserve(1);
  return time_pingpong(bytes, count, [&](bool child) {
    if (child)
      sides.push_back({shm::ring_writer(adopt(to_parent), shm::doorbell(::dup(parent_bell.fd()))),
                       shm::ring_reader(adopt(to_child), shm::doorbell(::dup(parent_bell.fd()))), std::move(child_bell)});
    else
      sides.push_back({shm::ring_writer(adopt(to_child), shm::doorbell(::dup(child_bell.fd()))),
                       shm::ring_reader(std::move(to_parent), shm::doorbell(::dup(child_bell.fd()))), std::move(parent_bell)});
    return ring_channel(sides.back(), sleeping);
  });
}

double unix_time(std::size_t bytes, int count) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
  const double t = time_pingpong(bytes, count, [&](bool child) { return socket_channel(child ? sv[1] : sv[0]); });
  ::close(sv[0]);
  ::close(sv[1]);
  return t;
}

double tcp_time(std::size_t bytes, int count) {
  const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1) != 0 ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    die("loopback listen");
  const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0 || ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("loopback connect");
  const int s = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
  if (s < 0) die("accept");
  const int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const double t = time_pingpong(bytes, count, [&](bool child) { return socket_channel(child ? c : s); });
  ::close(c);
  ::close(s);
  ::close(l);
  return t;
}

}  // namespace

int cmd_pingpong(int argc, char** argv) {
  CLI::App app{"Half a round trip between two processes of this host, by each way a message can travel:\n"
               "a shared-memory ring with a polling reader, the same ring with the reader asleep until its\n"
               "doorbell (an eventfd), a unix socket, loopback TCP. Median of 10 batches.",
               "optcast pingpong"};
  std::vector<std::size_t> sizes{8, 4096, 65536};
  int count = 20000;
  bool json = false;
  app.add_option("--bytes", sizes, "message sizes (e.g. 8,4KiB,1MiB)")->delimiter(',')->transform(cli::byte_size(0, std::uint64_t{1} << 26));
  app.add_option("--count", count, "round trips per size and way (after a tenth as many to warm up)")->check(CLI::Range(10, 10000000));
  app.add_flag("--json", json, "one JSON object instead of the table");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  struct way {
    const char* name;
    std::function<double(std::size_t)> time;
  };
  const way ways[] = {{"ring, polling", [&](std::size_t b) { return ring_time(b, count, false); }},
                      {"ring, doorbell", [&](std::size_t b) { return ring_time(b, count, true); }},
                      {"unix socket", [&](std::size_t b) { return unix_time(b, count); }},
                      {"loopback tcp", [&](std::size_t b) { return tcp_time(b, count); }}};
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (!json) std::printf("half a round trip between two processes of this host (us, median of 10 batches of %d)\n", std::max(1, count / 10));
  if (!json) {
    std::printf("  %10s", "bytes");
    for (const auto& w : ways) std::printf(" %16s", w.name);
    std::printf("\n");
  }
  for (const std::size_t b : sizes) {
    nlohmann::ordered_json row{{"bytes", b}};
    if (!json) std::printf("  %10zu", b);
    for (const auto& w : ways) {
      const double us = w.time(b);
      row[w.name] = us;
      if (!json) {
        std::printf(" %16.2f", us);
        std::fflush(stdout);
      }
    }
    if (!json) std::printf("\n");
    out.push_back(row);
  }
  if (json) std::puts(nlohmann::ordered_json{{"half_round_trip_us", out}}.dump().c_str());
  return 0;
}

}  // namespace optcast::tools
