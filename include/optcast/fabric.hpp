// The fabric contract: P ranks, fully connected, one-port or k-port send||recv.
//
// What a program sees of a fabric, and what the collectives are written against. The
// machinery a fabric's writer uses (checking calls' signatures, the job's outcome) is
// optcast/fabric_base.hpp's.
//
// A fabric moves tagged messages between ranks. Collectives are written against this
// interface only, so the same round loop runs over TCP, libfabric, the in-process
// fabric and the virtual-time simulator.
//
// Contract (every fabric, tested by tests/fabric_conformance.cpp):
//  - send(peer, tag, bytes) finishes when `bytes` may be reused. It never waits for the
//    matching receive to be posted: a fabric buffers a message that arrives before its
//    receive ("unexpected message") and hands it over when the receive is posted.
//  - recv(peer, tag, bytes) finishes when exactly bytes.size() bytes are in place. A
//    message of another size is errc::size_mismatch, never an overflow or a truncation.
//  - Messages match on (peer, tag); between one pair of ranks, messages with equal tags
//    match in the order they were sent. Tags carry the collective's sequence number, so
//    several collectives in flight on one communicator never cross-match.
//  - A fabric is driven by one thread at a time. Completions run from its event loop,
//    never from inside start(): a start() that finishes at once says so by returning true.
//  - Failure: abort() finishes every pending operation with the given error, and every
//    later start() fails with that same error (the cause, not a generic "broken"; the
//    collectives layer refuses new collectives with errc::broken). A collective's
//    deadline finishes its operations with errc::timeout. A fabric that survives a
//    peer's loss (fabric_base::survives_failures) fails only what waits on that peer and
//    the communicators it is in (revoke), and stays usable for the rest.
#pragma once

#include <bit>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "optcast/error.hpp"
#include "optcast/scratch.hpp"
#include "optcast/topology.hpp"

namespace asio {
class any_io_executor;
class io_context;
}

namespace optcast {

namespace detail {
class frame_arena;  // lib/runtime/frame_arena.hpp: see fabric::frames()
}

// One kind of link's LogGP parameters: latency L, overhead o, gap g, gap per byte G.
struct loggp_link {
  double L = 0, o = 0, g = 0, G = 0;
  bool operator==(const loggp_link&) const = default;
};

// The LogGP parameters of a fabric (Alexandrov et al.; LogP when G = 0): latency L,
// overhead o, gap g, gap per byte G, in the fabric's time unit.
struct loggp_params {
  double L = 0, o = 0, g = 0, G = 0;
  // Not LogGP: the time per byte to combine a received operand into one's own (the
  // reductions' compute). The simulator charges none; a live fabric's is measured by
  // calibrate. It decides between reductions that move the same bytes but combine more
  // or fewer of them (the combining broadcast against the circulant pair).
  double gamma = 0;
  // Not LogGP either: on a real network, the bandwidth a pipelined schedule loses when its
  // links change partners every round (Träff's circulant graph, the Fibonacci trees, the
  // k-port trees). Ranks drift apart by a fraction of a round; a rank a round ahead then
  // sends into a link still busy with another rank's block, and the two share it. Such
  // schedules are predicted at G (1 + sharing); those whose links keep their partners (a
  // tree that sends each rank the data once, the ring) are not. 0 in the simulator, whose
  // rounds are exact; calibrate measures it (a circulant against a ring broadcast).
  double sharing = 0;
  // Where ranks share hosts (fabric::layout()): the link between two ranks of one host
  // (shared memory, loopback); L, o, g, G above are then the network's, one rail's.
  // None: the network's everywhere.
  std::optional<loggp_link> host;
  // Not LogGP: the least time of a round of a round-based schedule with every rank
  // exchanging at once (calibrate's loaded round); 0: none beyond LogGP's.
  double round = 0;
  bool operator==(const loggp_params&) const = default;

