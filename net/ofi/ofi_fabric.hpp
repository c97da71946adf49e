// The libfabric fabric's one class, shared by the files of net/ofi: ofi.cpp (choosing a
// provider, opening the endpoint, exchanging addresses through the store), progress.cpp
// (operations: posting, cancelling, completions, deadlines), internal.cpp (its own
// traffic: credits, control receives, sinks), probes.cpp, survive.cpp (a peer's death,
// its replacement) and libfabric.cpp (the library loaded on first use). Internal to net/ofi.
#pragma once

#include "optcast/net/ofi.hpp"
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <stdexcept>
#include <optional>
#include <thread>
#include <sched.h>
#include <unistd.h>
#include <asio/any_io_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include "../common/job_fabric.hpp"
#include "../common/op_queue.hpp"
#include "../common/owned_loop.hpp"
#include "../common/stall.hpp"
#include "optcast/log.hpp"

namespace optcast::ofi {

namespace impl {

constexpr auto api_version = FI_VERSION(1, 17);

// The functions libfabric exports that optcast calls (the rest of its interface is
// inline, through the objects' operation tables), from the library loaded on first use
// (libfabric.cpp): liboptcast does not link libfabric.
struct libfabric_api {
  decltype(&::fi_getinfo) getinfo;
  decltype(&::fi_freeinfo) freeinfo;
  decltype(&::fi_dupinfo) dupinfo;
  decltype(&::fi_fabric) fabric;
  decltype(&::fi_strerror) strerror;
};
// Loads libfabric ($OPTCAST_LIBFABRIC, else its soname) once; nullptr and the reason
// where it cannot.
const libfabric_api* try_lf(std::string* why) noexcept;
// The same, throwing setup_error with the reason. Anything holding a libfabric object
// got it through here, so its clean-up may call it without a check.
const libfabric_api& lf();

inline std::string fi_error(int ret) { return std::string(lf().strerror(ret < 0 ? -ret : ret)); }

template <class T>
struct fid_deleter {
  void operator()(T* p) const noexcept {
    if (p) fi_close(&p->fid);
  }
};
template <class T>
using fid_ptr = std::unique_ptr<T, fid_deleter<T>>;
struct info_deleter {
  void operator()(fi_info* i) const noexcept {
    if (i) try_lf(nullptr)->freeinfo(i);
  }
};
using info_ptr = std::unique_ptr<fi_info, info_deleter>;

// Providers that fail optcast's tests with Debian 12's libfabric 1.17: sockets and
// udp;ofi_rxd hang on large messages; net loses messages once a rank talks to more than
// two peers (a 4-rank barrier waits forever, with or without its wait fd).
inline bool unreliable(const std::string& prov) { return prov == "sockets" || prov == "udp;ofi_rxd" || prov == "net"; }

inline std::string rank_name(int r) { return "rank " + std::to_string(r); }

// Where an operation is, in operation::transport.state's low bits; its ticket (the context
// the provider holds) in transport.ctx[0]; registered memory, if any, in transport.ctx[1].
enum : std::uintptr_t { st_none = 0, st_retry, st_posted, st_cancelling, st_lost, st_reaped, st_failing };
inline fid_mr*& mr_of(operation& op) { return *reinterpret_cast<fid_mr**>(&op.transport.ctx[1]); }

// The provider's context for a posted operation, apart from the operation: a send to a
// peer that died may never be given back (rxm 1.17 keeps a rendezvous send whose receiver
// died forever), and its operation must end all the same. Its ticket is then abandoned
// (op null), stays with the provider and is not used again; a late completion of it is
// dropped.
struct ticket {
  fi_context2 ctx{};  // first: the provider's context pointer is the ticket's
  operation* op = nullptr;
  ticket* next_free = nullptr;
  int abandoned_from = -1;  // a receive from this dead peer, cancelled, not yet given back
};
inline ticket*& ticket_of(operation& op) { return *reinterpret_cast<ticket**>(&op.transport.ctx[0]); }

class ofi_fabric final : public detail::job_fabric {
public:
  ofi_fabric(asio::io_context& io, const config& cfg) : job_fabric(io), cfg_(cfg), wait_(ex_) {
    // The provider holds what arrives early, out of sight of how many ranks share the
    // host: the automatic limit is a host's of one rank.
    cfg_.unexpected_peer_limit = cfg_.limits_for(1).peer;
  }

