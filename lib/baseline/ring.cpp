#include <algorithm>
#include <cstring>
#include <memory>

#include "round_loops.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// The pipelined ring: every rank sends to one neighbour and receives from the other, the
// same two for the whole call. In the rounds model it takes more rounds than Träff's
// circulant schedules (p - 2 more for a broadcast of n blocks, where the circulant graph
// needs only ceil(log2 p) - 1), but on a real network its links never change partners:
// each carries one steady stream, and a late message delays only what follows it on its
// link. Where the circulant's partners change every round, a rank that runs a round
// ahead sends into a link still busy with another rank's message, and the two share it.
//
// Every loop is data-driven: a rank's sends go out in their order, each once the data
// it forwards has arrived; its receives are posted ahead (straight into the buffer where
// the data stays, into a few scratch slots where it is combined). In the rounds model
// each send then takes the round the schedule gives it.

namespace {

// Receives posted in order and awaited in order, at most `width` outstanding: receive j
// goes into slot j mod width.
class recv_window {
public:
  explicit recv_window(std::size_t width) : width_(std::max<std::size_t>(width, 1)), ops_(std::make_unique<posted_op[]>(width_)) {}
  std::size_t width() const noexcept { return width_; }
  posted_op& slot(std::size_t j) noexcept { return ops_[j % width_]; }
  std::span<posted_op> all() noexcept { return {ops_.get(), width_}; }

private:
  std::size_t width_;
  std::unique_ptr<posted_op[]> ops_;
};

// Outstanding receives a ring loop keeps posted ahead of the one it waits for: enough
// that a neighbour a few messages ahead finds its receive posted.
constexpr std::size_t ahead = 8;

}  // namespace