  // The parameters of a message between two ranks of one host.
  loggp_params within_host() const noexcept {
    loggp_params p = *this;
    if (host) {
      p.L = host->L;
      p.o = host->o;
      p.g = host->g;
      p.G = host->G;
    }
    return p;
  }
};

// (collective sequence number, step within the collective).
struct tag {
  std::uint32_t seq = 0;
  std::uint32_t step = 0;

  constexpr std::uint64_t packed() const noexcept {
    return (static_cast<std::uint64_t>(seq) << 32) | step;
  }
  static constexpr tag unpack(std::uint64_t v) noexcept {
    return {static_cast<std::uint32_t>(v >> 32), static_cast<std::uint32_t>(v)};
  }
  friend constexpr bool operator==(tag, tag) = default;
};

// How a communicator's calls are numbered in a tag's seq, so that calls on
// different communicators of one fabric never match each other: the top bit says
// point-to-point (then the low bits are the user's tag), the next 11 bits are the
// communicator's id (0: the job's own; a sub-communicator's is one that none of its
// members uses for another), and the low 20 bits number its collectives, wrapping after
// 2^20 calls (messages between two ranks with equal tags match in order, so only a rank
// more than a million calls ahead of another could be confused).
namespace seq_layout {
inline constexpr std::uint32_t p2p_bit = 0x80000000u;
inline constexpr int id_shift = 20;
inline constexpr std::uint32_t ids = 1u << 11;
inline constexpr std::uint32_t reserved_id = ids - 1;  // the fabrics' own traffic (libfabric's credits)
inline constexpr std::uint32_t number_mask = (1u << id_shift) - 1;
inline constexpr std::uint32_t max_user_tag = number_mask;
constexpr std::uint32_t collective(std::uint32_t id, std::uint32_t n) noexcept { return id << id_shift | (n & number_mask); }
constexpr std::uint32_t p2p(std::uint32_t id, std::uint32_t user_tag) noexcept {
  return p2p_bit | id << id_shift | (user_tag & number_mask);
}
// The communicator a seq belongs to.
constexpr std::uint32_t id_of(std::uint32_t seq) noexcept { return (seq >> id_shift) & (ids - 1); }
// The seq of the fabrics' control messages (revocations, agreements: fabric_base's), which
// no receive is ever posted for: a fabric hands each one to fabric_base::control_arrived.
inline constexpr std::uint32_t control_seq = p2p(reserved_id, max_user_tag - 1);
}  // namespace seq_layout

// idle: a round in which the rank neither sends nor receives (its size: how many such
// rounds in a row). Only the simulator's rounds model gives it a duration (the rest of
// the round, and every further round whole); everywhere else it finishes at once.
// Round loops await it for an empty round, so that under the rounds model a rank does
// not run ahead into the next round's sends.
// compute: local work that the cost model charges (Karp et al.'s unit-time additions),
// or a wait an algorithm's schedule asks for. The simulator lets that much virtual time
// pass for the rank; real fabrics finish it at once, the work itself having been done
// on the CPU already.
enum class op_kind : std::uint8_t { send, recv, idle, compute };

class fabric;
class trace_log;

// What a rank's call of a collective was, carried by every message of it (on TCP, the
// local fabric and the simulator whole; on libfabric as a 64-bit hash), so that a
// receiver whose own call differs fails with errc::call_mismatch naming both calls,
// instead of reducing with the wrong operator or taking a message from the wrong root.
// All zero: no collective (point-to-point, or a fabric's own traffic).
struct call_signature {
  std::uint8_t coll = 0;  // optcast::collective + 1
  std::uint8_t alg = 0;   // optcast::algorithm + 1 (the one running, after the automatic choice)
  std::uint8_t op = 0;    // reduction operator (reduction.hpp's reduction_op), 0: none
  std::uint8_t type = 0;  // element type of a reduction (reduction_type), 0: none
  std::uint32_t root = 0xffffffffu;  // none
  std::uint32_t blocks = 0;
  std::uint32_t elem = 0;    // element size, bytes
  std::uint64_t bytes = 0;   // the call's size (total bytes of its shape)
  std::uint64_t counts = 0;  // hash of a v-collective's counts, 0: none

