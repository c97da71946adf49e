// The simulator's world playing its events (state.hpp): a receiver served from the
// messages that have arrived for it, a message delivered into its receive, and one step
// of the event loop in virtual time.
#include <algorithm>
#include <cstring>
#include <string>

#include "optcast/fabric_base.hpp"
#include "state.hpp"

namespace optcast::sim {

void world_state::serve(int d) {
  auto& rk = ranks[static_cast<std::size_t>(d)];
  while (true) {
    const bool free = std::any_of(rk.in.begin(), rk.in.end(), [&](const channel& c) { return c.next_window <= now; });
    if (!free) return;
    operation* best = nullptr;
    rk.bound.find([&](const operation& op) {
      const auto& mg = msgs[static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(op.transport.ctx[0]))];
      if (mg.arrived && !mg.served &&
          (!best || reinterpret_cast<std::uintptr_t>(op.transport.ctx[1]) < reinterpret_cast<std::uintptr_t>(best->transport.ctx[1])))
        best = const_cast<operation*>(&op);
      return false;
    });
    if (!best) return;
    const auto idx = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(best->transport.ctx[0]));
    msgs[idx].served = true;
    take_window(msgs[idx], idx);
  }
}

std::error_code world_state::deliver(message& mg, operation& op) {
  auto& st = ranks[static_cast<std::size_t>(op.owner->rank())];
  // Every operation in the world is one of its own fabrics' (views set owner to them).
  if (auto bad = static_cast<fabric_base*>(op.owner)->arrival_error(op, mg.sig, mg.size)) return bad;
  if (mg.buffered && mg.size) std::memcpy(op.data, mg.payload.data(), mg.size);
  if (auto* r = record_of(mg)) {
    r->received = now;
    r->dst_data = reinterpret_cast<std::uintptr_t>(op.data);
  }
  ++st.stats.received;
  st.stats.bytes_received += mg.size;
  st.stats.chain = std::max(st.stats.chain, mg.chain);
  return {};
}

std::string world_state::describe_waiting() const {
  std::string out;
  int listed = 0, more = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (operation* op = ranks[r].posted.front(); op; op = op->transport.next) {
      if (listed == 8) {
        ++more;
        continue;
      }
      out += (listed ? "; rank " : "rank ") + std::to_string(r) + " waits for " + describe_op(*op);
      ++listed;
    }
  if (more) out += "; and " + std::to_string(more) + " more";
  return out;
}

// One unit of work: a ready completion, or the next event. False when there is none.
bool world_state::step() {
  if (operation* op = ready.pop_front()) {
    op->transport.state = st_idle;
    note_completion(op->owner->rank());
    op->complete(op->ec);
    return true;
  }
  if (events.empty()) return false;
  if (--steps_to_progress == 0) {
    steps_to_progress = 1u << 16;
    if (opts.progress) opts.progress(now, messages);
  }
  const event e = events.pop(now);
  auto& mg = msgs[e.msg];
  --mg.events;
  operation* s = nullptr;  // completions last: they resume coroutines that may post
  operation* r = nullptr;  // new messages (and reuse this message's slot)
  std::error_code rec;
  auto finish_send = [&] {
    if (!(s = mg.sender)) return;
    mg.sender = nullptr;
    ranks[static_cast<std::size_t>(mg.src)].sending.remove(*s);
    s->transport.state = st_idle;
    note_completion(mg.src);
  };
  switch (e.kind) {
    case ev::send_done: finish_send(); break;
    case ev::arrive:
      if (m.choose) {
        // Choose once everything arriving at this time is in: the serve event comes
        // after every arrival scheduled before it.
        mg.arrived = true;
        schedule(now, e.msg, ev::serve);
      } else {
        take_window(mg, e.msg);
      }
      break;
    // A port that frees at t chooses after every arrival at t: those were scheduled
    // before now (at send time), so a serve event scheduled now comes after them.
    case ev::port_free: schedule(now, e.msg, ev::serve); break;
    case ev::serve: serve(mg.dst); break;
    case ev::available: {
      mg.available = true;
      if (auto* rc = record_of(mg)) rc->available = now;
      if (rounds()) finish_send();  // the round is over for the sender too
      if ((r = mg.bound)) {
        ranks[static_cast<std::size_t>(mg.dst)].bound.remove(*r);
        r->transport.state = st_idle;
        rec = deliver(mg, *r);
        note_completion(mg.dst);
        mg.bound = nullptr;
        mg.rx_done = true;
      } else if (!mg.in_list) {
        mg.rx_done = true;  // its receive was cancelled: dropped
      }
      break;
    }
  }
  maybe_free(e.msg);
  if (s) s->complete({});
  if (r) r->complete(rec);
  return true;
}

}  // namespace optcast::sim