namespace {

task<result<void>> broadcast_ring_loop(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root, int n,
                                       std::uint32_t step0, recv_window& rx) {
  const int p = f.size();
  const detail::rooted ranks{p, root};
  const int v = ranks.virt(f.rank());
  const block_partition blocks(buf.size(), static_cast<std::size_t>(n));
  const auto nb = static_cast<std::size_t>(n);
  auto block = [&](std::size_t b) { return blocks.block(buf, b); };
  auto tg = [&](std::size_t b) { return tag{seq, step0 + static_cast<std::uint32_t>(b)}; };

  // Virtual rank v receives block b from v - 1 in round b + v - 1 and sends it to v + 1
  // in round b + v: n + p - 2 rounds.
  const bool receives = v > 0, sends = v + 1 < p;
  std::size_t posted = 0;
  auto post_until = [&](std::size_t end) {
    for (; posted < std::min(end, nb); ++posted) rx.slot(posted).start(f.recv(ranks.real(v - 1), tg(posted), block(posted)));
  };
  if (receives) post_until(rx.width());
  for (std::size_t b = 0; b < nb; ++b) {
    if (receives) {
      if (auto res = co_await rx.slot(b).finished(); !res) co_return fail(res.error());
      post_until(b + 1 + rx.width());
    }
    if (sends)
      if (auto res = co_await f.send(ranks.real(v + 1), tg(b), block(b)); !res) co_return fail(res.error());
  }
  co_return result<void>{};
}

task<result<void>> reduce_ring_loop(fabric& f, std::uint32_t seq, std::span<std::byte> work, int root, int n,
                                    const erased_reduction& op, recv_window& rx, std::span<std::byte> slots) {
  const int p = f.size();
  const detail::rooted ranks{p, root};
  const int v = ranks.virt(f.rank());
  const block_partition parts(work.size() / op.elem, static_cast<std::size_t>(n));
  const auto nb = static_cast<std::size_t>(n);
  auto block = [&](std::size_t b) { return work.subspan(parts.offset(b) * op.elem, parts.size(b) * op.elem); };
  auto tg = [&](std::size_t b) { return tag{seq, static_cast<std::uint32_t>(b)}; };

  // The broadcast's ring backwards: rank p - 1 sends block b in round b, rank v combines
  // what v + 1 sent with its own and passes it on a round later; n + p - 2 rounds. With
  // the root as rank 0, block b at rank v is in_v (+) (in_{v+1} (+) (... (+) in_{p-1})).
  const bool receives = v + 1 < p, sends = v > 0;
  auto slot_buf = [&](std::size_t b) {
    return slots.subspan((b % rx.width()) * parts.size(0) * op.elem, parts.size(b) * op.elem);
  };
  std::size_t posted = 0;
  auto post_until = [&](std::size_t end) {
    for (; posted < std::min(end, nb); ++posted) rx.slot(posted).start(f.recv(ranks.real(v + 1), tg(posted), slot_buf(posted)));
  };
  if (receives) post_until(rx.width());
  for (std::size_t b = 0; b < nb; ++b) {
    if (receives) {
      if (auto res = co_await rx.slot(b).finished(); !res) co_return fail(res.error());
      auto mine = block(b);
      op(mine.data(), slot_buf(b).data(), mine.data(), mine.size() / op.elem);
      post_until(b + 1 + rx.width());
    }
    if (sends)
      if (auto res = co_await f.send(ranks.real(v - 1), tg(b), block(b)); !res) co_return fail(res.error());
  }
  co_return result<void>{};
}

// What a segment ring does: reduce-scatter, allgather, or both in one pass (allreduce).
struct ring_phases {
  bool reduce_scatter = false;
  bool allgather = false;
};

// The ring over a segmented buffer: p - 1 steps of n messages per phase, message
// k = t n + b carrying block b in step t. Allgather alone: step t sends segment r - t,
// which this rank has (its own, or what came in step t - 1), and receives segment
// r - t - 1 in place. Reduce-scatter: step t sends the partial of segment r - t - 1 and
// receives that of r - t - 2 into a scratch slot, to combine into this rank's before
// sending it on in step t + 1; after p - 1 steps segment r is complete here. Both: the
// allgather's steps continue the count (its step t is step p - 1 + t, and modulo p the
// same segments go out and come in), so its receives are posted, in place, while the
// reduce-scatter is still running, and a neighbour that finishes first finds them.
// (p - 1) n rounds per phase; empty blocks are not sent.
// With `src` (the reduce-scatter's operand, laid out as buf, or buf itself), this rank's
// contributions are read there: its first send (segment r - 1, not kept here: it comes
// back in the allgather) and each combine, which writes buf's segment once; buf needs
// no copy of the operand beforehand. Without, buf holds it.
task<result<void>> segment_ring_loop(fabric& f, std::uint32_t seq, std::uint32_t step0, std::span<const std::byte> src,
                                     std::span<std::byte> buf, const segment_layout& lay, recv_window& rx,
                                     ring_phases phases, const erased_reduction* op, std::span<std::byte> slots,
                                     std::size_t biggest, std::span<const std::byte> own) {
  const int p = f.size(), r = f.rank();
  const int to = (r + 1) % p, from = (r + p - 1) % p;
  const auto nb = static_cast<std::size_t>(lay.n);
  const std::size_t phase = static_cast<std::size_t>(p - 1) * nb;
  const std::size_t reducing = phases.reduce_scatter ? phase : 0;  // messages 0 .. reducing - 1 are combined
  const std::size_t total = reducing + (phases.allgather ? phase : 0);
  const int sent_back = phases.reduce_scatter ? 1 : 0;  // segment r - t - sent_back goes out in step t
  auto seg = [&](std::size_t k, int back) { return ((r - static_cast<int>(k / nb) - back) % p + p) % p; };
  // The operand's part where buf has `b`.
  auto operand = [&](std::span<std::byte> b) -> std::span<const std::byte> {
    return src.empty() ? b : src.subspan(static_cast<std::size_t>(b.data() - buf.data()), b.size());
  };
  auto out_block = [&](std::size_t k) -> std::span<const std::byte> {
    auto b = lay.block(buf, seg(k, sent_back), static_cast<int>(k % nb));
    if (k >= nb) return b;  // step 0 sends this rank's own
    return phases.reduce_scatter ? operand(b) : lay.own_source(buf, r, b, own);
  };
  auto in_block = [&](std::size_t k) { return lay.block(buf, seg(k, sent_back + 1), static_cast<int>(k % nb)); };
  auto tg = [&](std::size_t k) { return tag{seq, step0 + static_cast<std::uint32_t>(k)}; };
  auto landing = [&](std::size_t k, std::span<std::byte> in) {
    return k < reducing ? slots.subspan((k % rx.width()) * biggest, in.size()) : in;
  };

  std::size_t posted = 0;
  auto post_until = [&](std::size_t end) {
    for (; posted < std::min(end, total); ++posted)
      if (auto in = in_block(posted); !in.empty()) rx.slot(posted).start(f.recv(from, tg(posted), landing(posted, in)));
  };
  auto arrived = [&](std::size_t k) {
    if (auto mine = in_block(k); k < reducing && !mine.empty())
      (*op)(landing(k, mine).data(), operand(mine).data(), mine.data(), mine.size() / op->elem);
    post_until(k + 1 + rx.width());
  };
  post_until(rx.width());
  for (std::size_t k = 0; k < total; ++k) {
    if (k >= nb) {  // sends on what message k - n brought
      if (auto res = co_await rx.slot(k - nb).finished(); !res) co_return fail(res.error());
      arrived(k - nb);
    }
    if (auto out = out_block(k); !out.empty())
      if (auto res = co_await f.send(to, tg(k), out); !res) co_return fail(res.error());
  }
  for (std::size_t k = total - std::min(total, nb); k < total; ++k) {
    if (auto res = co_await rx.slot(k).finished(); !res) co_return fail(res.error());
    arrived(k);
  }
  co_return result<void>{};
}

task<result<void>> segment_ring(fabric& f, std::uint32_t seq, std::uint32_t step0, std::span<const std::byte> in,
                                std::span<std::byte> buf, const segment_layout& lay, ring_phases phases,
                                const erased_reduction* op, std::span<const std::byte> own = {}) {
  if (f.size() == 1 || lay.contributors.empty()) {
    if (!in.empty() && in.data() != buf.data()) std::memcpy(buf.data(), in.data(), in.size());
    co_return result<void>{};
  }
  // A step's n receives and `ahead` more, at most all of them.
  const auto n = static_cast<std::size_t>(lay.n);
  const std::size_t messages = static_cast<std::size_t>(f.size() - 1) * n * (phases.reduce_scatter + phases.allgather);
  recv_window rx(std::min(messages, n + ahead));
  std::size_t biggest = 0;
  if (phases.reduce_scatter)
    for (int j : lay.contributors) biggest = std::max(biggest, lay.block(buf, j, 0).size());
  const auto slots = f.scratch().take(rx.width() * biggest);
  auto res = co_await segment_ring_loop(f, seq, step0, in, buf, lay, rx, phases, op, slots.span(), biggest, own);
  co_await settle(rx.all());
  co_return res;
}

}  // namespace