  static constexpr std::size_t wire_bytes = 32;
  bool operator==(const call_signature&) const = default;
  bool empty() const noexcept { return *this == call_signature{}; }
  void encode(std::byte* out) const noexcept;  // wire_bytes, little-endian
  static call_signature decode(const std::byte* in) noexcept;
  std::uint64_t hash() const noexcept;  // 0 for the empty signature
  // "broadcast (circulant, root 1, 1000 B, 4 blocks)".
  std::string describe() const;
};

// The one wording of a call mismatch, wherever it is found: "collective SEQ was called
// differently: HOW".
std::string called_differently(std::uint32_t seq, std::string_view how);
// HOW when both calls are known: "rank A called X, rank B Y".
std::string calls_of(int them, const call_signature& theirs, int me, const call_signature& mine);

// A receive's peer that means any peer (MPI's MPI_ANY_SOURCE): it takes the first
// message with its tag from whichever peer, and its peer is the sender's once it has
// finished. Among messages that have arrived, the earliest; messages from one peer with
// equal tags still match in order. Only fabrics whose receives_from_any() says so take
// it; the others refuse it (errc::invalid_argument).
inline constexpr int any_peer = -2;

// One send or receive. It lives in the frame of the coroutine that awaits it (no heap
// allocation per message); while started it is linked into the fabric's queues, so it
// must not move until it has finished. Awaiting it starts it and yields the byte count.
class operation {
public:
  using completion_fn = void (*)(operation&) noexcept;

  operation() = default;
  operation(fabric& f, op_kind k, int to_or_from, tag t, std::byte* buf, std::size_t bytes) noexcept
      : owner(&f), kind(k), peer(to_or_from), tg(t), data(buf), size(bytes) {}

  fabric* owner = nullptr;
  op_kind kind = op_kind::send;
  int peer = -1;
  tag tg{};
  std::byte* data = nullptr;
  std::size_t size = 0;

  // Filled in by the fabric.
  std::error_code ec;
  bool finished = false;

  // Who is told of the completion; set by the awaiter (a coroutine, or when_all).
  completion_fn on_complete = nullptr;
  void* context = nullptr;

  // Intrusive links for the fabric's queues, one word of fabric-private state, and room
  // for a transport's per-operation context (libfabric's fi_context2), so that a
  // completion leads back to its operation without a lookup or an allocation.
  operation* next = nullptr;
  operation* prev = nullptr;
  std::uintptr_t fabric_state = 0;
  void* fabric_ctx[10] = {};
  std::uint32_t trace_id = 0;  // its event in the owner's trace (trace.hpp), + 1; 0: none
  // Which rail carries it to another host (lane mod the fabric's rails; topology), 0 on
  // fabrics of one rail and between ranks of one host. Messages of one tag between two
  // ranks keep one lane: their order holds only within a rail.
  std::uint8_t lane = 0;

  // For fabrics: finish from the event loop and notify the awaiter.
  void complete(std::error_code e) noexcept;
  // For fabrics: finish inside start(), which then returns true.
  bool finish_now(std::error_code e) noexcept {
    ec = e;
    finished = true;
    return true;
  }

  // Awaiting one operation.
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) noexcept;
  result<std::size_t> await_resume() const noexcept {
    if (ec) return fail(ec);
    return size;
  }
};

// A minimal non-owning callable reference for run_until (no allocation).
class stop_predicate {
public:
  template <class F>
  stop_predicate(F& f) noexcept  // NOLINT(google-explicit-constructor)
      : obj_(&f), call_([](void* o) { return static_cast<bool>((*static_cast<F*>(o))()); }) {}
  bool operator()() const { return call_(obj_); }

private:
  void* obj_;
  bool (*call_)(void*);
};

