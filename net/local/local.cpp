#include "optcast/net/local.hpp"

#include "core/frame_arena.hpp"
#include "optcast/fabric_base.hpp"
#include "optcast/trace.hpp"

#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include <asio/any_io_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>

#include "../common/buffer_pool.hpp"
#include "../common/deadlines.hpp"
#include "../common/op_queue.hpp"

namespace optcast::local {

namespace {

// A message that arrived before its receive was posted.
struct unexpected_msg {
  int src;
  tag tg;
  call_signature sig;
  detail::message_buffer data;
  double arrived = -1;  // when, on the trace's clock (traced fabrics only)
};

class local_fabric;

}  // namespace

struct world_state {
  ~world_state() {
    if (frames) frames->release();
  }
  asio::io_context* io = nullptr;
  bool owned = false;  // the world's own loop, which run_until drives
  // The world's own loop runs on one thread: the collectives' coroutine frames come from
  // an arena there, reused call after call (null: the heap, on a caller's loop).
  detail::frame_arena* frames = nullptr;
  // The whole world's work, one handler at a time, however many threads run io.
  asio::any_io_executor ex;
  int ports = 1;
  std::optional<topology> layout;
  std::vector<local_fabric*> ranks;
  // Receives matched by a send, waiting to be completed from the event loop (a send
  // never resumes another rank's coroutine from inside its own start()).
  detail::op_queue ready;
  bool drain_posted = false;
  detail::buffer_pool pool;
  detail::message_buffer take_buffer(std::size_t n) { return pool.take(n); }
  void give_back(detail::message_buffer&& b) { pool.give_back(std::move(b)); }

  // transport.state of an operation in `ready` (posted receives carry 1).
  static constexpr std::uintptr_t ready_mark = 2;
  void make_ready(operation& op, std::error_code ec) {
    op.ec = ec;
    op.transport.state = ready_mark;
    ready.push_back(op);
    if (!drain_posted) {
      drain_posted = true;
      asio::post(ex, [this] { drain(); });
    }
  }
  void drain() {
    drain_posted = false;
    while (operation* op = ready.pop_front()) {
      op->transport.state = 0;
      op->complete(op->ec);
    }
  }
};

namespace {

class local_fabric final : public fabric_base {
public:
  local_fabric(std::shared_ptr<world_state> w, int rank)
      : w_(std::move(w)), rank_(rank), deadlines_(w_->ex, [this](std::uint32_t seq) {
          expire(seq);
        }) {}

  ~local_fabric() override {
    closing_ = true;
    abort(make_error_code(errc::cancelled), "rank " + std::to_string(rank_) + " shut down");
    w_->ranks[static_cast<std::size_t>(rank_)] = nullptr;
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return static_cast<int>(w_->ranks.size()); }
  int ports() const noexcept override { return w_->ports; }
  const topology* layout() const noexcept override { return w_->layout ? &*w_->layout : nullptr; }
  std::string_view name() const noexcept override { return "local"; }
  bool receives_from_any() const noexcept override { return true; }
  const asio::any_io_executor* executor() const noexcept override { return &w_->ex; }
  asio::io_context* borrowed_loop() const noexcept override { return w_->owned ? nullptr : w_->io; }
  detail::frame_arena* frames() const noexcept override { return w_->frames; }

  bool start(operation& op) noexcept override {
    if (auto ec = check_op(*this, op)) return fail_now(op, ec, "bad operation");
    if (dead_)
      return fail_now(op, make_error_code(errc::peer_lost), "this rank (" + std::to_string(rank_) + ") died");
    if (failure()) return fail_now(op, failure(), failure_detail());
    std::string why;
    if (auto ec = refusal(op, why)) return fail_now(op, ec, why);
    if (op.peer == any_peer) return start_recv(op);  // waits for whoever sends
    local_fabric* peer = w_->ranks[static_cast<std::size_t>(op.peer)];
    if (!peer || peer->dead_)
      return fail_now(op, make_error_code(errc::peer_lost),
                      "rank " + std::to_string(op.peer) + " is gone");
    return op.kind == op_kind::send ? start_send(op, *peer) : start_recv(op);
  }

