// The simulator: a fabric per rank whose operations become timed events of one world,
// the event loop that plays them in virtual time, and the world that hands out the
// fabrics and reports what happened. The models and the report's JSON: model.cpp; the
// playing of events (serving a receiver, a step of virtual time): events.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "optcast/fabric_base.hpp"
#include "state.hpp"

namespace optcast::sim {

// Declared in state.hpp, where the world keeps a pointer to each rank's.
class sim_fabric final : public fabric_base {
public:
  sim_fabric(std::shared_ptr<world_state> w, int rank) : w_(std::move(w)), rank_(rank) {}
  ~sim_fabric() override {
    // Only operations still pending need their cause (a world of a million ranks tears
    // down here, mostly with nothing pending).
    if (auto& me = self(); !me.posted.empty() || !me.bound.empty() || !me.sending.empty())
      abort(make_error_code(errc::cancelled), "rank " + std::to_string(rank_) + " shut down");
    w_->fabrics[static_cast<std::size_t>(rank_)] = nullptr;
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return static_cast<int>(w_->ranks.size()); }
  int ports() const noexcept override { return w_->m.ports; }
  std::string_view name() const noexcept override { return "sim"; }
  std::optional<loggp_params> cost_model() const noexcept override {
    const auto& m = w_->m;
    loggp_params p{m.L, m.o, m.g, m.G};
    if (w_->opts.layout) p.host = m.host;
    return p;
  }
  std::optional<double> model_time() const noexcept override { return w_->now; }
  const topology* layout() const noexcept override { return w_->opts.layout ? &*w_->opts.layout : nullptr; }
  // A recorded run names each message's blocks by the buffers' addresses: keep the data.
  bool carries_data() const noexcept override { return w_->opts.move_payload || w_->opts.record; }

  bool start(operation& op) noexcept override {
    if (auto ec = check_op(*this, op)) return fail_now(op, ec, "bad operation");
    if (failure()) return fail_now(op, failure(), failure_detail());
    auto& me = self();
    if (w_->now != me.last_post) {
      me.last_post = w_->now;
      ++me.stats.steps;
    }
    return op.kind == op_kind::send ? start_send(op) : start_recv(op);
  }

  // The rounds model charges an idle round; the others have no rounds to keep. A
  // computation takes its own duration under every model.
  bool start_local(operation& op) noexcept override {
    auto& w = *w_;
    if (failure()) return op.finish_now(failure());
    const bool compute = op.kind == op_kind::compute;
    const double span = compute ? std::bit_cast<double>(op.size) : (w.rounds() ? static_cast<double>(std::max<std::size_t>(op.size, 1)) : 0.0);
    if (!(span >= 0) || !std::isfinite(span)) {
      op.size = 0;
      return fail_now(op, make_error_code(errc::invalid_argument), "a computation of negative or unbounded time");
    }
    if (span == 0) return op.finish_now({});
    if (w.opts.record) {
      if (compute)
        w.local.push_back({rank_, true, w.now, w.now + span});
      else  // a run of idle rounds is recorded as the rounds it stands for
        for (double t = w.now; t < w.now + span; ++t) w.local.push_back({rank_, false, t, t + 1});
    }
    const std::uint32_t idx = w.new_message();
    auto& mg = w.msgs[idx];
    mg.src = mg.dst = rank_;
    mg.rx_done = true;  // nothing travels
    mg.sender = &op;
    op.transport.state = st_sending;
    set_msg(op, idx);
    self().sending.push_back(op);
    w.schedule(w.now + span, idx, ev::send_done);
    return false;
  }

  void cancel(operation& op, std::error_code ec) noexcept override {
    if (op.finished) return;
    auto& me = self();
    switch (op.transport.state) {
      case st_posted: me.posted.remove(op); break;
      case st_bound:
        me.bound.remove(op);
        w_->msgs[msg_of(op)].bound = nullptr;
        break;
      case st_sending:
        me.sending.remove(op);
        w_->msgs[msg_of(op)].sender = nullptr;
        break;
      case st_ready:
        // Its outcome is decided and waits in the ready queue; finish it now with that
        // outcome, since its owner may be about to go (a posted_op destroyed on a
        // collective's failure path would leave the queue pointing at freed memory).
        w_->ready.remove(op);
        op.transport.state = st_idle;
        op.complete(op.ec);
        return;
      default: return;  // idle
    }
    op.transport.state = st_idle;
    op.complete(ec);
  }

