// The TCP fabric: the operations' lifecycle, sending (a connection per peer, direction
// and rail, opened on first use), failure and abort. Joining the job is join.cpp's, the
// receiving half receive.cpp's.
#include "tcp_fabric.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "../common/owned_loop.hpp"
#include "../bootstrap/launcher_detect.hpp"

namespace optcast::tcp {

namespace impl {

bool tcp_fabric::start(operation& op) noexcept {
  if (auto ec = check_op(*this, op)) return fail_now(op, ec, "bad operation");
  if (failure()) return fail_now(op, failure(), failure_detail());
  std::string why;
  if (auto ec = refusal(op, why)) return fail_now(op, ec, why);
  op.transport.state = st_none;
  if (op.peer == any_peer) return start_recv_any(op);
  auto& pe = peer(op.peer);
  return op.kind == op_kind::send ? start_send(op, pe) : start_recv(op, pe);
}

void tcp_fabric::cancel(operation& op, std::error_code ec) noexcept {
  if (op.finished) return;
  if (op.transport.state == st_failing) {  // failing already: now
    failing_.remove(op);
    op.transport.state = st_none;
    op.complete(ec);
    return;
  }
  if (op.transport.state == st_posted_any) {  // no peer yet
    any_posted_.remove(op);
    op.transport.state = st_none;
    op.complete(ec);
    return;
  }
  auto& pe = peer(op.peer);
  switch (op.transport.state) {
    case st_queued:
      pe.out[static_cast<std::size_t>(rail_of(op))].queue.remove(op);
      break;
    case st_posted:
      pe.posted.remove(op);
      break;
    case st_lent:
      // The receiver may be copying it now: its memory must hold what was sent until the
      // receipt comes (the receiver copies what it is sent at once, posted or not), or its
      // connection fails. It ends then, with `ec`.
      op.ec = ec;
      op.transport.ctx[2] = reinterpret_cast<void*>(std::uintptr_t{1});
      return;
    case st_writing:
    case st_reading:
      // Part of its frame is on the wire: cutting it short would end a connection the
      // survivors of a failure still need. It ends once its bytes have passed (or its
      // connection fails), with `ec`.
      if (op.transport.state == st_writing) pe.out[static_cast<std::size_t>(rail_of(op))].cancelled = ec;
      for (auto& c : pe.in)
        if (c && c->target == &op) c->cancelled = ec;
      return;
    default:
      return;
  }
  op.transport.state = st_none;
  if (!op.finished) op.complete(ec);
}

void tcp_fabric::abort(std::error_code ec, std::string detail) noexcept {
  note_failure(ec, detail);
  cancel_loss_grace();
  stall_.clear();
  spread_failure();  // an abort frame where a connection is up, and the store
  auto alive = alive_;
  for (int r = 0; r < cfg_.size && *alive; ++r) {
    if (r == cfg_.rank) continue;
    fail_out(r, ec, detail);
    drop_in(r, ec, detail);
  }
  if (*alive) fail_posted_any(ec, detail);
  if (*alive) end_agreements(ec, detail);
}

void tcp_fabric::tell_peers(const std::string& why) noexcept {
  const std::string text = rank_name(cfg_.rank) + " failed: " + why.substr(0, max_abort_text - 40);
  std::array<std::byte, frame_bytes> h{};
  frame_header f;
  f.kind = frame_header::abort;
  f.abort_code = static_cast<std::uint64_t>(failure().value());
  f.len = text.size();
  encode(h, f);
  for (int r = 0; r < cfg_.size; ++r)
    for (auto& out : peer(r).out) {
      if (r == cfg_.rank || out.st != out_conn::state::ready || out.writing) continue;
      std::string body = text + std::string(out.chan ? auth::channel::tag_bytes : 0, '\0');
      auto* b = reinterpret_cast<std::byte*>(body.data());
      if (out.chan) out.chan->seal(h, b, b, text.size(), b + text.size());
      std::array<asio::const_buffer, 2> bufs{asio::buffer(h), asio::buffer(body)};
      std::error_code ignored;
      out.sock.write_some(bufs, ignored);  // a partial frame is harmless: the socket closes next
    }
}

void tcp_fabric::on_closing(bool failed) noexcept {
  if (!failed && idle()) say_goodbye();
}

void tcp_fabric::on_closed() noexcept {
  std::error_code ignored;
  for (auto& a : acceptors_) a.close(ignored);
  for (auto& c : handshaking_) c->sock.close(ignored);
  handshaking_.clear();
  if (memory_acceptor_) memory_acceptor_->close(ignored);
  for (auto& m : meetings_) m->sock.close(ignored);
  meetings_.clear();
}

void tcp_fabric::on_left(std::chrono::milliseconds wait) noexcept {
  // Once leave() has waited, every rank has left (or the job failed): the goodbyes that
  // are still unsent are not needed. The destructor's close has not waited: they are.
  finish_goodbyes(wait.count() == 0 ? cfg_.timeout : std::chrono::milliseconds(0));
}

bool tcp_fabric::fail_now(operation& op, std::error_code ec, const std::string& why) {
  note_error(why + ": " + describe_op(op));
  return op.finish_now(ec);
}

bool tcp_fabric::start_send(operation& op, peer_state& pe) {
  if (pe.left) return op.finish_now(peer_left(op, pe.left->first, pe.left->second));
  const int rail = rail_of(op);
  auto& out = pe.out[static_cast<std::size_t>(rail)];
  if (out.st == out_conn::state::idle) adopt(op.peer, rail);
  if (out.st == out_conn::state::failed && !loss_pending_)
    return fail_now(op, make_error_code(errc::peer_lost), "the connection to " + rank_name(op.peer) + " failed");
  if (out.st == out_conn::state::failed) {  // waits for the cause, with those already queued
    op.transport.state = st_queued;
    out.queue.push_back(op);
    return false;
  }
  if (out.st == out_conn::state::ready && !out.writing && out.queue.empty()) {
    // Most frames fit the socket buffer: write now and finish without a trip through
    // the event loop.
    if (!fill_header(out, op)) return fail_now(op, make_error_code(errc::limit_exceeded), "no memory to encrypt the message");
    std::error_code ec;
    const std::size_t n = out.sock.write_some(frame_buffers(out, 0), ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
      op.transport.state = st_queued;
      out.queue.push_back(op);
      out_lost(op.peer, rail, "writing to " + rank_name(op.peer) + ": " + ec.message());
      return false;
    }
    if (n == frame_total(out)) {
      if (!out.lending) return op.finish_now({});
      lend(op);  // by reference: done when its receipt comes
      return false;
    }
    out.writing = &op;
    out.written = n;
    op.transport.state = st_writing;
    continue_write(op.peer, rail);
    return false;
  }
  op.transport.state = st_queued;
  out.queue.push_back(op);
  if (out.st == out_conn::state::idle) open_out(op.peer, rail);
  return false;
}

bool tcp_fabric::fill_header(out_conn& out, operation& op) noexcept {
  frame_header f;
  // Never a control message: the survival layer frees its copy once the send completes,
  // which an aborting fabric does without waiting for the receipt (drop_in), and a peer
  // still to read it then reads freed memory: "a malformed control message" in a job
  // that was only failing. They are small besides.
  f.sig = signature_of(op.tg.seq);
  const std::size_t least = f.sig.op == 0 ? move_min_ : cfg_.shm_copy_min;  // job_config::shm_move_min
  out.lending = out.by_reference && op.size > 0 && op.size >= least && op.tg.seq != seq_layout::control_seq;
  f.kind = out.lending ? frame_header::ref : frame_header::data;
  f.tg = op.tg;
  f.len = op.size;
  encode(out.hdr, f);
  const std::byte* body = op.data;
  std::size_t len = op.size;
  if (out.lending) {
    const std::uint64_t token = ++tokens_;
    op.transport.ctx[1] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(token));
    wire::put_u64(out.ref.data(), reinterpret_cast<std::uintptr_t>(op.data));
    wire::put_u64(out.ref.data() + 8, token);
    body = out.ref.data();
    len = ref_bytes;
  }
  out.body = body;
  out.body_len = len;
  if (!out.chan) return true;
  try {
    out.sealed.resize(len + auth::channel::tag_bytes);
  } catch (const std::exception&) {
    return false;
  }
  out.chan->seal(out.hdr, body, out.sealed.data(), len, out.sealed.data() + len);
  out.body = out.sealed.data();
  out.body_len = out.sealed.size();
  return true;
}

std::array<asio::const_buffer, 2> tcp_fabric::frame_buffers(const out_conn& out, std::size_t skip) {
  const std::byte* body = out.body;
  const std::size_t len = out.body_len;
  if (skip < frame_bytes) return {asio::buffer(out.hdr.data() + skip, frame_bytes - skip), asio::buffer(body, len)};
  return {asio::buffer(body + (skip - frame_bytes), len - (skip - frame_bytes)), asio::const_buffer()};
}

void tcp_fabric::lend(operation& op) {
  op.transport.ctx[2] = nullptr;  // not cancelled (cancel() marks it)
  op.transport.state = st_lent;
  peer(op.peer).lent.push_back(op);
}

void tcp_fabric::continue_write(int p, int rail) {
  auto& out = this->out(p, rail);
  asio::async_write(out.sock, frame_buffers(out, out.written),
                    asio::bind_allocator(detail::handler_allocator<int>(*out.mem),
                    [this, alive = alive_, p, rail, mem = out.mem](std::error_code ec, std::size_t) {
                      if (!*alive) return;
                      auto& o = this->out(p, rail);
                      operation* op = std::exchange(o.writing, nullptr);
                      const std::error_code cancelled = std::exchange(o.cancelled, {});
                      if (op && cancelled && o.lending && !ec) {
                        // A reference is out: it ends at its receipt, as cancel() has a lent one.
                        lend(*op);
                        op->ec = cancelled;
                        op->transport.ctx[2] = reinterpret_cast<void*>(std::uintptr_t{1});
                        op = nullptr;
                      } else if (op && cancelled) {
                        op->transport.state = st_none;
                        op->complete(cancelled);
                        if (!*alive) return;
                        op = nullptr;
                      }
                      if (ec) {
                        if (op) {  // waits for the cause, first in the queue
                          op->transport.state = st_queued;
                          o.queue.push_front(*op);
                        }
                        out_lost(p, rail, "writing to " + rank_name(p) + ": " + ec.message());
                        return;
                      }
                      if (op) {
                        if (o.lending) {
                          lend(*op);
                        } else {
                          op->transport.state = st_none;
                          op->complete({});
                        }
                      }
                      if (*alive) write_next(p, rail);
                    }));
}

void tcp_fabric::write_next(int p, int rail) {
  auto& out = this->out(p, rail);
  if (out.writing || out.st != out_conn::state::ready) return;
  operation* op = nullptr;
  auto alive = alive_;
  while ((op = out.queue.pop_front()) && !fill_header(out, *op)) {
    op->transport.state = st_none;
    note_error("no memory to encrypt the message: " + describe_op(*op));
    op->complete(make_error_code(errc::limit_exceeded));
    if (!*alive || out.writing) return;  // its waiter may have closed the fabric or sent again
  }
  if (!op) return;
  out.writing = op;
  out.written = 0;
  op->transport.state = st_writing;
  continue_write(p, rail);
}


bool tcp_fabric::adopt(int p, int rail) {
  auto& pe = peer(p);
  const auto& c = pe.in[static_cast<std::size_t>(rail)];
  if (!c || !c->open || !c->duplex || c->reverse || c->said_bye || (cfg_.encrypt && !c->reverse_chan)) return false;
  auto& o = out(p, rail);
  if (c->sock.share(o.sock)) return false;  // then it opens one of its own
  o.where = endpoint_text(c->sock);
  o.chan = std::move(c->reverse_chan);
  o.borrowed = true;
  limit_unsent(o.sock);
  o.st = out_conn::state::ready;
  ++counts_.both_ways;
  return true;
}

void tcp_fabric::read_back(int p, int rail) {
  auto& pe = peer(p);
  auto& o = out(p, rail);
  auto& slot = pe.in[static_cast<std::size_t>(rail)];
  // Its own connection came first: it sends on that, never on this one.
  if (slot && slot->open) return;
  link s(o.sock.get_executor());
  if (auto ec = o.sock.share(s))
    // It may write back now, and nothing would read it: the connection cannot be used.
    return fail_out(p, rail, make_error_code(errc::limit_exceeded),
                    "no descriptor to read " + rank_name(p) + "'s messages on the connection to it: " + ec.message());
  auto c = std::make_shared<in_conn>(std::move(s));
  c->peer = p;
  c->rail = rail;
  c->reverse = true;
  if (key_ && cfg_.encrypt) c->chan = std::make_unique<auth::channel>(session_key(o.hs, o.acceptor_nonce, reverse_label));
  slot = c;
  pe.in_closed = false;
  read_frame(c);
}

void tcp_fabric::open_out(int p, int rail) {
  out(p, rail).st = out_conn::state::resolving;
  job_->lookup(addr_key(p), [this, alive = alive_, p, rail](result<std::string> a) {
    if (!*alive) return;
    auto& o = out(p, rail);
    if (o.st != out_conn::state::resolving) return;
    // The store fails a lookup when the job has failed: the operations wait for the cause.
    if (!a) return out_lost(p, rail, "the store does not know where " + rank_name(p) + " listens");
    const auto [rails, their_host] = split_entry(*a);
    const std::string at = rails[std::min(rails.size() - 1, static_cast<std::size_t>(rail))];
    auto where = store::parse_address(at);
    std::error_code ec;
    asio::ip::address ip;
    if (where) ip = asio::ip::make_address(where->host, ec);
    if (!where || ec || static_cast<std::size_t>(rail) >= rails.size())
      return fail_out(p, rail, make_error_code(errc::protocol_violation), "bad address '" + *a + "' for " + rank_name(p) + " (rail " + std::to_string(rail) + ")");
    if (ip.is_loopback() && !their_host.empty() && their_host != launcher::host_identity())
      // A setup that cannot work: the whole job hears why, not only this connection.
      return abort(make_error_code(errc::invalid_argument),
                   rank_name(p) + " advertises " + at + ", a loopback address, but runs on another host (or network namespace): "
                      "its host name or OPTCAST_HOST means loopback there; set OPTCAST_IFNAME or OPTCAST_HOST on that host");
    o.where = at;
    const tcp::endpoint ep(ip, where->port);
    if (memory_to(p)) return open_memory(p, rail, rails.front(), ep);
    connect_socket(p, rail, ep);
  });
}

void tcp_fabric::connect_socket(int p, int rail, tcp::endpoint ep) {
  auto& o = out(p, rail);
  o.st = out_conn::state::connecting;
  o.sock.socket().async_connect(ep, [this, alive = alive_, p, rail](std::error_code ec) {
    if (!*alive) return;
    // Refused most often because the peer failed and exited: wait for the cause too.
    if (ec) return out_lost(p, rail, "cannot connect to " + rank_name(p) + " at " + out(p, rail).where + ": " + ec.message());
    send_hello(p, rail);
  });
}

void tcp_fabric::send_hello(int p, int rail) {
  auto& out = this->out(p, rail);
  out.st = out_conn::state::handshake;
  std::error_code ec;
  if (!out.sock.in_memory()) out.sock.socket().set_option(tcp::no_delay(true), ec);
  hello h;
  h.flags = static_cast<std::uint16_t>((key_ ? hs_auth : 0) | (cfg_.encrypt ? hs_encrypt : 0));
  h.job = job_id_;
  h.rank = static_cast<std::uint32_t>(cfg_.rank);
  h.size = static_cast<std::uint32_t>(cfg_.size);
  h.rail = static_cast<std::uint8_t>(rail);
  if (key_) h.nonce = auth::fresh_nonce();
  h.flags |= hs_duplex;
  offer_single_copy(h, p, out.sock.in_memory());
  out.offered = h.pid != 0;
  out.hs = encode(h);
  asio::async_write(out.sock, asio::buffer(out.hs), [this, alive = alive_, p, rail](std::error_code e, std::size_t) {
    if (!*alive) return;
    if (e) return out_lost(p, rail, "handshake with " + rank_name(p) + ": " + e.message());
    read_reply(p, rail);
  });
}

void tcp_fabric::read_reply(int p, int rail) {
  auto& o = out(p, rail);
  asio::async_read(o.sock, asio::buffer(o.ack), [this, alive = alive_, p, rail](std::error_code e, std::size_t) {
    if (!*alive) return;
    auto& o2 = out(p, rail);
    if (e) return out_lost(p, rail, "handshake with " + rank_name(p) + ": " + e.message());
    const auto status = status_of(wire::get_u32(o2.ack.data() + 4));
    if (wire::get_u32(o2.ack.data()) != hs_magic)
      return fail_out(p, rail, make_error_code(errc::protocol_violation), "what listens at " + o2.where + " is not " + rank_name(p));
    if (status != hs_challenge) return handshake_done(p, rail);
    if (!key_ || o2.acceptor_nonce != auth::nonce{})  // one challenge, and only to a rank that has the secret
      return fail_out(p, rail, make_error_code(errc::protocol_violation), rank_name(p) + " at " + o2.where + " asked for a job secret out of turn");
    std::memcpy(o2.acceptor_nonce.data(), o2.ack.data() + 8, o2.acceptor_nonce.size());
    const std::array<std::span<const std::byte>, 2> parts{std::span(o2.hs), std::span(o2.acceptor_nonce)};
    o2.proof = key_->prove(opener_label, parts);
    asio::async_write(o2.sock, asio::buffer(o2.proof), [this, alive, p, rail](std::error_code e2, std::size_t) {
      if (!*alive) return;
      if (e2) return out_lost(p, rail, "handshake with " + rank_name(p) + ": " + e2.message());
      read_reply(p, rail);
    });
  });
}

void tcp_fabric::handshake_done(int p, int rail) {
  auto& o = out(p, rail);
  const auto word = wire::get_u32(o.ack.data() + 4), status = status_of(word);
  if (status != hs_ok && status != hs_use_mine)
    return fail_out(p, rail, make_error_code(errc::protocol_violation), rank_name(p) + " at " + o.where + " refused the connection: " + status_text(status));
  if (key_) {
    // The acceptor proves it knows the secret too: nobody else can pose as rank p.
    std::memcpy(o.proof.data(), o.ack.data() + 8, o.proof.size());
    const std::array<std::span<const std::byte>, 2> parts{std::span(o.hs), std::span(o.acceptor_nonce)};
    if (o.acceptor_nonce == auth::nonce{} || !key_->check(o.proof, acceptor_label, parts))
      return fail_out(p, rail, make_error_code(errc::protocol_violation),
                      "what listens at " + o.where + " for " + rank_name(p) + " could not prove it knows the job secret");
    if (cfg_.encrypt && status == hs_ok) {
      o.chan = std::make_unique<auth::channel>(session_key(o.hs, o.acceptor_nonce));
      o.back = std::make_unique<auth::channel>(session_key(o.hs, o.acceptor_nonce, receipts_label));
    }
  }
  std::error_code ignored;
  if (status == hs_use_mine) {
    // Its connection to this rank carries this rank's messages too: sent once it is in.
    o.sock.close(ignored);
    o.st = out_conn::state::awaiting;
    ++counts_.merged;
    if (adopt(p, rail)) write_next(p, rail);
    return;
  }
  o.sock.non_blocking(ignored);
  limit_unsent(o.sock);
  o.by_reference = o.offered && (word & hs_reads_you) != 0;
  o.st = out_conn::state::ready;
  ++counts_.outgoing;
  if (o.sock.in_memory()) ++counts_.in_memory;
  if (o.by_reference) read_receipts(p, rail);
  else if ((word & hs_writes_back) != 0) read_back(p, rail);
  write_next(p, rail);
}

}  // namespace impl

using impl::tcp_fabric;

std::shared_ptr<optcast::fabric> connect(asio::io_context& io, const config& cfg) {
  auto f = std::make_shared<tcp_fabric>(io, cfg);
  f->bootstrap();
  return f;
}

std::shared_ptr<optcast::fabric> connect(const config& cfg) {
  return detail::with_own_loop([&](asio::io_context& io) {
    auto f = std::make_shared<tcp_fabric>(io, cfg);
    f->own_loop();
    f->bootstrap();
    return f;
  });
}

std::string listen_address(const optcast::fabric& f) {
  auto* t = dynamic_cast<const tcp_fabric*>(&f);
  return t ? t->listen_address() : std::string();
}

connection_counts connections(const optcast::fabric& f) {
  auto* t = dynamic_cast<const tcp_fabric*>(&f);
  return t ? t->counts() : connection_counts{};
}

job_config::held_limits unexpected_limits(const optcast::fabric& f) {
  auto* t = dynamic_cast<const tcp_fabric*>(&f);
  return t ? t->held_limits() : job_config::held_limits{};
}

}  // namespace optcast::tcp
