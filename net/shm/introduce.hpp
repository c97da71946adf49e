// How two processes of one host set up their rings: over a unix stream socket, where the
// kernel says who the peer is (SO_PEERCRED: its user and process) and carries descriptors
// (SCM_RIGHTS). Each side creates the ring it will read and sends it with its doorbell;
// each adopts the other's (ring.hpp checks what it is given). Only a process of the same
// user is accepted: one that could read this process's memory anyway (ptrace), so the
// rings need no secret; a job with one still proves it on its TCP connections.
//
// The socket stays open for the link's life: its end is how a side learns at once that the
// other died, as no ring can say.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include "ring.hpp"

namespace optcast::shm {

struct peer_identity {
  pid_t pid = 0;
  uid_t uid = 0;
};

// The kernel's word on who holds the other end of a connected unix socket.
tl::expected<peer_identity, std::string> peer_of(int sock);

// Sends all of `bytes` with `fds` attached to the first part (blocking): empty, or why not.
std::string send_with_fds(int sock, std::span<const std::byte> bytes, std::span<const int> fds);
// Receives exactly bytes.size() bytes and, with them, exactly `want` descriptors (blocking).
// Any other number of descriptors, or the socket's end first, is an error, and every
// descriptor that came is closed. A non-blocking socket is waited on up to `timeout_ms`
// for each part (-1: no limit).
tl::expected<std::vector<int>, std::string> recv_with_fds(int sock, std::span<std::byte> bytes, std::size_t want,
                                                          int timeout_ms = -1);

// The two rings between this process and one peer, and the peer's identity.
struct channel {
  ring_writer out;  // rings the peer's doorbell when the peer sleeps
  ring_reader in;
  peer_identity peer;
};

struct introduction {
  std::uint64_t job = 0;  // both sides must name the same job...
  int rank = 0;           // ...and each the other's rank
  int peer_rank = 0;
  std::size_t capacity = std::size_t{1} << 18;  // of the ring this side reads
  uid_t user = 0;         // the user the peer must run as (normally this process's)
};

// Over a connected unix stream socket (blocking, both sides at once): hellos, rings and
// doorbells both ways. `mine` is this process's doorbell, which the peer will ring.
tl::expected<channel, std::string> introduce(int sock, const introduction& me, const doorbell& mine);

// The introduction in its steps, for a side that must not block (a fabric's loop) or that
// learns whom it meets from the peer's hello (an acceptor): each side sends its offer and
// takes the peer's, in either order; an acceptor takes first and answers.

// The kernel's word on the peer: refused unless it runs as `user`.
tl::expected<peer_identity, std::string> vouch(int sock, uid_t user);

// This side's half: the ring it will read and its hello.
struct offer {
  segment ring;
  std::array<std::byte, 32> hello{};
};
offer make_offer(const introduction& me);  // throws as segment::create does
// Sends it with `mine`, this process's doorbell (the socket's buffer takes it at once).
std::string send_offer(int sock, const offer& o, const doorbell& mine);

// The peer's half, as it came: its ranks are checked by the caller (meet).
struct peer_offer {
  int rank = -1;       // the rank the peer says it is...
  int peer_rank = -1;  // ...and the one it says it meets
  segment ring;        // the ring this side will write, checked (ring.hpp)
  doorbell bell;       // the peer's, checked to be an eventfd
};
// Receives the peer's offer: refused unless it is a hello of this version for `job`
// with a sealed ring and an eventfd. A socket without it yet waits up to `timeout_ms`.
tl::expected<peer_offer, std::string> take_offer(int sock, std::uint64_t job, int timeout_ms = -1);
// The two halves joined into the channel, once the peer's ranks are the ones expected.
tl::expected<channel, std::string> meet(const introduction& me, offer mine, peer_offer theirs, const peer_identity& who);

}  // namespace optcast::shm