  ~ofi_fabric() override { close(); }

  void bootstrap();

  // Every rank's endpoint goes into the address vector before anything is sent: a
  // message from a source the receiver has not inserted could not match a directed
  // receive (shm, rxm).
  void insert_all_peers();
  // Rank r's published endpoint (PROVIDER|HEX) into `name`, padded for the address vector;
  // else why not.
  std::string endpoint_of(int r, const std::string& published, std::vector<unsigned char>& name, std::size_t& length) const;

  std::string_view name() const noexcept override { return "ofi"; }
  const std::string& provider() const noexcept { return provider_; }

  bool start(operation& op) noexcept override;
  void cancel(operation& op, std::error_code ec) noexcept override;

  // Takes every outstanding operation back from the provider (quiesce) before any is
  // completed here: a coroutine woken by the first may free the others' memory.
  void abort(std::error_code ec, std::string detail) noexcept override;
  // A transfer failed on the peer's side: its operation waits in lost_ for the cause.
  void lost_peer(const std::string& why);
  std::error_code leftover(std::uint32_t seq) override;

  // Surviving a peer (survive.cpp): job rank r is cut off (what waits on it given back by
  // the provider first), the communicators it was in revoked.
  // On rxm (tcp;ofi_rxm), where it is tested (chaos --shrink). Not on shm yet: there a
  // survivor's send of a revoked communicator to a live peer was seen to wait for its
  // deadline (not understood yet), so a peer's loss still fails the fabric as a whole.
  bool survives_failures() const noexcept override { return survives_; }
  void lose_peer(int r, std::error_code ec, const std::string& why) noexcept override;
  void retire(std::uint32_t id) noexcept override;
  // Replacements (optcast::grow) come through optcast's TCP store, where a peer's loss
  // leaves the endpoint usable (survives_): the replacement's endpoint is looked up and
  // inserted in the dead one's place (survive.cpp).
  bool takes_replacements() const noexcept override { return survives_ && !cfg_.kv && !cfg_.pmix; }
  void reset_peer(int r) noexcept override;
  void refuse_replacement(int r, const std::string& why);
  void insert_replacement(int r, std::vector<unsigned char> name, std::chrono::steady_clock::time_point until);

private:
  const job_config& job_settings() const noexcept override { return cfg_; }
  void grace_over(const std::string& why) noexcept override;
  void fail_communicator(std::uint32_t id, std::error_code ec, const std::string& why) noexcept override;
  // Ends the operations of q for which which(op, arg) holds with `ec`: those the provider
  // holds are cancelled and end when it gives them back (their memory is the provider's
  // until then); those queued here go into `now`, for the caller to complete once it has
  // collected all.
  void give_up(detail::op_queue& q, bool (*which)(const operation&, std::uint32_t), std::uint32_t arg, std::error_code ec,
               detail::op_queue& now) noexcept;
  void complete_all(detail::op_queue& q, std::error_code ec, const std::string& why) noexcept;
  void on_closed() noexcept override {
    std::error_code ignored;
    wait_.close(ignored);
    sink_timer_.cancel();
  }
  static std::string addr_key(int r) { return "optcast/ofi/" + std::to_string(r); }

  bool fail_now(operation& op, std::error_code ec, const std::string& why);
  enum class posted { yes, again, failed };

  // Hands an operation to the provider, or queues it behind those the provider refused
  // with -FI_EAGAIN (they are retried, in order, after progress).
  std::error_code submit(operation& op);
  posted try_post(operation& op, std::error_code& ec);
  void release_mr(operation& op);
  // The operation of a context the provider gave back; null for an abandoned ticket.
  operation* op_of(void* ctx) noexcept;
  ticket& take_ticket(operation& op);
  void free_ticket(operation& op) noexcept;
  // A send to a dead peer ends now; its ticket stays with the provider.
  void abandon(operation& op) noexcept;
  void finish(operation& op, std::error_code ec);
  // Cancels every posted operation and reads the CQ until the provider has given each
  // back (into lost_, uncompleted), for a bounded time; if some are still out then, the
  // endpoint is closed, which drops them. The endpoint stays open otherwise: with shm, a
  // rank of the same process still sending to it would touch the closed region.
  void quiesce();
  // Moves an operation the provider gave back (completed) from posted_ to reaped_.
  void hold(operation& op);