  // Virtual time never waits on the outside world; deadlock detection replaces
  // deadlines (see the header).
  std::uint64_t arm_deadline(std::uint32_t, std::chrono::nanoseconds) override { return 0; }
  void disarm_deadline(std::uint64_t) noexcept override {}

  detail::frame_arena* frames() const noexcept override { return w_->frames.get(); }

  void run_until(stop_predicate done) override {
    detail::frame_scope in_world(w_->frames.get());
    while (!done()) {
      if (w_->step()) continue;
      // Nothing pending anywhere: the ranks that still wait can never be served.
      const std::string who = w_->describe_waiting();
      if (who.empty())
        throw std::logic_error(
            "optcast sim: the caller waits for something no rank will ever do (no operation "
            "is pending)");
      w_->fail_world(make_error_code(errc::deadlock),
                     "at time " + fmt_time(w_->now) + " nothing is in flight and " + who);
    }
  }

  void abort(std::error_code ec, std::string detail) noexcept override {
    note_failure(ec, detail);
    auto& me = self();
    auto fail = [&](operation& op) {
      note_error(detail + ": " + describe_op(op));
      w_->make_ready(op, ec);
    };
    me.posted.drain_if([](const operation&) { return true; }, fail);
    me.bound.drain_if([](const operation&) { return true; }, [&](operation& op) {
      w_->msgs[msg_of(op)].bound = nullptr;
      fail(op);
    });
    me.sending.drain_if([](const operation&) { return true; }, [&](operation& op) {
      w_->msgs[msg_of(op)].sender = nullptr;
      fail(op);
    });
  }

  void reset_failure() noexcept { clear_failure(); }
  void note(const std::string& s) { note_error(s); }

private:
  rank_state& self() { return w_->ranks[static_cast<std::size_t>(rank_)]; }

  bool fail_now(operation& op, std::error_code ec, const std::string& why) {
    note_error(why + ": " + describe_op(op));
    return op.finish_now(ec);
  }