// Each loop posts receives ahead; whatever way it ends, they are settled (when_all.hpp)
// before their window and scratch slots go.

task<result<void>> broadcast_ring(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root, int n,
                                  std::uint32_t step0) {
  if (f.size() == 1) co_return result<void>{};
  recv_window rx(std::min(static_cast<std::size_t>(n), ahead));
  auto res = co_await broadcast_ring_loop(f, seq, buf, root, n, step0, rx);
  co_await settle(rx.all());
  co_return res;
}

task<result<void>> reduce_ring(fabric& f, std::uint32_t seq, std::span<std::byte> work, int root, int n,
                               const erased_reduction& op) {
  if (f.size() == 1) co_return result<void>{};
  recv_window rx(std::min(static_cast<std::size_t>(n), ahead));
  const block_partition parts(work.size() / op.elem, static_cast<std::size_t>(n));
  const auto slots = f.scratch().take(rx.width() * parts.size(0) * op.elem);
  auto res = co_await reduce_ring_loop(f, seq, work, root, n, op, rx, slots.span());
  co_await settle(rx.all());
  co_return res;
}

task<result<void>> allgatherv_ring(fabric& f, std::uint32_t seq, std::uint32_t step0, std::span<std::byte> buf,
                                   const segment_layout& lay, std::span<const std::byte> own) {
  return segment_ring(f, seq, step0, {}, buf, lay, {.allgather = true}, nullptr, own);
}

task<result<void>> reduce_scatter_ring(fabric& f, std::uint32_t seq, std::uint32_t step0, std::span<std::byte> buf,
                                       const segment_layout& lay, const erased_reduction& op) {
  return segment_ring(f, seq, step0, {}, buf, lay, {.reduce_scatter = true}, &op);
}

task<result<void>> allreduce_ring(fabric& f, std::uint32_t seq, std::span<const std::byte> in, std::span<std::byte> buf,
                                  const segment_layout& lay, const erased_reduction& op) {
  return segment_ring(f, seq, 0, in, buf, lay, {.reduce_scatter = true, .allgather = true}, &op);
}

}  // namespace optcast::algorithms