// What an agreement decides (fabric::agree): the AND of the flags and the OR of the words
// the ranks that took part gave, and the ranks found failed, ascending (job ranks at the
// fabric, the communicator's in optcast::agree).
struct agreement {
  std::uint64_t flag = ~std::uint64_t{0};
  std::vector<std::uint64_t> words;
  std::vector<int> failed;
  bool operator==(const agreement&) const = default;
};
using agreement_done = std::function<void(result<agreement>)>;

class fabric {
public:
  virtual ~fabric() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // k of the k-port model: sends (and receives) a rank may have in flight per round.
  virtual int ports() const noexcept { return 1; }
  virtual std::string_view name() const noexcept = 0;
  // The cost model the fabric knows it follows (the simulator's), if any; algorithms
  // shaped by L, o, g use it unless the caller gives parameters.
  virtual std::optional<loggp_params> cost_model() const noexcept { return std::nullopt; }
  // The fabric's virtual clock (the simulator's time), if it has one. A schedule that
  // fixes the step of every transfer (Karp et al.'s single-sending k-item broadcast,
  // where nothing may arrive early) waits for it with compute(); real fabrics have no
  // global steps, and there data moves as soon as it can.
  virtual std::optional<double> model_time() const noexcept { return std::nullopt; }
  // Which host each rank runs on and the rails between hosts; null: every rank a host
  // of its own, with one rail.
  virtual const topology* layout() const noexcept { return nullptr; }

  // Whether messages carry their bytes. The simulator timing only (move_payload off)
  // does not: nothing that arrives is read, so an algorithm may skip its own packing
  // and combining and work out only how many bytes each message has. The peers, tags,
  // sizes and order of its messages must stay exactly what they are otherwise.
  virtual bool carries_data() const noexcept { return true; }

  // Whether receives may name any_peer.
  virtual bool receives_from_any() const noexcept { return false; }

  // Starts `op` (peer, tag, buffer filled in). Returns true if it finished at once, with
  // op.ec telling how; otherwise the fabric calls op.complete() later, from its event
  // loop, exactly once, and does not touch `op` afterwards.
  virtual bool start(operation& op) noexcept = 0;
  // Starts an op_kind::idle or compute operation; the same rules as start().
  virtual bool start_local(operation& op) noexcept { return op.finish_now({}); }
  bool post(operation& op) noexcept {
    if (trace_) return post_traced(op);
    return op.kind == op_kind::idle || op.kind == op_kind::compute ? start_local(op) : start(op);
  }

  // Records every operation posted from now on in `log` (trace.hpp); nullptr stops.
  void set_trace(std::shared_ptr<trace_log> log) noexcept { trace_ = std::move(log); }
  const std::shared_ptr<trace_log>& trace() const noexcept { return trace_; }
  // Where this fabric's collective calls are recorded: its trace, or for a view of
  // another fabric (a sub-communicator's), the one whose operations it posts.
  virtual trace_log* call_trace() const noexcept { return trace_.get(); }
  // For operation::complete: the traced operation `op` has finished.
  void trace_end(operation& op) noexcept;

  // Asks a started operation to finish soon with `ec` (it may complete inline). No
  // effect on a finished one. Used by when_all to stop the siblings of a failed
  // operation, and by deadlines.
  virtual void cancel(operation& op, std::error_code ec) noexcept = 0;

