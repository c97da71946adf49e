// The TCP fabric: one process per rank, Asio TCP sockets between them.
//
// Ranks find each other through the rendezvous store on rank 0 (optcast/net/store.hpp):
// each rank listens on an ephemeral port and publishes "host:port" there. Connections
// open on first use, one per direction and pair (a circulant broadcast opens about
// 2 log2 p per rank), and begin with a handshake (magic, protocol version, job id, rank,
// job size) that refuses anything else with a clear reason. A frame is a 24-byte header
// (kind, flags, tag, length) and the payload, written with one gather-write; a payload
// whose receive is already posted is read straight into the destination, others are
// buffered until their receive is posted.
//
// Environment (read by config::from_env and join):
//   OPTCAST_RANK, OPTCAST_SIZE   this process's rank and the job's size (required)
//   OPTCAST_STORE                host:port of the store, hosted by rank 0 (required)
//   OPTCAST_HOST                 address to listen on and advertise (default: the local
//                                address of the connection to the store)
//   OPTCAST_JOB_ID               64-bit job id; peers from another job are refused
//                                (default: rank 0 draws one and the store hands it out)
//   OPTCAST_TIMEOUT              default collective deadline, seconds (default 120)
//   OPTCAST_BOOTSTRAP_TIMEOUT    how long to wait for the store and peers, seconds (60)
//   OPTCAST_PORTS                k of the k-port model (default 1)
//   OPTCAST_STORE_FD             set by the local launcher for rank 0: a listening socket
//                                to serve the store on
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "optcast/communicator.hpp"
#include "optcast/net/store.hpp"

namespace asio {
class io_context;
}

namespace optcast::tcp {

struct config {
  int rank = 0;
  int size = 1;
  store::address store{"127.0.0.1", 29500};
  // Rank 0 hosts the store at `store` (or on store_fd). False: the store runs elsewhere
  // (a test harness, an external rendezvous service).
  bool host_store = true;
  int store_fd = -1;
  std::string host;           // empty: the local address toward the store
  std::uint64_t job_id = 0;   // 0: chosen by rank 0
  int ports = 1;
  std::chrono::milliseconds bootstrap_timeout{std::chrono::seconds(60)};
  // How long rank 0 waits, when closing, for the other ranks to finish.
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(120)};

  // From the OPTCAST_* environment; throws setup_error naming what is missing or wrong.
  static config from_env();
};

// Joins the job: starts the store (rank 0), listens, registers with the store. Runs `io`
// while it waits; throws setup_error on failure. The fabric must be used and destroyed
// on `io`'s thread; destroying it says goodbye to the store (rank 0 first waits for the
// others to finish, up to shutdown_timeout).
std::shared_ptr<optcast::fabric> connect(asio::io_context& io, const config& cfg);

// The common case: connect(io, config::from_env()), with the communicator's default
// deadline from OPTCAST_TIMEOUT.
communicator join(asio::io_context& io);

// "host:port" a TCP fabric listens on for its peers (empty for other fabrics).
std::string listen_address(const optcast::fabric& f);
// How many data connections a TCP fabric has opened and accepted so far.
struct connection_counts {
  int outgoing = 0;
  int incoming = 0;
};
connection_counts connections(const optcast::fabric& f);

}  // namespace optcast::tcp