  void cancel(operation& op, std::error_code ec) noexcept override {
    // Only receives wait (sends finish at once). A receive already matched waits in the
    // world's ready queue: it finishes now with its outcome, since its owner may be
    // about to go (a posted_op destroyed on a collective's failure path).
    if (op.finished || op.kind != op_kind::recv) return;
    if (op.transport.state == world_state::ready_mark) {
      w_->ready.remove(op);
      op.transport.state = 0;
      op.complete(op.ec);
      return;
    }
    if (op.transport.state != posted_mark) return;
    posted_.remove(op);
    op.transport.state = 0;
    op.complete(ec);
  }

  std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds t) override {
    // On the world's own loop nothing waits for the loop to run dry: the timer may stay
    // set between calls (deadline_table::keep_idle_timer), as a job fabric's does. The
    // world says whose loop it is only after making its ranks, so it is asked here.
    if (w_->owned) deadlines_.keep_idle_timer();
    return deadlines_.arm(seq, t);
  }
  void disarm_deadline(std::uint64_t token) noexcept override { deadlines_.disarm(token); }

  void run_until(stop_predicate done) override {
    if (borrowed_loop())  // run() waits for the owner's threads instead
      throw std::logic_error("optcast: a fabric on the caller's io_context does not run it (run_until)");
    auto& io = *w_->io;
    while (!done()) {
      if (io.stopped()) io.restart();
      if (io.run_one() == 0 && !done())
        throw std::logic_error(
            "optcast local fabric: every rank is waiting and nothing is pending (a deadlock "
            "in the caller's sequence of operations)");
    }
  }

  // A failure here ends this rank's part, and every communicator it is in on every other
  // rank at once, with its cause (as the TCP fabric does through abort frames and the
  // store): a rank that waits on this one, or that finished its part and goes on to the
  // next collective, would otherwise wait for its deadline or run on against a broken peer.
  void abort(std::error_code ec, std::string detail) noexcept override {
    note_failure(ec, detail);
    fail_posted([](const operation&) { return true; }, ec, detail);
    end_agreements(ec, detail);
    if (spread_ || closing_) return;
    spread_ = true;
    // To the others this rank is lost (as on TCP): what they share with it is revoked.
    const std::string why = "rank " + std::to_string(rank_) + " failed: " + failure_detail();
    for (auto* other : w_->ranks)
      if (other && other != this) other->lose(rank_, ec, why);
  }

  // The rank dies: its own calls end, and every other rank takes it for dead at once (as
  // the TCP store tells every rank of a death): each communicator it is in is revoked,
  // the others go on.
  void kill() {
    if (dead_) return;
    dead_ = true;
    const std::string why = "rank " + std::to_string(rank_) + " died";
    told(make_error_code(errc::peer_lost), "this rank (" + std::to_string(rank_) + ") died");
    end_agreements(make_error_code(errc::peer_lost), "this rank died");
    for (auto* other : w_->ranks)
      if (other && other != this) other->lose(rank_, make_error_code(errc::peer_lost), why);
  }

  std::error_code leftover(std::uint32_t seq) override {
    const auto mine = signature_of(seq);
    for (auto held = first_of(seq); held != end_of(seq); ++held)
      if (const auto& m = held->second; !m.sig.empty() && !failure()) {
        note_unreceived(m.src, seq, m.sig, mine);
        abort(make_error_code(errc::call_mismatch), last_error());
        return make_error_code(errc::call_mismatch);
      }
    return {};
  }

  // Signed after messages of the collective arrived: they may say it was called
  // differently elsewhere.
  void sign(std::uint32_t seq, const call_signature& s) override {
    fabric_base::sign(seq, s);
    for (auto held = first_of(seq); held != end_of(seq); ++held)
      if (!unexpected_consistent(held->second.src, seq, held->second.sig))
        return abort(make_error_code(errc::call_mismatch), last_error());
  }

private:
  static constexpr std::uintptr_t posted_mark = 1;

