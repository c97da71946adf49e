#include "optcast/stream.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "collective_common.hpp"
#include "optcast/when_all.hpp"
#include "runtime/comm_access.hpp"

namespace optcast {

// Every message is an 8-byte header and the item. The header is 0 for an item and
// e + 1 for an end marker, e being the number of items pushed: a rank that receives any
// marker knows where the stream ends.
namespace {
constexpr std::size_t header = 8;
}

struct broadcast_stream::state {
  communicator* c = nullptr;
  fabric* f = nullptr;
  std::uint32_t seq = 0;
  int P = 1, root = 0, q = 0;  // q: this rank's processor in the plan (0 is the root)
  int L = 1;
  double step = 1;   // model time per plan step
  double t0 = 0;     // model time of step 0 (when this rank opened the stream)
  std::size_t item_bytes = 0;
  std::chrono::milliseconds timeout{};

  // Block-cyclic: the continuous schedule. Otherwise windows of `W` items of the
  // single-sending plan, `S` steps each, one starting every `stride` <= S steps (they
  // overlap where no port is busy twice), this processor's actions by window step.
  std::shared_ptr<const logp::continuous_schedule> cs;
  std::shared_ptr<const logp::kitem_plan> plan;
  std::int64_t W = 0, S = 0, stride = 0;
  std::vector<logp::continuous_schedule::action> mine;
  std::int64_t delay = 0, bound = 0;

  // The ring of messages in hand: item j in slot j mod C while it is needed (C: open()).
  std::int64_t C = 0;
  std::vector<std::byte> ring;
  std::vector<std::int64_t> in_slot;  // which item a slot holds (-1: none)
  std::vector<std::byte> out;         // the root's message being sent

  // Receives are posted A steps ahead (A = L): then the rank furthest behind can always
  // go on (its receive was sent by a rank that passed that step, its send finds the
  // receive posted), so a fabric whose sends wait for the receive (libfabric
  // rendezvous) cannot deadlock the stream.
  std::int64_t A = 1;
  std::vector<std::unique_ptr<posted_op>> rx;  // per step mod A + 1
  std::vector<std::int64_t> rx_item;           // the item each holds (-1: none)
  std::int64_t posted = -1;                    // the last step whose receive is posted

  std::int64_t t = 0;          // the next step to run
  std::int64_t pushed = 0;     // root: items pushed (markers included)
  std::int64_t delivered = 0;  // others: items handed to the caller
  std::int64_t end = -1;       // items in the stream, once known
  std::int64_t K = -1;         // items including the end markers, once known
  bool closed = false, finished = false;

  std::byte* slot(std::int64_t j) { return ring.data() + static_cast<std::size_t>(j % C) * (header + item_bytes); }
  std::size_t message_bytes() const { return header + item_bytes; }

  logp::continuous_schedule::action at(std::int64_t step_no) const {
    if (cs) return cs->at(q, step_no);
    logp::continuous_schedule::action a;
    for (auto w = step_no / stride; w >= 0 && step_no - w * stride < S; --w) {
      const auto& x = mine[static_cast<std::size_t>(step_no - w * stride)];
      if (x.recv_item >= 0) {
        a.recv_item = x.recv_item + w * W;
        a.recv_from = x.recv_from;
      }
      if (x.send_item >= 0) {
        a.send_item = x.send_item + w * W;
        a.send_to = x.send_to;
      }
    }
    return a;
  }
  // The step at which the root sends item i.
  std::int64_t step_of(std::int64_t i) const { return cs ? i : (i / W) * stride + i % W; }
  // Items with the markers, for a stream of e items. Windows: the rest of e's window,
  // and whole windows of markers up to the first that starts after e's window ends,
  // by when every rank has had a marker.
  std::int64_t padded(std::int64_t e) const {
    return cs ? e + delay + 1 : (e / W + (S - 1) / stride + 1) * W;
  }
  // The last step that moves any of K items.
  std::int64_t last_step() const { return cs ? K - 1 + delay : (K / W - 1) * stride + S - 1; }
  bool exists(std::int64_t i) const { return i >= 0 && (K < 0 || i < K); }

