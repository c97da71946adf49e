#include "introduce.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "core/little_endian.hpp"

namespace optcast::shm {

namespace {

constexpr std::uint64_t hello_magic = 0x6f6c6c65685f6d73;  // "sm_hello"
constexpr std::uint32_t hello_version = 1;
constexpr std::size_t hello_bytes = 32;
constexpr std::size_t max_fds = 8;  // room for more than any message sends: extras are seen, then refused

std::string error_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

// A doorbell from a peer is written to without blocking: it must be an eventfd, whatever
// the peer says, or a full pipe passed in its place would stop this process.
std::string check_doorbell(int fd) {
  char target[64] = {};
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  if (n < 0 || std::string_view(target, static_cast<std::size_t>(n)) != "anon_inode:[eventfd]") return "its doorbell is no eventfd";
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return error_text("its doorbell");
  return {};
}

}  // namespace

tl::expected<peer_identity, std::string> peer_of(int sock) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return tl::unexpected(error_text("SO_PEERCRED"));
  if (cred.pid <= 0) return tl::unexpected(std::string("the socket has no peer process"));
  return peer_identity{cred.pid, cred.uid};
}

std::string send_with_fds(int sock, std::span<const std::byte> bytes, std::span<const int> fds) {
  if (fds.size() > max_fds) return "too many descriptors";
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * max_fds)> control{};
  std::size_t sent = 0;
  bool attached = fds.empty();
  while (sent < bytes.size() || !attached) {
    iovec iov{const_cast<std::byte*>(bytes.data() + sent), bytes.size() - sent};  // NOLINT: sendmsg does not write
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!attached) {
      msg.msg_control = control.data();
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return "the peer closed the socket";
    if (n < 0) return error_text("sendmsg");
    attached = true;
    sent += static_cast<std::size_t>(n);
  }
  return {};
}

tl::expected<std::vector<int>, std::string> recv_with_fds(int sock, std::span<std::byte> bytes, std::size_t want, int timeout_ms) {
  std::vector<int> fds;
  std::size_t got = 0;
  bool truncated = false;
  while (got < bytes.size()) {
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * max_fds)> control{};
    iovec iov{bytes.data() + got, bytes.size() - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{sock, POLLIN, 0};
      const int ready = ::poll(&p, 1, timeout_ms);
      if (ready > 0 || (ready < 0 && errno == EINTR)) continue;
      close_all(fds);
      return tl::unexpected(ready == 0 ? std::string("the peer sent nothing within ") + std::to_string(timeout_ms) + " ms"
                                       : error_text("poll"));
    }
    if (n < 0) {
      close_all(fds);
      return tl::unexpected(error_text("recvmsg"));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.push_back(fd);
      }
    }
    truncated |= (msg.msg_flags & MSG_CTRUNC) != 0;
    if (n == 0) {
      close_all(fds);
      return tl::unexpected(std::string("the peer closed the socket"));
    }
    got += static_cast<std::size_t>(n);
  }
  if (truncated || fds.size() != want) {
    close_all(fds);
    return tl::unexpected("expected " + std::to_string(want) + " descriptors, got " + (truncated ? "more than " : "") +
                          std::to_string(fds.size()));
  }
  return fds;
}

tl::expected<peer_identity, std::string> vouch(int sock, uid_t user) {
  const auto peer = peer_of(sock);
  if (!peer) return tl::unexpected(peer.error());
  if (peer->uid != user)
    return tl::unexpected("process " + std::to_string(peer->pid) + " runs as user " + std::to_string(peer->uid) + ", not " +
                          std::to_string(user));
  return peer;
}

offer make_offer(const introduction& me) {
  offer o{segment::create(me.capacity), {}};
  wire::put_u64(o.hello.data(), hello_magic);
  wire::put_u32(o.hello.data() + 8, hello_version);
  wire::put_u64(o.hello.data() + 16, me.job);
  wire::put_u32(o.hello.data() + 24, static_cast<std::uint32_t>(me.rank));
  wire::put_u32(o.hello.data() + 28, static_cast<std::uint32_t>(me.peer_rank));
  return o;
}

std::string send_offer(int sock, const offer& o, const doorbell& mine) {
  const int give[2] = {o.ring.fd(), mine.fd()};
  return send_with_fds(sock, o.hello, give);
}

tl::expected<peer_offer, std::string> take_offer(int sock, std::uint64_t job, int timeout_ms) {
  std::array<std::byte, hello_bytes> in{};
  auto fds = recv_with_fds(sock, in, 2, timeout_ms);
  if (!fds) return tl::unexpected(fds.error());
  // Taken at once: each refusal below closes them.
  auto theirs = segment::adopt((*fds)[0]);
  doorbell bell((*fds)[1]);
  if (wire::get_u64(in.data()) != hello_magic || wire::get_u32(in.data() + 8) != hello_version)
    return tl::unexpected(std::string("the peer's hello is no shared-memory hello of this version"));
  if (wire::get_u64(in.data() + 16) != job) return tl::unexpected(std::string("the peer belongs to another job"));
  if (!theirs) return tl::unexpected("the peer's ring: " + theirs.error());
  if (auto e = check_doorbell(bell.fd()); !e.empty()) return tl::unexpected(e);
  return peer_offer{static_cast<int>(wire::get_u32(in.data() + 24)), static_cast<int>(wire::get_u32(in.data() + 28)),
                    std::move(*theirs), std::move(bell)};
}

tl::expected<channel, std::string> meet(const introduction& me, offer mine, peer_offer theirs, const peer_identity& who) {
  if (theirs.rank != me.peer_rank || theirs.peer_rank != me.rank)
    return tl::unexpected("the peer says it is rank " + std::to_string(theirs.rank) + " meeting rank " + std::to_string(theirs.peer_rank) +
                          ", not rank " + std::to_string(me.peer_rank) + " meeting rank " + std::to_string(me.rank));
  // The reader wakes the same doorbell as the writer: a descriptor of its own, so that
  // each end closes its own.
  const int second = ::fcntl(theirs.bell.fd(), F_DUPFD_CLOEXEC, 0);
  if (second < 0) return tl::unexpected(error_text("dup"));
  theirs.ring.close_fd();
  mine.ring.close_fd();
  return channel{ring_writer(std::move(theirs.ring), std::move(theirs.bell)), ring_reader(std::move(mine.ring), doorbell(second)), who};
}

tl::expected<channel, std::string> introduce(int sock, const introduction& me, const doorbell& mine) {
  const auto who = vouch(sock, me.user);
  if (!who) return tl::unexpected(who.error());
  offer o = make_offer(me);
  if (auto e = send_offer(sock, o, mine); !e.empty()) return tl::unexpected(e);
  auto theirs = take_offer(sock, me.job);
  if (!theirs) return tl::unexpected(theirs.error());
  return meet(me, std::move(o), std::move(*theirs), *who);
}

}  // namespace optcast::shm