  // Reads the CQ until it is empty; completions resume their coroutines. Returns whether
  // anything completed.
  bool drain();
  void progress();
  // The poller's look at the completion queue between the loop's turns (job_fabric.hpp).
  bool check_network() override;
  void progress_soon();

  // Sleeps on the CQ's fd when libfabric says nothing is pending (fi_trywait); polls
  // while operations are outstanding when there is no fd.
  void arm();
  std::string waiting_for(std::uint32_t seq) const override;

  // A message of a mismatched call that matches no receive (another root, another
  // schedule) would wait in the provider's unexpected queue until the deadline. So while
  // a rank's receives make no progress it peeks (FI_PEEK) at what each peer has sent for
  // the collectives it waits in and checks the signature's hash; and after each
  // collective one peek looks for a message of it that nothing received. One peek at a
  // time, from probes_. Not on shm, whose peeks go unanswered: there such a mismatch
  // ends at the deadline, or is caught up front with OPTCAST_CHECK=1.
  struct probe {
    std::uint32_t seq;
    int src;             // -1: any source, a finished collective's leftovers
    call_signature sig;  // of the finished collective
  };
  void arm_probes();
  void probe_tick();
  void next_probe();
  // A peek's answer: found (with the message's tag and CQ data) or not. Returns false
  // if it failed the fabric.
  bool probe_answer(bool found, std::uint64_t tag, std::uint64_t data);
  bool is_probe(void* ctx) const noexcept { return ctx == &probe_ctx_; }

  // Messages that arrive before their receive is posted are held by the provider (rxm
  // copies eager ones into memory of its own, without a bound), where this rank cannot
  // count them. So the sender counts instead: a receiver tells a peer how many bytes it
  // has received from it (8 bytes, tag {credit_seq, 0}) each time another window() has
  // come, and the sender takes these in while it has a window or more unconfirmed. A send
  // that would leave more than cfg_.unexpected_peer_limit bytes unconfirmed fails with
  // limit_exceeded (and so the job), as TCP's receiver does when it would hold more.
  static constexpr std::uint32_t credit_seq = seq_layout::p2p(seq_layout::reserved_id, seq_layout::max_user_tag);  // no call's
  std::uint64_t window() const noexcept { return std::max<std::uint64_t>(cfg_.unexpected_peer_limit / 4, 1); }
  // The fabric's own operations (internal_op): credits, control receives, sinks.
  static bool internal(const operation& op) noexcept { return op.on_complete == &ofi_fabric::internal_done; }
  // A send of op.size bytes to op.peer: within the limit (else why, set), and counted.
  bool count_send(const operation& op, std::string& why);
  // A data receive from `peer` completed.
  void count_received(int peer, std::size_t bytes);
  void await_confirmation(int peer);
  void post_internal(op_kind kind, int peer, std::uint64_t value);
  static void internal_done(operation& op) noexcept;

