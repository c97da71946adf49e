// Messages by reference between ranks of one host: the receiver copies them once,
// straight from the sender's memory into its posted receive (net/shm/peer_memory.hpp). The
// link still carries everything else: small messages, the references (frame_ref: the
// message's address and a token), and, back the other way, the receipts (frame_done)
// that end the sends; so order, matching, signatures, goodbyes and failures work as for
// any frame.
//
// The sender's hello names its probe, and the acceptor reads it. Only ranks the job's
// layout puts on one host offer it (emulated hosts share a kernel but must talk through
// their links); on a link through memory the kernel vouches for the peer's process, over
// TCP only in jobs with a secret (a peer proves who it is before another reads memory it
// names).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tcp_fabric.hpp"
#include "../shm/peer_memory.hpp"

namespace optcast::tcp::impl {

void tcp_fabric::offer_single_copy(hello& h, int p, bool in_memory) {
  if (!offers_single_copy(p, in_memory)) return;
  const auto mine = shm::my_probe();
  h.pid = static_cast<std::uint32_t>(::getpid());
  h.probe = mine.address;
  h.cookie = mine.cookie;
}

bool tcp_fabric::probe_reads(const hello& h) const {
  const int e = shm::probe_reads(static_cast<pid_t>(h.pid), h.probe, h.cookie);
  if (e != 0 && e != EINVAL)
    log(log_level::debug, rank_name(cfg_.rank) + ": cannot read rank " + std::to_string(h.rank) + "'s memory (" + std::strerror(e) +
                              "): its messages come through the link");
  return e == 0;
}

void tcp_fabric::take_ref(const std::shared_ptr<in_conn>& c, tag tg, const call_signature& sig, std::uint64_t len) {
  const std::uint64_t from = wire::get_u64(c->ref.data()), token = wire::get_u64(c->ref.data() + 8);
  auto alive = alive_;
  operation* op = take_posted(c->peer, tg);
  if (op)
    if (auto bad = arrival_error(*op, sig, len)) {
      op->transport.state = st_none;
      op->complete(bad);
      if (!*alive) return;
      op = nullptr;  // copied aside, as a data frame's payload is read aside
    }
  std::optional<detail::message_buffer> held;
  if (!op && !(held = hold_unexpected(c, tg, len))) return;
  std::byte* into = op ? op->data : held->data();
  if (op) {
    op->transport.state = st_reading;
    c->target = op;
  }
  if (const int e = shm::read_peer(static_cast<pid_t>(c->pid), from, into, len)) {
    if (held) release_unexpected(peer(c->peer), len);
    // Gone: its process ended (its connection's end says how, or the loss grace decides).
    if (e == ESRCH || shm::exiting(static_cast<pid_t>(c->pid))) return in_ended(c, "its process is gone (" + std::string(std::strerror(e)) + ")");
    return protocol_error(c, "a message by reference that cannot be read from its memory (" + std::string(std::strerror(e)) + ")");
  }
  ++counts_.single_copies;
  send_receipt(c, token);
  if (!op) {
    c->pending_tag = tg;
    c->pending_sig = sig;
    c->payload = std::move(*held);
    return stash(c);
  }
  c->target = nullptr;
  op->transport.state = st_none;
  op->complete({});
  if (*alive && c->open) read_frame(c);
}

void tcp_fabric::send_receipt(const std::shared_ptr<in_conn>& c, std::uint64_t token) {
  if (!c->open) return;
  frame_header f;
  f.kind = frame_header::done;
  f.abort_code = token;
  std::array<std::byte, frame_bytes + auth::channel::tag_bytes> b{};
  const std::span<std::byte, frame_bytes> h(b.data(), frame_bytes);
  encode(h, f);
  std::size_t n = frame_bytes;
  if (c->back) {
    c->back->seal(h, nullptr, nullptr, 0, b.data() + frame_bytes);
    n += auth::channel::tag_bytes;
  }
  c->receipts.insert(c->receipts.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
  if (c->receipts_writing.empty()) write_receipts(c);
}

void tcp_fabric::write_receipts(const std::shared_ptr<in_conn>& c) {
  // Nothing else goes this way on the connection: the socket almost always takes them at
  // once, and the receive completes with its receipt on the way without a trip through
  // the loop (whose next run may be the rank's next call).
  std::error_code ec;
  std::size_t n = 0;
  if (!c->receipts.empty()) n = c->sock.write_some(asio::buffer(c->receipts), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  if (ec) return;  // the connection is failing: its reading side says so
  c->receipts.erase(c->receipts.begin(), c->receipts.begin() + static_cast<std::ptrdiff_t>(n));
  if (c->receipts.empty()) return;
  c->receipts_writing.swap(c->receipts);
  asio::async_write(c->sock, asio::buffer(c->receipts_writing), [this, alive = alive_, c](std::error_code e, std::size_t) {
    if (!*alive) return;
    c->receipts_writing.clear();
    if (!e && c->open) write_receipts(c);
  });
}

void tcp_fabric::read_receipts(int p, int rail) {
  auto& o = out(p, rail);
  const std::size_t n = frame_bytes + (o.back ? auth::channel::tag_bytes : 0);
  asio::async_read(o.sock, asio::buffer(o.receipt.data(), n),
                   asio::bind_allocator(detail::handler_allocator<int>(*o.read_mem),
                                        [this, alive = alive_, p, rail, mem = o.read_mem](std::error_code ec, std::size_t) {
    if (!*alive) return;
    auto& o2 = out(p, rail);
    auto& pe = peer(p);
    // The peer closes its end when it leaves: no loss unless a send still waits on it.
    if (ec) {
      if (!pe.lent.empty() && o2.st == out_conn::state::ready) out_lost(p, rail, "reading receipts from " + rank_name(p) + ": " + ec.message());
      return;
    }
    const std::span<const std::byte, frame_bytes> h(o2.receipt.data(), frame_bytes);
    const frame_header f = decode_frame(h);
    const bool sound = f.kind == frame_header::done && (!o2.back || o2.back->open(h, nullptr, 0, o2.receipt.data() + frame_bytes));
    operation* op = !sound ? nullptr : pe.lent.find([&](const operation& x) {
      return reinterpret_cast<std::uintptr_t>(x.transport.ctx[1]) == f.abort_code;
    });
    // A receipt whose send has already failed (fail_lent: this rank aborted, or took the
    // peer for lost on the store's word) is no peer's fault: it was on its way.
    if (!op && sound && (failure() || !peer_alive(p))) return;
    if (!op) {
      const std::string why = (sound ? "a receipt for a message by reference it was not sent" : "a malformed receipt") + std::string(" from ") + rank_name(p);
      log(log_level::error, rank_name(cfg_.rank) + ": " + why);
      return abort(make_error_code(errc::protocol_violation), why);
    }
    pe.lent.remove(*op);
    op->transport.state = st_none;
    const bool cancelled = op->transport.ctx[2] != nullptr;  // cancel()'s, deferred to here
    op->complete(cancelled ? op->ec : std::error_code());
    if (*alive) read_receipts(p, rail);
  }));
}

void tcp_fabric::fail_lent(int p, std::error_code ec, const std::string& why) {
  auto alive = alive_;
  while (operation* op = peer(p).lent.pop_front()) {
    op->transport.state = st_none;
    note_error(why + ": " + describe_op(*op));
    op->complete(ec);
    if (!*alive) return;
  }
}

}  // namespace optcast::tcp::impl