  // Every operation tagged with collective `seq` finishes with errc::timeout once
  // `timeout` has passed (on the fabric's clock: wall time, or virtual time). Returns a
  // token for disarm_deadline; several deadlines may name the same seq.
  virtual std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds timeout) = 0;
  virtual void disarm_deadline(std::uint64_t token) noexcept = 0;

  // Runs the fabric's event loop until `done()` holds; for the blocking entry points.
  virtual void run_until(stop_predicate done) = 0;
  // The executor the fabric's work runs on (its event loop), for the asynchronous entry
  // points (optcast/asio.hpp); nullptr for a fabric without one (the simulator, whose
  // virtual time only run_until drives).
  virtual const asio::any_io_executor* executor() const noexcept { return nullptr; }
  // The caller's io_context the fabric runs on (join(io)): run() then never runs it
  // itself, it hands the call to the loop's threads and waits. Null when the fabric
  // drives a loop of its own in run_until (join(), a local world with its own loop, the
  // simulator).
  virtual asio::io_context* borrowed_loop() const noexcept { return nullptr; }
  // Where the coroutine frames of collectives started on this fabric come from while
  // its loop runs them (task.hpp's frame_scope): the simulator's world keeps an arena;
  // nullptr, the heap.
  virtual detail::frame_arena* frames() const noexcept { return nullptr; }

  // Fails every pending operation with `ec`, and every later one too.
  virtual void abort(std::error_code ec, std::string detail) noexcept = 0;

  // The first failure this fabric saw, and what it knows about it (peer, sizes, ...).
  // Virtual for a fabric that is a view of another (a sub-communicator's), which shares
  // its failure.
  virtual std::error_code failure() const noexcept { return failure_; }
  virtual const std::string& failure_detail() const noexcept { return failure_detail_; }
  // A description of the most recent failed operation.
  virtual const std::string& last_error() const noexcept { return last_error_; }

  // Operations on this fabric, to be awaited or passed to when_all.
  operation send(int peer, tag t, std::span<const std::byte> bytes) noexcept {
    return {*this, op_kind::send, peer, t, const_cast<std::byte*>(bytes.data()), bytes.size()};
  }
  operation recv(int peer, tag t, std::span<std::byte> bytes) noexcept {
    return {*this, op_kind::recv, peer, t, bytes.data(), bytes.size()};
  }
  operation idle_round() noexcept { return idle_rounds(1); }
  // `rounds` (>= 1) idle rounds in a row as one operation: a round loop with nothing to
  // do until a later round waits once instead of once a round (in the simulator, most
  // of a large world's events were such rounds).
  operation idle_rounds(int rounds) noexcept {
    return {*this, op_kind::idle, rank(), {}, nullptr, static_cast<std::size_t>(rounds < 1 ? 1 : rounds)};
  }
  // `units` of model time (>= 0) pass for this rank; see op_kind::compute.
  operation compute(double units) noexcept {
    return {*this, op_kind::compute, rank(), {}, nullptr, std::bit_cast<std::size_t>(units)};
  }

  // This rank's scratch memory, reused from one collective to the next (scratch.hpp).
  // A fabric that views another for one call hands out the other's, so what the call
  // takes stays for the next one.
  virtual scratch_pool& scratch() noexcept { return scratch_; }

  // The signature of collective `seq` while it runs on this rank (set by the collectives
  // layer before its first message, cleared after its last), which the fabric puts on
  // every message of it and checks every arriving one against. fabric_base keeps them;
  // a fabric that wraps another forwards these three to it.
  virtual void sign(std::uint32_t seq, const call_signature& s) = 0;
  virtual void unsign(std::uint32_t seq) noexcept = 0;
  virtual call_signature signature_of(std::uint32_t seq) const noexcept = 0;
  // After collective `seq` finished its operations on this rank, before it returns: a
  // message of it still unreceived says another rank called it differently (fails the
  // fabric with errc::call_mismatch, and returns that); none otherwise. One arriving
  // later is caught by unexpected_consistent.
  virtual std::error_code leftover(std::uint32_t seq);

  // Ends this rank's part in the job and returns the job's outcome: success if every
  // rank finished without failure, else the job's first failure anywhere (failure() and
  // failure_detail() then say which rank and why), or timeout if some rank did not
  // finish within the deadline. Nothing may be started after it. Fabrics of a job (TCP,
  // libfabric) wait for the other ranks here; the in-process ones report this rank's
  // own failure.
  virtual result<void> leave();

  // ------------------------------------------------ surviving a failure (docs/DESIGN.md)
  // A fabric that survives a peer's death (TCP, the in-process one) marks the peer dead,
  // fails what waits on it and revokes every communicator it belongs to; the others, and
  // the fabric, stay usable. The rest fail as a whole (abort), as these defaults do.

  // Whether job rank r is alive as far as this rank knows.
  virtual bool peer_alive(int r) const noexcept { return r >= 0 && r < size(); }
  // Communicator `id`'s members (job ranks, in its order), so that a peer's death revokes
  // exactly the communicators it is in, and a revocation reaches their members. Id 0, the
  // job's, is every rank without enrolling. A member already dead revokes it at once.
  virtual void enroll(std::uint32_t id, std::vector<int> members) { (void)id, (void)members; }
  virtual void retire(std::uint32_t id) noexcept { (void)id; }
  // Revokes communicator `id`: every operation of it pending here fails with `ec`, and
  // every later one; its other members are told, and do the same (each tells the others
  // once, so the word survives failures on the way). Control messages and agreements on
  // it go on.
  virtual void revoke(std::uint32_t id, std::error_code ec, std::string detail) noexcept {
    (void)id;
    abort(ec, std::move(detail));
  }
  // Why `id` was revoked; none if it was not.
  virtual std::error_code revoked(std::uint32_t id) const noexcept {
    (void)id;
    return {};
  }
  virtual std::string revocation(std::uint32_t id) const { (void)id; return {}; }
  // The survivors went on without job ranks `gone` (shrink): the job's outcome no longer
  // counts them, where its store can tell (optcast's TCP store).
  virtual void excuse(std::vector<int> gone) { (void)gone; }
  // Agreement number `n` of communicator `id` among `members` (job ranks in its order,
  // this rank among them): `done` gets the same decision on every member that returns,
  // whatever members fail meanwhile, or an error (timeout after `timeout`, the fabric's
  // failure). Fault-tolerant: see docs/DESIGN.md, "Agreeing among survivors".
  virtual void agree(std::uint32_t id, std::uint32_t n, std::vector<int> members, agreement mine,
                     std::chrono::milliseconds timeout, agreement_done done) {
    (void)id, (void)n, (void)members, (void)mine, (void)timeout;
    note_error("this fabric (" + std::string(name()) + ") cannot agree among survivors");
    done(fail(errc::invalid_argument));
  }