  void learn(const std::byte* msg) {
    std::uint64_t h = 0;
    std::memcpy(&h, msg, header);
    if (h && end < 0) {
      end = static_cast<std::int64_t>(h - 1);
      K = padded(end);
    }
  }

  task<result<void>> wait_for_step(std::int64_t s) {
    if (const auto now = f->model_time(); now && *now < t0 + static_cast<double>(s) * step)
      if (auto r = co_await f->compute(t0 + static_cast<double>(s) * step - *now); !r) co_return fail(r.error());
    co_return result<void>{};
  }

  // One step of a rank other than the root: its receive and its send. A send of the
  // item received in the same step waits for it (a node forwards in the step it
  // receives); otherwise both run at once.
  task<result<void>> run_step() {
    const detail::rooted ranks{P, root};
    const auto slots = static_cast<std::int64_t>(rx.size());
    for (; posted < t + A; ++posted) {
      const auto s = posted + 1;
      const auto a = at(s);
      const auto k = static_cast<std::size_t>(s % slots);
      rx_item[k] = -1;
      if (!exists(a.recv_item)) continue;
      rx[k] = std::make_unique<posted_op>();
      rx[k]->start(f->recv(ranks.real(a.recv_from), {seq, static_cast<std::uint32_t>(a.recv_item)},
                           std::span(slot(a.recv_item), message_bytes())));
      rx_item[k] = a.recv_item;
    }
    const auto a = at(t);
    const auto k = static_cast<std::size_t>(t % slots);
    const auto j = rx_item[k];
    if (j >= 0 && !exists(j)) {  // posted before the end was known: nothing will come
      // Cancelled and awaited before its memory goes: a fabric may hand a cancelled
      // receive back later (libfabric, from its completion queue).
      rx[k]->cancel();
      (void)co_await rx[k]->finished();
      rx[k].reset();
    }
    const bool receiving = j >= 0 && exists(j);
    const auto take = [&]() -> task<result<void>> {
      if (auto r = co_await rx[k]->finished(); !r) co_return fail(r.error());
      in_slot[static_cast<std::size_t>(j % C)] = j;
      learn(slot(j));
      co_return result<void>{};
    };
    // A node forwards an item in the step it receives it: that send waits for the
    // receive; any other send runs alongside it.
    if (exists(a.send_item)) {
      if (receiving && a.send_item == j) {
        if (auto r = co_await take(); !r) co_return r;
      } else if (in_slot[static_cast<std::size_t>(a.send_item % C)] != a.send_item) {
        co_return fail(errc::protocol_violation);  // the schedule forwards what is not in
      }
      if (exists(a.send_item)) {  // a marker just received may have ended the stream before it
        if (auto r = co_await wait_for_step(t); !r) co_return r;
        if (auto r = co_await f->send(ranks.real(a.send_to), {seq, static_cast<std::uint32_t>(a.send_item)},
                                      std::span<const std::byte>(slot(a.send_item), message_bytes()));
            !r)
          co_return fail(r.error());
      }
      if (receiving && a.send_item == j) {
        ++t;
        co_return result<void>{};
      }
    }
    if (receiving)
      if (auto r = co_await take(); !r) co_return r;
    ++t;
    co_return result<void>{};
  }