  // Control messages (fabric_base's revocations and agreements) come on control_seq, for
  // which no call posts a receive: one standing receive per peer takes them, and is posted
  // again after each. A revoked communicator's messages, which no receive will take any
  // more (a large one's sender waits for its receiver, an eager one fills the provider's
  // unexpected queue), go to a standing sink per peer, a receive matching any message of
  // the communicator, until it is retired. Standing receives are kept in
  // standing_, apart from posted_: they do not keep a polling provider busy.
  void post_control_receive(int peer, std::vector<std::byte> buf);
  void post_sink(std::uint32_t id, int peer);
  static std::uint64_t sink_ignore() noexcept { return ~(std::uint64_t{seq_layout::ids - 1} << (seq_layout::id_shift + 32)); }
  void control_received(operation& op) noexcept;
  void sink_received(operation& op) noexcept;
  detail::op_queue& queue_of(const operation& op) noexcept;
  struct flow {
    std::uint64_t sent = 0, confirmed = 0;  // bytes to the peer; of those, it has confirmed
    std::uint64_t received = 0, told = 0;   // bytes from the peer; of those, confirmed to it
    bool awaiting = false;                  // a receive for its confirmation is posted
  };
  struct internal_op {
    enum role_t : std::uint8_t { credit, control, sink };
    operation op;
    ofi_fabric* fabric = nullptr;
    role_t role = credit;
    std::uint64_t value = 0;      // credit: the confirmation, bytes received
    std::vector<std::byte> buf;   // control: the message
    std::size_t got = 0;          // control, sink: bytes that came
    std::uint32_t comm = 0;       // sink: the revoked communicator
    std::list<internal_op>::iterator at;  // its place in internal_ops_, to erase it there
  };
  static internal_op& internal_of(operation& op) noexcept { return *static_cast<internal_op*>(op.context); }
  internal_op& add_internal(internal_op::role_t role, op_kind kind, int peer, tag t, std::byte* data, std::size_t size);
  void erase_internal(internal_op& io) noexcept;
  static bool standing(const operation& op) noexcept {
    return internal(op) && static_cast<const internal_op*>(op.context)->role != internal_op::credit;
  }

  config cfg_;
  // Before the provider's objects: it may hold tickets until its endpoint closes.
  std::deque<ticket> tickets_;
  // Per rank, its abandoned receives the provider has not given back: they name its
  // address vector entry, which its replacement's may reuse (reset_peer waits for none).
  std::vector<int> abandoned_recvs_;
  ticket* free_tickets_ = nullptr;
  std::string provider_;
  bool register_ = false;
  bool survives_ = false;
  std::size_t max_msg_ = 0;
  std::uint64_t last_key_ = 0;
  std::vector<fi_addr_t> addrs_;  // per rank, from the address vector
  info_ptr info_;
  fid_ptr<fid_fabric> fabric_;
  fid_ptr<fid_domain> domain_;
  fid_ptr<fid_cq> cq_;
  fid_ptr<fid_av> av_;
  fid_ptr<fid_ep> ep_;
  asio::posix::stream_descriptor wait_;
  bool waiting_ = false;
  bool progress_posted_ = false;
  detail::op_queue posted_;  // with the provider
  detail::op_queue retry_;   // refused with -FI_EAGAIN, to post after progress
  detail::op_queue lost_;    // failed on the peer's side, waiting for the cause (lost_peer)
  detail::op_queue reaped_;  // given back by the provider, to be completed here
  detail::op_queue standing_;  // control receives and sinks with the provider
  std::size_t largest_recv_ = 0;  // of the calls' receives
  std::vector<std::unique_ptr<std::byte[]>> discard_;  // the sinks' buffers, the newest last
  std::size_t discard_size_ = 0;
  fi_context2 probe_ctx_{};
  std::deque<probe> probes_;
  std::optional<probe> probing_;  // the peek with the provider
  bool peek_works_ = false;       // the provider answers FI_PEEK (and has not refused one)
  asio::steady_timer probe_timer_{ex_};
  // A polling provider (shm) moves a message into a sink only while this rank polls, and
  // its sender waits until then: while sinks are posted the rank polls on a timer, every
  // millisecond after one took a message, backing off to every 100 ms.
  std::size_t sinks_ = 0;
  std::chrono::milliseconds sink_poll_{1};
  asio::steady_timer sink_timer_{ex_};
  bool sink_timer_armed_ = false;
  void poll_sinks_later();
  bool probe_timer_armed_ = false;
  std::uint64_t received_ = 0, received_at_tick_ = 0;  // receive completions (data)
  std::vector<flow> flow_ = std::vector<flow>(static_cast<std::size_t>(std::max(cfg_.size, 0)));
  std::list<internal_op> internal_ops_;  // confirmations in flight, either way
};

}  // namespace impl

}  // namespace optcast::ofi
