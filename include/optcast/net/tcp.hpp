// The TCP fabric: one process per rank, Asio TCP sockets between them.
//
// Ranks find each other through the rendezvous store on rank 0 (net/bootstrap/store.hpp):
// each rank listens on an ephemeral port and publishes "host:port" there. Connections
// open on first use, one per direction and pair (a circulant broadcast opens about
// 2 log2 p per rank), and begin with a handshake (magic, protocol version, job id, rank,
// job size) that refuses anything else with a clear reason. A frame is a 24-byte header
// (kind, flags, tag, length) and the payload, written with one gather-write; a payload
// whose receive is already posted is read straight into the destination, others are
// buffered until their receive is posted.
//
// The environment a rank reads to join its job is in optcast/net/job.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "optcast/fabric.hpp"
#include "optcast/net/job.hpp"

namespace asio {
class io_context;
}

namespace optcast::tcp {

using config = job_config;

// Joins the job: starts the store (rank 0), listens, registers with the store; throws
// setup_error on failure. Destroying the fabric says goodbye to the store (rank 0 first
// waits for the others to finish, up to cfg.timeout).
//
// For plain programs: the fabric owns its io_context, which the blocking calls (run(),
// leave()) drive on the calling thread. Nothing else can run it.
std::shared_ptr<optcast::fabric> connect(const config& cfg);
// On the caller's io_context, for programs that run one already (asio.hpp's calls). Does
// not run `io` (the store is reached from a thread of its own); the fabric's work goes
// through a strand on it, and run() hands calls to the threads that run it. leave() and
// the destructor work from any thread while `io` runs (the fabric is closed on its strand,
// the job's outcome awaited off it); with nothing running `io` and `io` not stopped,
// they wait a second to learn so (and warn): stop the loop first, as a service does.
std::shared_ptr<optcast::fabric> connect(asio::io_context& io, const config& cfg);

// "host:port" a TCP fabric listens on for its peers (empty for other fabrics).
std::string listen_address(const optcast::fabric& f);
// How many data connections a TCP fabric has opened and accepted so far.
struct connection_counts {
  int outgoing = 0;
  int incoming = 0;
  // Messages received by single copy from ranks of this host (job_config::shm).
  std::uint64_t single_copies = 0;
  // Of the outgoing and incoming, those through shared memory (job_config::shm).
  int in_memory = 0;
  // Of the incoming, those that also carry this rank's messages to the peer (it opened no
  // connection of its own: a pair's messages both ways on one).
  int both_ways = 0;
  // Connections it opened and then left for the peer's own to it, the two ranks having
  // opened toward each other at once (not in outgoing).
  int merged = 0;
};
connection_counts connections(const optcast::fabric& f);
// The room a TCP fabric gives messages that arrive before their receive (job_config's
// unexpected limits as they apply to its host; zeros for other fabrics).
job_config::held_limits unexpected_limits(const optcast::fabric& f);

}  // namespace optcast::tcp
