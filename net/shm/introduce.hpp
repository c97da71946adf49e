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
// descriptor that came is closed.
tl::expected<std::vector<int>, std::string> recv_with_fds(int sock, std::span<std::byte> bytes, std::size_t want);

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

}  // namespace optcast::shm
