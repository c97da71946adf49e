// A rank's place in a job, shared by the fabrics that run one process per rank (TCP,
// libfabric): where the store is, who hosts it, the job id, timeouts. What the job's
// communicators take beyond this (their cost model, default algorithm) is
// optcast/join.hpp's.
//
// Environment (job_config::from_env). Rank, size, store and job id come from the
// launcher that started the program (optcast/net/launcher.hpp: PMIx, as under mpirun;
// torchrun's variables; Slurm's srun), each overridden by its OPTCAST_* variable:
//   OPTCAST_RANK, OPTCAST_SIZE   this process's rank and the job's size
//   OPTCAST_STORE                where the ranks meet: host:port or tcp://host:port (the
//                                store rank 0 hosts), file:///shared/dir, or
//                                redis://[:password@]host[:port][/prefix]
//   OPTCAST_STORE_PORT           the port of the store when the launcher names its host
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
//   OPTCAST_ENCRYPT              1: the TCP fabric encrypts every frame (needs a secret)
//   OPTCAST_TIMEOUT              default collective deadline, seconds (default 120)
//   OPTCAST_BOOTSTRAP_TIMEOUT    how long to wait for the store, seconds (60)
//   OPTCAST_PORTS                k of the k-port model (default 1)
//   OPTCAST_UNEXPECTED_LIMIT     bytes of messages a rank holds for receives not yet
//                                posted, from all peers together (default 1 GiB)
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
#include "optcast/net/store.hpp"

namespace asio {
class any_io_executor;
}

namespace optcast {

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
  std::string host;          // empty: chosen by ifname, else the local address toward the store
  std::string ifname;        // OPTCAST_IFNAME's language (launcher::choose_address)
  int family = 0;            // 4, 6, or 0: IPv4 when there is a choice
  std::string launcher;      // who set rank and size, for messages ("Slurm", "OPTCAST_RANK", ...)
  std::uint64_t job_id = 0;  // 0: chosen by rank 0
  // Every rank's store and data connections prove they know it (net/auth/auth.hpp);
  // empty: no authentication, and anyone who reaches the store may join (rank 0 warns).
  std::string secret;
  // TCP: every frame's payload encrypted and every frame authenticated, under a key of
  // its connection's own (ChaCha20-Poly1305); needs a secret. For untrusted networks.
  bool encrypt = false;
  int ports = 1;
  // Messages that arrive before their receive is posted wait in memory; a peer (or a
  // stranger holding the job id) must not make this rank hold more than this many bytes
  // of them. Beyond it the job fails with errc::limit_exceeded, before anything is
  // allocated. A program whose ranks run far ahead of their receivers needs more.
  std::size_t unexpected_limit = std::size_t{1} << 30;
  // The same for the messages of one peer, so that one peer cannot take all of it. On
  // libfabric (whose provider holds them) the sender enforces it, from the receiver's
  // confirmations, and unexpected_limit does not apply.
  std::size_t unexpected_peer_limit = std::size_t{1} << 30;
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
  // OPTCAST_SECRET or OPTCAST_SECRET_FILE, OPTCAST_ENCRYPT, OPTCAST_PORTS and the
  // unexpected-message limits; each one unset leaves its default. Throws setup_error.
  void read_rank_env(const std::function<const char*(const char*)>& env);
};

// The newest collective a rank finished, which its goodbye names to the store.
struct last_call {
  std::uint32_t seq = 0;
  std::string signature;  // call_signature's wire bytes; empty: none
};

// Joining a job: rank 0 starts the store; every rank connects to it, learns the job id
// and keeps the connection, which reports dead peers. leave() says goodbye and learns
// the job's outcome. Throws setup_error on failure. With job_config::kv, the same
// through the program's store (kv_store.hpp says what it cannot do).
class job {
public:
  // What the store tells this rank runs on `events`, its event loop.
  job(const asio::any_io_executor& events, const job_config& cfg);
  ~job();
  job(const job&) = delete;
  job& operator=(const job&) = delete;

  const job_config& config() const noexcept { return cfg_; }
  std::uint64_t id() const noexcept { return id_; }
  // What the fabric publishes for its peers (where it listens), and learns of theirs.
  // Blocking, from any thread: until stored / until every key is there, or `timeout`.
  result<void> publish(std::string key, std::string value, std::chrono::milliseconds timeout);
  result<std::vector<std::string>> lookup_all(std::vector<std::string> keys, std::chrono::milliseconds timeout);
  // Without blocking: `done` runs on the job's event loop, once the key is there (up to
  // the bootstrap timeout).
  void lookup(std::string key, std::function<void(result<std::string>)> done);
  // The address this rank listens on and advertises to its peers.
  const std::string& host() const noexcept { return host_; }

  // `lost(rank)` when a rank dies; `gone(why)` when the store itself goes away;
  // `failed(code, why)` when another rank reports that it failed (report_failure).
  void on_failure(std::function<void(int rank)> lost, std::function<void(std::string why)> gone,
                  std::function<void(std::uint64_t code, std::string why)> failed = nullptr);
  // This rank failed: every other rank hears of it through the store.
  void report_failure(int code, std::string why);
  // This rank's collective `seq` waits on a peer near its deadline: the store finds the root cause
  // (store::client::report_stall); `nobody_stuck` when every rank answers.
  void report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck);
  // This rank's signature of collective `seq` (call_signature's wire bytes, empty if it
  // made no such call), for the store's inquiries into a stall: calls that differ are
  // found there. Runs on the job's event loop.
  void answer_inquiries(std::function<std::string(std::uint32_t seq)> call_of);

  // Says goodbye and waits, up to `wait`, for the job's outcome: success once every
  // rank has said goodbye, else the job's first failure (outcome_detail() says which
  // rank and why), or timeout. On rank 0 the store then closes (after the other ranks
  // have left, up to config().timeout, or a second once the job has failed). Once only;
  // later calls return the same.
  // `failed`: this rank knows the job failed (its own failure, or told of another's).
  result<void> leave(std::chrono::milliseconds wait, bool failed = false, last_call last = {}) noexcept;
  const std::string& outcome_detail() const noexcept { return outcome_detail_; }

private:
  void join_kv(const asio::any_io_executor& events);
  // The address to advertise (job_config::host, ifname, else this), logged at info.
  std::string choose_host(const std::string& toward_store) const;
  result<void> leave_kv(std::chrono::milliseconds wait, bool failed);
  result<void> leave_pmix(std::chrono::milliseconds wait, bool failed);

  job_config cfg_;
  std::uint64_t id_ = 0;
  std::string host_;
  std::unique_ptr<store::server> server_;
  std::unique_ptr<store::client> client_;
  struct kv_side;  // with job_config::kv: its worker thread and what it watches
  std::unique_ptr<kv_side> kv_;
  bool left_ = false;
  std::optional<std::string> pmix_failure_;  // job_config::pmix: "code why" of this rank's failure
  std::unique_ptr<asio::any_io_executor> pmix_events_;  // job_config::pmix: where lookups answer
  std::function<std::string(std::uint32_t)> call_of_;   // answer_inquiries
  result<void> outcome_;
  std::string outcome_detail_;
};

}  // namespace optcast
