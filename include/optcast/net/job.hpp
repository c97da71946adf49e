// A rank's place in a job, shared by the fabrics that run one process per rank (TCP,
// libfabric): where the store is, who hosts it, the job id, timeouts. What the job's
// communicators take beyond this (their cost model, default algorithm) is
// optcast/join.hpp's.
//
// Environment (job_config::from_env). Rank, size, store and job id come from the
// launcher that started the program (net/bootstrap/launcher_detect.hpp: PMIx, as under mpirun;
// torchrun's variables; Slurm's srun), each overridden by its OPTCAST_* variable:
//   OPTCAST_RANK, OPTCAST_SIZE   this process's rank and the job's size
//   OPTCAST_STORE                where the ranks meet: host:port or tcp://host:port (the
//                                store rank 0 hosts), file:///shared/dir, or
//                                redis://[:password@]host[:port][/prefix]
//   OPTCAST_STORE_PORT           the port of the store when the launcher names its host
//   OPTCAST_STORE_EXTERNAL       1: the TCP store runs apart from the ranks (`optcast store`,
//                                or a launcher's own), so rank 0 does not host it and any
//                                rank, rank 0 too, may die while the others go on
//   OPTCAST_REJOIN               1: this process replaces a rank that failed, in a job
//                                that goes on (optcast::grow; TCP store only)
//   OPTCAST_REDIS_PASSWORD       the Redis store's password, kept out of the URL
//   OPTCAST_HOST                 address or host name to listen on and advertise
//   OPTCAST_IFNAME               or the interfaces to take it from: "eth0", "eth,ib"
//                                (prefixes), "=eth0" (exactly), "^docker,lo" (all but)
//                                (default: the local address toward the TCP store; with
//                                other stores, the first interface up that is not loopback)
//   OPTCAST_FAMILY               4 or 6: the address family to prefer (default: IPv4
//                                when an interface has both)
//   OPTCAST_JOB_ID               64-bit job id; peers from another job are refused; the
//                                file and Redis stores' keys are prefixed with it
//                                (default: the launcher's; else rank 0 draws one and the
//                                TCP store hands it out)
//   OPTCAST_SECRET               the job secret, at least 16 bytes: every connection
//                                (store and data) must prove it knows it (--np sets one)
//   OPTCAST_SECRET_FILE          or a file holding it (readable by its owner only)
//   OPTCAST_ENCRYPT              1: the TCP fabric encrypts every frame, and the TCP store
//                                every message after its handshake (needs a secret)
//   OPTCAST_TIMEOUT              default collective deadline, seconds (default 120)
//   OPTCAST_BOOTSTRAP_TIMEOUT    how long to wait for the store, seconds (60)
//   OPTCAST_PORTS                k of the k-port model (default 1)
//   OPTCAST_SHM                  0: ranks of one host talk through loopback TCP, as
//                                ranks of different hosts do (default 1: through
//                                shared memory, job_config::shm)
//   OPTCAST_SHM_MIN              there, the smallest message read straight out of the
//                                sender's memory (bytes, default 262144)
//   OPTCAST_SHM_MOVE_MIN         the same for a message no reduction combines, where the
//                                host's ranks have a core each (bytes, default 32768)
//   OPTCAST_UNEXPECTED_LIMIT     bytes of messages a rank holds for receives not yet
//                                posted, from all peers together (default, or 0:
//                                automatic, job_config::limits_for)
//   OPTCAST_UNEXPECTED_PEER_LIMIT  the same from any one peer (default, or 0: the total)
//   OPTCAST_STORE_FD             set by the local launcher for rank 0: a listening socket
//                                to serve the store on
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "optcast/error.hpp"
#include "optcast/net/kv_store.hpp"

namespace optcast {

namespace store {
// Where optcast's TCP store listens: "host:port" split.
struct address {
  std::string host;
  std::uint16_t port = 0;
  // host:port, an IPv6 host in brackets.
  std::string str() const { return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port); }
};
}  // namespace store