  task<result<void>> send_item(std::span<const std::byte> item, std::uint64_t head) {
    const auto s = step_of(pushed);
    std::memcpy(out.data(), &head, header);
    if (!item.empty()) std::memcpy(out.data() + header, item.data(), item.size());
    if (auto r = co_await wait_for_step(s); !r) co_return r;
    const int to = cs ? cs->at(0, s).send_to : plan->sends[0][static_cast<std::size_t>(pushed % W)].peer;
    auto r = co_await f->send(detail::rooted{P, root}.real(to), {seq, static_cast<std::uint32_t>(pushed)}, std::span<const std::byte>(out));
    if (!r) co_return fail(r.error());
    ++pushed;
    co_return result<void>{};
  }
};

namespace {

// The least stride >= k at which copies of the plan, each `span` steps long, started
// every stride steps keep every port to one send and one receive per step.
std::int64_t stride_for(const logp::kitem_plan& plan, std::int64_t span) {
  std::vector<std::vector<char>> busy;  // per processor and step: 1 send, 2 receive
  busy.reserve(static_cast<std::size_t>(plan.P));
  for (int q = 0; q < plan.P; ++q) {
    std::vector<char> b(static_cast<std::size_t>(span));
    for (const auto& x : plan.sends[static_cast<std::size_t>(q)]) b[static_cast<std::size_t>(x.time)] |= 1;
    for (const auto& x : plan.receives[static_cast<std::size_t>(q)]) b[static_cast<std::size_t>(x.time)] |= 2;
    busy.push_back(std::move(b));
  }
  for (std::int64_t d = plan.k; d < span; ++d) {
    bool clash = false;
    for (std::int64_t m = d; m < span && !clash; m += d)
      for (const auto& b : busy) {
        for (std::int64_t t = m; t < span && !clash; ++t) clash = (b[static_cast<std::size_t>(t)] & b[static_cast<std::size_t>(t - m)]) != 0;
        if (clash) break;
      }
    if (!clash) return d;
  }
  return span;
}

}  // namespace

broadcast_stream::broadcast_stream(std::unique_ptr<state> s) : s_(std::move(s)) {}
broadcast_stream::~broadcast_stream() = default;

result<std::unique_ptr<broadcast_stream>> broadcast_stream::open(communicator& c, int root, std::size_t item_bytes,
                                                                 stream_options o) {
  // The entry path every collective takes (sequence number first, the broken check,
  // root and model), with the stream's own check, its window.
  const collective_options copts{.model = o.model};
  detail::call_start call(c, collective::stream, copts);
  if (!call.ok() || !call.check_root(root) || (o.window < 0 && !call.refuse("window must not be negative")))
    return fail(call.early.error());
  const auto model = call.model();
  if (!model) return fail(call.early.error());
  const int P = c.size();
  auto s = std::make_unique<state>();
  s->seq = call.seq;
  s->c = &c;
  s->f = &c.get_fabric();
  s->P = P;
  s->root = root;
  s->q = detail::rooted{P, root}.virt(c.rank());
  s->item_bytes = item_bytes;
  s->L = logp::postal_steps({model->L, model->o, model->g});
  s->step = std::max(model->g, model->o);
  s->t0 = s->f->model_time().value_or(0);
  s->timeout = o.timeout.value_or(c.options().timeout);
  if (P > 1) {
    auto cs = logp::continuous_for(P, s->L);
    s->bound = cs->delay();
    if (cs->block_cyclic()) {
      s->cs = std::move(cs);
      s->delay = s->bound;

    } else {
      s->W = o.window ? o.window : std::max<std::int64_t>(8, 4 * s->bound);
      s->plan = logp::kitem_single_for(P, s->L, static_cast<int>(s->W));
      s->S = s->plan->finish + 1;
      s->stride = stride_for(*s->plan, s->S);
      // An item's delay: its last reception in the window less its push step.
      for (const auto& rs : s->plan->receives)
        for (const auto& x : rs) s->delay = std::max<std::int64_t>(s->delay, x.time - x.item);
      s->mine.resize(static_cast<std::size_t>(s->S));
      for (const auto& x : s->plan->sends[static_cast<std::size_t>(s->q)]) {
        auto& a = s->mine[static_cast<std::size_t>(x.time)];
        a.send_item = x.item;
        a.send_to = x.peer;
      }
      for (const auto& x : s->plan->receives[static_cast<std::size_t>(s->q)]) {
        auto& a = s->mine[static_cast<std::size_t>(x.time)];
        a.recv_item = x.item;
        a.recv_from = x.peer;
      }

    }
  }
  // Every action on item i falls in [push_step(i), push_step(i) + delay], and push steps
  // grow by at least one per item; receives are posted A = L steps ahead. So when item
  // i + C arrives, item i is done with and (the caller reading in order) delivered.
  s->C = 2 * (s->delay + 1) + s->L;
  if (s->q == 0) {
    s->out.resize(s->message_bytes());
  } else {
    s->ring.resize(static_cast<std::size_t>(s->C) * s->message_bytes());
    s->in_slot.assign(static_cast<std::size_t>(s->C), -1);
    s->A = s->L;
    s->rx.resize(static_cast<std::size_t>(s->A + 1));
    s->rx_item.assign(static_cast<std::size_t>(s->A + 1), -1);
  }
  return std::unique_ptr<broadcast_stream>(new broadcast_stream(std::move(s)));
}

task<result<void>> broadcast_stream::push(std::span<const std::byte> item) {
  auto& s = *s_;
  auto& c = *s.c;
  if (c.broken()) co_return fail(errc::broken);
  if (s.q != 0) co_return detail::refuse(c, "broadcast_stream::push: only the root pushes; rank " + std::to_string(c.rank()) + " is not it");
  if (s.closed) co_return detail::refuse(c, "broadcast_stream::push: the stream is closed");
  if (item.size() != s.item_bytes)
    co_return detail::refuse(c, "broadcast_stream::push: an item of " + std::to_string(item.size()) + " bytes; the stream's are " +
                                    std::to_string(s.item_bytes));
  if (s.P == 1) co_return result<void>{};
  detail::deadline_scope deadline(*s.f, s.seq, s.timeout);
  co_return detail::finish(c, co_await s.send_item(item, 0));
}

task<result<void>> broadcast_stream::close() {
  auto& s = *s_;
  auto& c = *s.c;
  if (c.broken()) co_return fail(errc::broken);
  if (s.q != 0) co_return detail::refuse(c, "broadcast_stream::close: only the root closes; rank " + std::to_string(c.rank()) + " is not it");
  if (s.closed) co_return detail::refuse(c, "broadcast_stream::close: the stream is closed already");
  s.closed = true;
  if (s.P == 1) co_return result<void>{};
  detail::deadline_scope deadline(*s.f, s.seq, s.timeout);
  s.end = s.pushed;
  s.K = s.padded(s.end);
  const std::vector<std::byte> none(s.item_bytes);
  while (s.pushed < s.K)
    if (auto r = co_await s.send_item(none, static_cast<std::uint64_t>(s.end) + 1); !r) co_return detail::finish(c, std::move(r));
  co_return result<void>{};
}

task<result<bool>> broadcast_stream::next(std::span<std::byte> item) {
  auto& s = *s_;
  auto& c = *s.c;
  if (c.broken()) co_return fail(errc::broken);
  if (s.q == 0 && s.P > 1) {
    detail::comm_access::record_error(c, "broadcast_stream::next: the root pushes; rank " + std::to_string(c.rank()) + " is the root");
    co_return fail(errc::invalid_argument);
  }
  if (item.size() != s.item_bytes) {
    detail::comm_access::record_error(c, "broadcast_stream::next: a buffer of " + std::to_string(item.size()) + " bytes; the stream's items are " +
                   std::to_string(s.item_bytes));
    co_return fail(errc::invalid_argument);
  }
  if (s.finished || s.P == 1) co_return false;
  detail::deadline_scope deadline(*s.f, s.seq, s.timeout);
  const auto n = s.delivered;
  while (s.in_slot[static_cast<std::size_t>(n % s.C)] != n && !(s.end >= 0 && n >= s.end))
    if (auto r = co_await s.run_step(); !r) {
      detail::finish(c, r);
      co_return fail(r.error());
    }
  if (s.end >= 0 && n >= s.end) {
    // The end: pass on what this rank still owes, then report it.
    while (s.t <= s.last_step())
      if (auto r = co_await s.run_step(); !r) {
        detail::finish(c, r);
        co_return fail(r.error());
      }
    s.finished = true;
    co_return false;
  }
  if (!item.empty()) std::memcpy(item.data(), s.slot(n) + header, s.item_bytes);
  ++s.delivered;
  co_return true;
}

bool broadcast_stream::block_cyclic() const noexcept { return s_->cs != nullptr; }
std::int64_t broadcast_stream::delay_steps() const noexcept { return s_->delay; }
std::int64_t broadcast_stream::bound_steps() const noexcept { return s_->bound; }
std::int64_t broadcast_stream::push_step(std::int64_t i) const noexcept { return s_->P > 1 ? s_->step_of(i) : 0; }
std::size_t broadcast_stream::item_bytes() const noexcept { return s_->item_bytes; }

}  // namespace optcast