  static std::uint32_t msg_of(const operation& op) {
    return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(op.transport.ctx[0]));
  }
  static void set_msg(operation& op, std::uint32_t i) {
    op.transport.ctx[0] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(i));
  }

  // Picks the channel and the times of a message; false on a port violation.
  bool time_send(message& mg, std::uint32_t idx) {
    auto& w = *w_;
    auto& me = self();
    const double now = w.now;
    if (w.rounds()) {
      auto& dst = w.ranks[static_cast<std::size_t>(mg.dst)];
      auto out = std::find_if(me.out.begin(), me.out.end(), [&](const channel& c) { return c.busy_until <= now; });
      auto in = std::find_if(dst.in.begin(), dst.in.end(), [&](const channel& c) { return c.busy_until <= now; });
      if (out == me.out.end() || in == dst.in.end()) {
        const bool sender_side = out == me.out.end();
        const auto& busy = sender_side ? me.busy_with : dst.in_with;
        std::string why = "round " + fmt_time(now) + ": " + describe_message(mg) + " while ";
        why += sender_side ? "rank " + std::to_string(rank_) + " already sends"
                           : "rank " + std::to_string(mg.dst) + " already receives";
        for (auto b : busy) why += " [" + describe_message(w.msgs[b]) + "]";
        why += " (" + std::to_string(w.m.ports) + " port" + (w.m.ports == 1 ? "" : "s") + ")";
        w.fail_world(make_error_code(errc::port_violation), why);
        return false;
      }
      out->busy_until = in->busy_until = now + 1;
      me.busy_with[static_cast<std::size_t>(out - me.out.begin())] = idx;
      dst.in_with[static_cast<std::size_t>(in - dst.in.begin())] = idx;
      mg.first = now;
      mg.last = now;
      return true;
    }
    const loggp_link lk = w.link_of(mg);
    const double bytes_after_first = static_cast<double>(std::max<std::size_t>(mg.size, 1) - 1);
    channel* out = mg.route == route_host ? &w.host_out(rank_)
                                          : &*std::min_element(me.out.begin(), me.out.end(), [](const channel& a, const channel& b) {
                                              return a.next_start < b.next_start;
                                            });
    const double start = std::max(now, out->next_start);
    if (mg.route == route_rail) {
      // The overhead on the rank's CPU, the bytes when the host's rail is free.
      auto& rail = w.rail_out(w.host_of(rank_), mg.rail);
      mg.first = std::max(start + lk.o, rail.next_start);
      mg.last = mg.first + bytes_after_first * lk.G;
      out->next_start = start + lk.o;
      rail.next_start = mg.last + lk.g;
      return true;
    }
    mg.first = start + lk.o;
    mg.last = mg.first + bytes_after_first * lk.G;
    out->next_start = std::max(start + lk.o, mg.last + lk.g - lk.o);
    return true;
  }

  std::string describe_message(const message& mg) const {
    return "rank " + std::to_string(mg.src) + " -> " + std::to_string(mg.dst) + " tag " +
           std::to_string(mg.tg.seq) + "/" + std::to_string(mg.tg.step) + " (" +
           std::to_string(mg.size) + " B)";
  }

  bool start_send(operation& op) {
    auto& w = *w_;
    const std::uint32_t idx = w.new_message();
    auto& mg = w.msgs[idx];
    mg.src = rank_;
    mg.dst = op.peer;
    mg.tg = op.tg;
    mg.size = op.size;
    mg.sig = op.owner->signature_of(op.tg.seq);
    if (w.by_hosts()) {
      const bool same = w.host_of(rank_) == w.host_of(op.peer);
      mg.route = same ? route_host : route_rail;
      mg.rail = same ? 0 : static_cast<std::uint8_t>(op.lane % w.rails_per_host);
    }
    auto& me = self();
    mg.chain = me.stats.chain + 1;
    if (!time_send(mg, idx)) {
      w.free_message(idx);
      return op.finish_now(failure());
    }
    ++me.stats.sent;
    me.stats.bytes_sent += op.size;
    ++w.messages;
    w.bytes += op.size;
    if (w.opts.record && w.log.size() < none) {
      mg.rec = static_cast<std::uint32_t>(w.log.size());
      message_record r;
      r.src = rank_;
      r.dst = op.peer;
      r.tg = op.tg;
      r.bytes = op.size;
      r.posted = w.now;
      r.start = w.rounds() ? w.now : mg.first - w.m.o;
      r.first = mg.first;
      r.last = mg.last;
      if (w.rounds()) r.window = r.rx_start = w.now;
      r.src_data = reinterpret_cast<std::uintptr_t>(op.data);
      w.log.push_back(r);
    }

    // Match in send order: a posted receive exists only if no earlier message matched it.
    auto& dst = w.ranks[static_cast<std::size_t>(op.peer)];
    operation* match = dst.posted.find([&](const operation& r) { return r.peer == rank_ && r.tg == op.tg; });
    if (match) {
      dst.posted.remove(*match);
      dst.bound.push_back(*match);
      match->transport.state = st_bound;
      set_msg(*match, idx);
      mg.bound = match;
      if (w.opts.move_payload && match->size == op.size && op.size)
        std::memcpy(match->data, op.data, op.size);
    } else {
      if (w.opts.move_payload && op.size) {
        mg.payload = w.pool.take(op.size);
        std::memcpy(mg.payload.data(), op.data, op.size);
        mg.buffered = true;
      }
      mg.in_list = true;
      mg.prev = dst.unmatched_tail;
      if (dst.unmatched_tail != none) w.msgs[dst.unmatched_tail].next = idx;
      else dst.unmatched_head = idx;
      dst.unmatched_tail = idx;
    }

    if (w.rounds()) {
      w.schedule(w.now + 1, idx, ev::available);  // also completes the send
    } else {
      w.schedule(mg.first + w.link_of(mg).L, idx, ev::arrive);
    }
    const double done = w.rounds() ? w.now + 1 : mg.last;
    if (done <= w.now) {
      w.note_completion(rank_);
      return op.finish_now({});
    }
    mg.sender = &op;
    op.transport.state = st_sending;
    set_msg(op, idx);
    me.sending.push_back(op);
    if (!w.rounds()) w.schedule(done, idx, ev::send_done);
    return false;
  }

  bool start_recv(operation& op) {
    auto& w = *w_;
    auto& me = self();
    op.transport.ctx[1] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(++w.posts));
    for (auto i = me.unmatched_head; i != none; i = w.msgs[i].next) {
      auto& mg = w.msgs[i];
      if (mg.src != op.peer || mg.tg != op.tg) continue;
      // Unlink from the unmatched list.
      (mg.prev != none ? w.msgs[mg.prev].next : me.unmatched_head) = mg.next;
      (mg.next != none ? w.msgs[mg.next].prev : me.unmatched_tail) = mg.prev;
      mg.next = mg.prev = none;
      mg.in_list = false;
      if (mg.available) {
        auto ec = w.deliver(mg, op);
        mg.rx_done = true;
        w.maybe_free(i);
        w.note_completion(rank_);
        return op.finish_now(ec);
      }
      mg.bound = &op;
      op.transport.state = st_bound;
      set_msg(op, i);
      me.bound.push_back(op);
      if (w.m.choose && mg.arrived && !mg.served) w.serve(rank_);
      return false;
    }
    op.transport.state = st_posted;
    me.posted.push_back(op);
    return false;
  }

  std::shared_ptr<world_state> w_;
  int rank_;
};