  // Collective seq's held messages: [first_of(seq), end_of(seq)).
  using held_index = std::multimap<std::uint64_t, unexpected_msg>;
  held_index::const_iterator first_of(std::uint32_t seq) const { return unexpected_.lower_bound(tag{seq, 0}.packed()); }
  held_index::const_iterator end_of(std::uint32_t seq) const { return unexpected_.upper_bound(tag{seq, 0xffffffffu}.packed()); }
  template <class Pred>
  void drop_held(Pred pred) {
    for (auto held = unexpected_.begin(); held != unexpected_.end();)
      if (pred(held->second)) {
        w_->give_back(std::move(held->second.data));
        held = unexpected_.erase(held);
      } else {
        ++held;
      }
  }

  bool survives_failures() const noexcept override { return true; }

  void lose(int r, std::error_code ec, const std::string& why) {
    if (failure() || !peer_alive(r)) return;
    drop_held([r](const unexpected_msg& m) { return m.src == r; });
    peer_died(r, ec, why);  // first: what fails on r's loss finds its communicator revoked
    fail_posted([r](const operation& op) { return op.peer == r; }, ec, why);
  }

  void fail_communicator(std::uint32_t id, std::error_code ec, const std::string& why) noexcept override {
    const auto of_it = [id](std::uint32_t seq) { return seq != seq_layout::control_seq && seq_layout::id_of(seq) == id; };
    drop_held([&](const unexpected_msg& m) { return of_it(m.tg.seq); });
    fail_posted([&](const operation& op) { return of_it(op.tg.seq); }, ec, why);
  }

  // A control message goes to the survival layer from the event loop (never from inside
  // the sender's start()), if its receiver is still there.
  void deliver_control(local_fabric& dst, const operation& op) {
    std::vector<std::byte> bytes(op.data, op.data + op.size);
    asio::post(w_->ex, [w = w_, to = dst.rank_, from = rank_, bytes = std::move(bytes)] {
      auto* d = w->ranks[static_cast<std::size_t>(to)];
      if (d && !d->dead_) d->control_arrived(from, bytes);
    });
  }

  // Another rank's failure: this rank fails with it, and does not pass it on.
  void told(std::error_code ec, const std::string& detail) noexcept {
    spread_ = true;
    note_cause(ec, detail);
    fail_posted([](const operation&) { return true; }, ec, detail);
  }

  bool fail_now(operation& op, std::error_code ec, const std::string& why) {
    note_error(why + ": " + describe_op(op));
    return op.finish_now(ec);
  }

  bool start_send(operation& op, local_fabric& dst) {
    if (op.tg.seq == seq_layout::control_seq) {
      deliver_control(dst, op);
      return op.finish_now({});
    }
    if (dst.revoked(seq_layout::id_of(op.tg.seq))) return op.finish_now({});  // nobody's there
    operation* match = dst.posted_.find([&](const operation& r) {
      return (r.peer == rank_ || r.peer == any_peer) && r.tg == op.tg;
    });
    if (match) {
      dst.posted_.remove(*match);
      match->peer = rank_;
      match->transport.state = 0;
      if (auto bad = dst.arrival_error(*match, signature_of(op.tg.seq), op.size)) {
        w_->make_ready(*match, bad);
      } else {
        if (op.size) std::memcpy(match->data, op.data, op.size);
        w_->make_ready(*match, {});
      }
    } else {
      auto buf = w_->take_buffer(op.size);
      if (op.size) std::memcpy(buf.data(), op.data, op.size);
      const auto sig = signature_of(op.tg.seq);
      if (!dst.unexpected_consistent(rank_, op.tg.seq, sig)) {
        w_->give_back(std::move(buf));
        dst.abort(make_error_code(errc::call_mismatch), dst.last_error());
      } else {
        dst.unexpected_.emplace(op.tg.packed(), unexpected_msg{rank_, op.tg, sig, std::move(buf), dst.trace() ? trace_clock(dst) : -1});
      }
    }
    return op.finish_now({});
  }