protected:
  // Records the first failure (later ones keep the first, which is the cause).
  void note_failure(std::error_code ec, std::string detail) {
    if (!failure_) {
      failure_ = ec;
      failure_detail_ = std::move(detail);
    }
  }
  void note_error(std::string what) { last_error_ = std::move(what); }
  // Another rank's report of why the job failed. It replaces a lost connection
  // (errc::peer_lost) recorded first, which is most often that rank closing its
  // connections after its failure, while the report of it was on its way.
  void note_cause(std::error_code ec, std::string detail) {
    if (failure_ == errc::peer_lost && ec != errc::peer_lost) failure_ = {};
    note_failure(ec, std::move(detail));
  }
  // Replaces the first failure (a job's outcome, learnt at the end, outranks it).
  void replace_failure(std::error_code ec, std::string detail) {
    failure_ = ec;
    failure_detail_ = std::move(detail);
  }
  // For a fabric that can start over (the simulator's reset).
  void clear_failure() noexcept {
    failure_ = {};
    failure_detail_.clear();
    last_error_.clear();
  }

private:
  bool post_traced(operation& op) noexcept;

  std::error_code failure_;
  std::string failure_detail_;
  std::string last_error_;
  scratch_pool scratch_;
  std::shared_ptr<trace_log> trace_;
};

inline void operation::complete(std::error_code e) noexcept {
  ec = e;
  finished = true;
  if (trace_id) owner->trace_end(*this);
  on_complete(*this);
}

// "send 4096 B to rank 3, tag 7/2" for error details.
std::string describe_op(const operation& op);

}  // namespace optcast