void world_state::fail_world(std::error_code ec, const std::string& detail) {
  if (!error) {
    error = ec;
    error_detail = detail;
  }
  for (auto* f : fabrics)
    if (f) f->abort(ec, detail);
}

namespace {

// A fabric and its shared_ptr's control block, as allocate_shared lays them out (at most).
constexpr std::size_t fabric_block = (sizeof(sim_fabric) + 64 + 15) & ~std::size_t{15};

std::shared_ptr<world_state> make_state(int p, const model& m, world_options o) {
  if (p < 1) throw std::invalid_argument("optcast::sim::world: need at least one rank");
  if (m.ports < 1) throw std::invalid_argument("optcast::sim::world: need at least one port");
  auto s = std::make_shared<world_state>();
  s->m = m;
  s->opts = o;
  const auto P = static_cast<std::size_t>(p), k = static_cast<std::size_t>(m.ports);
  s->ranks.resize(P);
  s->channels.resize(2 * P * k);
  if (m.kind == model_kind::rounds) s->port_msgs.assign(2 * P * k, none);
  for (std::size_t r = 0; r < P; ++r) {
    auto& rs = s->ranks[r];
    rs.out = std::span(s->channels).subspan(r * k, k);
    rs.in = std::span(s->channels).subspan((P + r) * k, k);
    if (m.kind == model_kind::rounds) {
      rs.busy_with = std::span(s->port_msgs).subspan(r * k, k);
      rs.in_with = std::span(s->port_msgs).subspan((P + r) * k, k);
    }
  }
  if (o.layout) {
    if (o.layout->size() != p)
      throw std::invalid_argument("optcast::sim::world: a layout of " + std::to_string(o.layout->size()) +
                                  " ranks for a world of " + std::to_string(p));
    if (std::any_of(o.layout->host_of.begin(), o.layout->host_of.end(), [](int h) { return h < 0; }))
      throw std::invalid_argument("optcast::sim::world: a layout with a negative host number");
    if (o.layout->rails < 1 || o.layout->rails > 255) throw std::invalid_argument("optcast::sim::world: rails must be 1 to 255");
    if (m.kind != model_kind::rounds && !m.choose) {
      s->rails_per_host = o.layout->rails;
      s->rails.resize(2 * static_cast<std::size_t>(o.layout->hosts()) * static_cast<std::size_t>(o.layout->rails));
      s->host_links.resize(2 * P);
    }
  }
  s->fabrics.assign(P, nullptr);
  if (auto* a = s->frames.get()) a->expect(P * 512);  // a rank's frames: a few hundred bytes (none: a sanitizer build)
  s->slab.reset(fabric_slab::create(P * fabric_block));
  return s;
}


}  // namespace