  bool start_recv(operation& op) {
    const auto [first, last] = unexpected_.equal_range(op.tg.packed());
    for (auto held = first; held != last; ++held) {
      auto& m = held->second;
      if (m.src != op.peer && op.peer != any_peer) continue;
      op.peer = m.src;  // the earliest message with the tag, whoever sent it
      trace_unexpected(*this, op, m.arrived);
      const std::error_code ec = arrival_error(op, m.sig, m.data.size());
      if (!ec && op.size) {
        std::memcpy(op.data, m.data.data(), op.size);
      }
      w_->give_back(std::move(m.data));
      unexpected_.erase(held);
      return op.finish_now(ec);
    }
    op.transport.state = posted_mark;
    posted_.push_back(op);
    return false;
  }

  template <class Pred>
  void fail_posted(Pred pred, std::error_code ec, const std::string& why) {
    posted_.drain_if(pred, [&](operation& op) {
      op.transport.state = 0;
      note_error(why + ": " + describe_op(op));
      w_->make_ready(op, ec);
    });
  }

  void expire(std::uint32_t seq) {
    if (seq == seq_layout::control_seq) {  // an agreement's: it alone fails
      const std::string waits = agreements_waiting();
      return end_agreements(make_error_code(errc::timeout), "no decision within its deadline" + (waits.empty() ? "" : " (" + waits.substr(2) + ")"));
    }
    const std::string why = "deadline of collective " + std::to_string(seq) + " passed";
    note_failure(make_error_code(errc::timeout), why + " on rank " + std::to_string(rank_));
    fail_posted([seq](const operation& op) { return op.tg.seq == seq; },
                make_error_code(errc::timeout), why);
  }

  std::shared_ptr<world_state> w_;
  int rank_;
  bool dead_ = false;
  bool closing_ = false;
  bool spread_ = false;  // every rank knows of this one's failure, or told it of theirs
  detail::op_queue posted_;
  // Held by packed tag (seq in the high half): a receive finds its tag, a collective's
  // start and end (sign, leftover) their own range, in O(log n) however many a rank that
  // ran ahead left here (a root's broadcasts called back to back); messages of one tag
  // keep their order of arrival (a multimap inserts at the end of an equal range).
  std::multimap<std::uint64_t, unexpected_msg> unexpected_;
  detail::deadline_table deadlines_;
};

}  // namespace

namespace {
std::shared_ptr<world_state> make_state(int p, asio::io_context& io, int ports) {
  if (p < 1) throw std::invalid_argument("optcast::local::world: need at least one rank");
  if (ports < 1) throw std::invalid_argument("optcast::local::world: need at least one port");
  auto s = std::make_shared<world_state>();
  s->io = &io;
  s->ex = asio::make_strand(io);
  s->ports = ports;
  s->ranks.assign(static_cast<std::size_t>(p), nullptr);
  return s;
}
}  // namespace

world::world(int p, int ports)
    : owned_io_(std::make_unique<asio::io_context>(1)), state_(make_state(p, *owned_io_, ports)) {
  state_->owned = true;
  state_->frames = detail::frame_arena::create();
}

world::world(int p, asio::io_context& io, int ports) : state_(make_state(p, io, ports)) {}

world::~world() = default;

int world::size() const noexcept { return static_cast<int>(state_->ranks.size()); }
asio::io_context& world::io() noexcept { return *state_->io; }

std::shared_ptr<optcast::fabric> world::fabric(int rank) const {
  if (rank < 0 || rank >= size())
    throw std::out_of_range("optcast::local::world::fabric: no rank " + std::to_string(rank));
  auto& slot = state_->ranks[static_cast<std::size_t>(rank)];
  if (slot) throw std::logic_error("optcast::local::world: rank " + std::to_string(rank) +
                                   " already has a fabric");
  auto f = std::make_shared<local_fabric>(state_, rank);
  slot = f.get();
  return f;
}

void world::kill(int rank) {
  auto* f = state_->ranks.at(static_cast<std::size_t>(rank));
  if (f) f->kill();
}

void world::set_layout(topology t) {
  if (t.size() != size())
    throw std::invalid_argument("a layout of " + std::to_string(t.size()) + " ranks for a world of " + std::to_string(size()));
  state_->layout = std::move(t);
}

}  // namespace optcast::local