struct job_config {
  int rank = 0;
  int size = 1;
  store::address store{"127.0.0.1", 29500};
  // Set: the ranks meet in this store, the program's own (optcast/net/kv_store.hpp),
  // instead of optcast's TCP store at `store` (and host_store, store_fd do not apply).
  std::shared_ptr<kv_store> kv;
  // Rank 0 hosts the store at `store` (or on store_fd). False: the store runs elsewhere
  // (a test harness, an external rendezvous service).
  bool host_store = true;
  // The ranks meet through the PMIx server of the launcher that started them (mpirun,
  // prterun, srun --mpi=pmix): from_env sets it when a PMIx launcher gives rank and size
  // and OPTCAST_STORE is not set. Every rank publishes (one fence) as often as the others.
  bool pmix = false;
  int store_fd = -1;
  // This process replaces rank `rank`, which failed, in a job whose survivors went on
  // without it (optcast/survive.hpp's grow and admitted): it joins the job's TCP store in
  // that rank's slot and waits to be taken into the members' communicator.
  bool rejoin = false;
  std::string host;          // empty: chosen by ifname, else the local address toward the store
  std::string ifname;        // OPTCAST_IFNAME's language (launcher::choose_address)
  int family = 0;            // 4, 6, or 0: IPv4 when there is a choice
  std::string launcher;      // who set rank and size, for messages ("Slurm", "OPTCAST_RANK", ...)
  std::uint64_t job_id = 0;  // 0: chosen by rank 0
  // Every rank's store and data connections prove they know it (net/auth/auth.hpp);
  // empty: no authentication, and anyone who reaches the store may join (rank 0 warns).
  std::string secret;
  // TCP: every frame's payload encrypted and every frame authenticated, under a key of
  // its connection's own (ChaCha20-Poly1305), and the TCP store's messages after the
  // handshake too; needs a secret, and every rank and the store alike. For untrusted
  // networks.
  bool encrypt = false;
  int ports = 1;
  // Shared memory between ranks of one host (the same host identity: boot and network
  // namespace), net/shm: the TCP fabric's frames go through a ring per direction, which
  // a polling receiver reads with no system call, and messages of at least shm_copy_min
  // bytes by reference, the receiver copying them straight out of the sender's memory
  // (process_vm_readv: one copy). The kernel vouches for the peer (same user), so no
  // secret is needed; a job with one still proves it. false: loopback TCP, as between
  // hosts (single copy over it only in jobs with a secret).
  bool shm = true;
  std::size_t shm_copy_min = std::size_t{256} << 10;
  // A message no reduction combines (broadcast, scatter, gather, allgather, alltoall,
  // point to point) goes by reference from this size where every rank of the host has a
  // core of its own: what it reads is an operand or a block the call only forwards, and
  // its receipt comes back at once. A reduction's partial results are rewritten every
  // call, so they cross between the caches either way; and where ranks share cores a
  // receipt waits for the reader's turn: shm_copy_min there.
  std::size_t shm_move_min = std::size_t{32} << 10;
  // Messages that arrive before their receive is posted wait in memory; a peer (or a
  // stranger holding the job id) must not make this rank hold more than this many bytes
  // of them, each counted with its record's overhead beside its payload. Beyond it the
  // job fails with errc::limit_exceeded, before anything is allocated. A program whose
  // ranks run far ahead of their receivers needs more. 0: automatic (limits_for).
  std::size_t unexpected_limit = 0;
  // The same for the messages of one peer, so that one peer cannot take all of it. On
  // libfabric (whose provider holds them) the sender enforces it, from the receiver's
  // confirmations, and unexpected_limit does not apply. 0: automatic.
  std::size_t unexpected_peer_limit = 0;
  struct held_limits {
    std::size_t total = 0, peer = 0;
  };
  // What the TCP fabric counts for each message it holds beside its payload: its record
  // and the allocations' headers (net/tcp/held.hpp), so that empty messages fill the room
  // too and what the limits admit is what the process holds.
  static constexpr std::size_t held_message_overhead = 144;
  // The limits in force on a rank whose host runs `ranks_here` ranks of the job (itself
  // included): each one set as it is; automatic, the total is a quarter of the host's
  // memory shared equally by those ranks, at least 64 MiB and at most 1 GiB, and one peer
  // may take all of it (set the peer limit lower for an earlier error naming the peer).
  held_limits limits_for(int ranks_here) const noexcept;
  // How a rank waits for the network while a call of its is pending, on a loop the fabric
  // owns (a caller's io_context is the caller's to run): `block` sleeps in epoll_wait;
  // `spin` polls the sockets without sleeping, yielding the core after each empty poll;
  // `adaptive` (default) spins up to poll_limit before sleeping, as long as most recent
  // waits ended that soon, and stops spinning when a yield gives the core away (more ranks
  // than cores). No call pending, nothing spins: an idle communicator sleeps.
  enum class poll_mode { adaptive, spin, block };
  poll_mode poll = poll_mode::adaptive;
  std::chrono::microseconds poll_limit{200};
  std::chrono::milliseconds bootstrap_timeout{std::chrono::seconds(60)};
  // The default collective deadline, and how long rank 0 waits, when closing, for the
  // other ranks to finish.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};

  // From the environment (above); throws setup_error naming what is missing or wrong,
  // and, when no launcher is found, everything it looked for.
  static job_config from_env();
  // The same from any environment: `env(name)` is the variable's value or nullptr.
  static job_config from_env(const std::function<const char*(const char*)>& env);
  // Only the settings of this rank's own, for a program whose rank, size and store come
  // from elsewhere (torch.distributed): OPTCAST_HOST, OPTCAST_IFNAME, OPTCAST_FAMILY,
  // OPTCAST_SECRET or OPTCAST_SECRET_FILE, OPTCAST_ENCRYPT, OPTCAST_PORTS, OPTCAST_SHM,
  // OPTCAST_SHM_MIN, OPTCAST_SHM_MOVE_MIN, OPTCAST_POLL, OPTCAST_POLL_US and the unexpected-message limits; each one unset leaves its default. Throws setup_error.
  void read_rank_env(const std::function<const char*(const char*)>& env);
};

}  // namespace optcast