world::world(int p, sim::model m, world_options o) : state_(make_state(p, m, o)) {}
world::~world() = default;

int world::size() const noexcept { return static_cast<int>(state_->ranks.size()); }
const sim::model& world::model() const noexcept { return state_->m; }
double world::now() const noexcept { return state_->now; }

std::shared_ptr<optcast::fabric> world::fabric(int rank) const {
  if (rank < 0 || rank >= size())
    throw std::out_of_range("optcast::sim::world::fabric: no rank " + std::to_string(rank));
  auto& slot = state_->fabrics[static_cast<std::size_t>(rank)];
  if (slot) throw std::logic_error("optcast::sim::world: rank " + std::to_string(rank) + " already has a fabric");
  auto f = std::allocate_shared<sim_fabric>(slab_allocator<sim_fabric>(state_->slab.get()), state_, rank);
  slot = f.get();
  return f;
}

report world::take_report() const {
  const auto& s = *state_;
  report rep;
  rep.model = s.m.describe();
  rep.messages = s.messages;
  rep.bytes = s.bytes;
  rep.error = s.error;
  rep.error_detail = s.error_detail;
  rep.log = s.log;
  rep.local = s.local;
  detail::reserve_huge(rep.ranks, s.ranks.size());
  for (const auto& r : s.ranks) {
    rep.ranks.push_back(r.stats);
    auto& st = rep.ranks.back();
    st.comm_finish = st.finish;
    if (s.m.kind != model_kind::rounds)
      for (const auto& ch : r.out) st.comm_finish = std::max(st.comm_finish, ch.next_start);
    rep.finish_time = std::max(rep.finish_time, r.stats.finish);
    rep.comm_finish_time = std::max(rep.comm_finish_time, st.comm_finish);
    rep.longest_chain = std::max(rep.longest_chain, r.stats.chain);
    rep.rounds = std::max(rep.rounds, r.stats.steps);
    for (auto i = r.unmatched_head; i != none; i = s.msgs[i].next) ++rep.unreceived;
  }
  if (s.m.kind == model_kind::rounds) rep.rounds = static_cast<std::uint64_t>(rep.finish_time);
  return rep;
}

void world::reset() {
  auto& s = *state_;
  for (const auto& r : s.ranks)
    if (!r.posted.empty() || !r.bound.empty() || !r.sending.empty())
      throw std::logic_error("optcast::sim::world::reset: operations are still pending");
  // Messages nobody received are dropped with the rest of the run.
  s.msgs.clear();
  s.free_msgs.clear();
  s.events.clear();
  s.now = 0;
  s.messages = s.bytes = 0;
  s.log.clear();
  s.local.clear();
  s.error = {};
  s.error_detail.clear();
  for (auto& r : s.ranks) {
    r.unmatched_head = r.unmatched_tail = none;
    for (auto& c : r.out) c = {};
    for (auto& c : r.in) c = {};
    std::fill(r.busy_with.begin(), r.busy_with.end(), none);
    std::fill(r.in_with.begin(), r.in_with.end(), none);
    r.stats = {};
    r.last_post = -1;
  }
  std::fill(s.rails.begin(), s.rails.end(), channel{});
  std::fill(s.host_links.begin(), s.host_links.end(), channel{});
  for (auto* f : s.fabrics)
    if (f) static_cast<sim_fabric*>(f)->reset_failure();
}

}  // namespace optcast::sim
