// The TCP fabric's receiving half: accepting connections, checking their handshake
// (the job secret, job id, rank), matching arrivals with posted receives or holding them
// until one is posted, and what a peer's failure or a protocol error does to the receives
// waiting on it. Reading the frames themselves: frames.cpp.
#include "tcp_fabric.hpp"

#include "optcast/trace.hpp"

namespace optcast::tcp::impl {

bool tcp_fabric::start_recv(operation& op, peer_state& pe) {
  if (held_message* m = pe.unexpected.find(op.tg)) {
    trace_unexpected(*this, op, m->arrived);
    const std::error_code ec = arrival_error(op, m->sig, m->data.size());
    if (!ec && op.size) {
      std::memcpy(op.data, m->data.data(), op.size);
    }
    held_message taken = pe.unexpected.take(op.tg, spares_);
    release_unexpected(pe, taken.data.size());
    give_back(std::move(taken.data));
    return op.finish_now(ec);
  }
  if (pe.left) return op.finish_now(peer_left(op, pe.left->first, pe.left->second));
  if (pe.in_closed && !loss_pending_)
    return fail_now(op, make_error_code(errc::peer_lost), rank_name(op.peer) + " closed its connection");
  op.transport.state = st_posted;
  stamp_posted(op);
  pe.posted.push_back(op);
  return false;
}

bool tcp_fabric::start_recv_any(operation& op) {
  int from = -1;
  std::uint64_t first = 0;
  for (int r = 0; r < cfg_.size; ++r)
    if (const held_message* m = peer(r).unexpected.find(op.tg))  // a peer's own match in order: its first is the one
      if (from < 0 || m->arrival < first) from = r, first = m->arrival;
  if (from >= 0) {
    op.peer = from;
    return start_recv(op, peer(from));
  }
  op.transport.state = st_posted_any;
  stamp_posted(op);
  any_posted_.push_back(op);
  return false;
}

operation* tcp_fabric::take_posted(int p, tag tg) {
  auto& pe = peer(p);
  operation* mine = pe.posted.find([&](const operation& o) { return o.tg == tg; });
  operation* any = any_posted_.empty() ? nullptr : any_posted_.find([&](const operation& o) { return o.tg == tg; });
  // The receive posted first takes it, as MPI matches a wildcard receive.
  if (mine && (!any || posted_stamp(*mine) < posted_stamp(*any))) {
    pe.posted.remove(*mine);
    return mine;
  }
  if (any) {
    any_posted_.remove(*any);
    any->peer = p;
  }
  return any;
}

void tcp_fabric::fail_posted_any(std::error_code ec, const std::string& why) {
  auto alive = alive_;
  while (operation* op = any_posted_.pop_front()) {
    op->transport.state = st_none;
    note_error(why + ": " + describe_op(*op));
    op->complete(ec);
    if (!*alive) return;
  }
}

void tcp_fabric::fail_posted(int p, std::error_code ec, const std::string& why) {
  auto alive = alive_;
  auto& pe = peer(p);
  while (operation* op = pe.posted.pop_front()) {
    op->transport.state = st_none;
    note_error(why + ": " + describe_op(*op));
    op->complete(ec);
    if (!*alive) return;
  }
}

void tcp_fabric::accept_next(tcp::acceptor& a) {
  a.async_accept([this, alive = alive_, &a](std::error_code ec, tcp::socket s) {
    if (!*alive || ec == asio::error::operation_aborted || !a.is_open()) return;
    if (!ec) {
      accept_failing_ = false;
      admit_handshake(std::make_shared<in_conn>(link(std::move(s))));
      return accept_next(a);
    }
    // Out of descriptors (or another passing failure): accepting again at once would fail
    // again at once, a busy loop for as long as it lasts. Try again shortly.
    if (!accept_failing_)
      log(log_level::warn, rank_name(cfg_.rank) + " cannot accept connections (" + ec.message() + "); trying again every 50 ms");
    accept_failing_ = true;
    auto retry = std::make_shared<asio::steady_timer>(ex_, std::chrono::milliseconds(50));
    retry->async_wait([this, alive = alive_, &a, retry](std::error_code e) {
      if (*alive && !e && a.is_open()) accept_next(a);
    });
  });
}

void tcp_fabric::admit_handshake(const std::shared_ptr<in_conn>& c) {
  if (handshaking_.size() >= most_handshakes()) {
    const auto oldest = handshaking_.front();
    const std::uint64_t dropped = ++handshakes_dropped_;
    if ((dropped & (dropped - 1)) == 0)
      log(log_level::warn, rank_name(cfg_.rank) + " has " + std::to_string(handshaking_.size()) +
                               " handshakes pending, its limit: dropped the oldest, from " + endpoint_text(oldest->sock) + " (" +
                               std::to_string(dropped) + " dropped so far)");
    drop_handshake(oldest);
  }
  handshaking_.push_back(c);
  read_hello(c);
}

void tcp_fabric::drop_handshake(const std::shared_ptr<in_conn>& c) {
  end_handshake(c);
  c->timer.cancel();
  std::error_code ignored;
  c->sock.close(ignored);
}

void tcp_fabric::refuse(const std::shared_ptr<in_conn>& c, std::uint32_t status, const std::string& why) {
  log(log_level::warn, rank_name(cfg_.rank) + " refused a connection from " + endpoint_text(c->sock) + ": " + why);
  end_handshake(c);
  std::error_code ignored;
  c->timer.cancel();
  if (status == hs_ok) {  // not even an optcast peer: no answer
    c->sock.close(ignored);
    return;
  }
  wire::put_u32(c->ack.data(), hs_magic);
  wire::put_u32(c->ack.data() + 4, status);
  std::memset(c->ack.data() + 8, 0, auth::proof_bytes);
  asio::async_write(c->sock, asio::buffer(c->ack), [c](std::error_code, std::size_t) {
    std::error_code e;
    c->sock.close(e);
  });
}

void tcp_fabric::read_hello(const std::shared_ptr<in_conn>& c) {
  // One deadline for the whole handshake, challenge and proof included.
  c->timer.expires_after(handshake_timeout);
  c->timer.async_wait([this, alive = alive_, c](std::error_code ec) {
    if (!*alive || ec) return;
    log(log_level::warn, rank_name(cfg_.rank) + " dropped a connection from " + endpoint_text(c->sock) + " that did not finish its handshake within 10 s");
    end_handshake(c);
    std::error_code ignored;
    c->sock.close(ignored);
  });
  asio::async_read(c->sock, asio::buffer(c->hdr.data(), hs_bytes), [this, alive = alive_, c](std::error_code ec, std::size_t) {
    if (!*alive) return;
    if (ec) {
      if (ec != asio::error::operation_aborted)
        log(log_level::info, rank_name(cfg_.rank) + ": a connection from " + endpoint_text(c->sock) + " closed during the handshake (" + ec.message() + ")");
      return drop_handshake(c);
    }
    if (auto no = judge_opening(std::span<const std::byte, hs_bytes>(c->hdr.data(), hs_bytes), view())) return refuse(c, no->status, no->why);
    if (key_) return challenge(c);
    admit(c);
  });
}

void tcp_fabric::challenge(const std::shared_ptr<in_conn>& c) {
  c->nonce = auth::fresh_nonce();
  wire::put_u32(c->ack.data(), hs_magic);
  wire::put_u32(c->ack.data() + 4, hs_challenge);
  std::memcpy(c->ack.data() + 8, c->nonce.data(), c->nonce.size());
  asio::async_write(c->sock, asio::buffer(c->ack), [this, alive = alive_, c](std::error_code ec, std::size_t) {
    if (!*alive) return;
    if (ec) return drop_handshake(c);
    asio::async_read(c->sock, asio::buffer(c->proof), [this, alive, c](std::error_code ec2, std::size_t) {
      if (!*alive) return;
      if (ec2) {
        if (ec2 != asio::error::operation_aborted)
          log(log_level::info, rank_name(cfg_.rank) + ": a connection from " + endpoint_text(c->sock) + " closed before proving it knows the job secret (" + ec2.message() + ")");
        return drop_handshake(c);
      }
      const std::array<std::span<const std::byte>, 2> parts{std::span(c->hdr.data(), hs_bytes), std::span(c->nonce)};
      if (!key_->check(c->proof, opener_label, parts)) return refuse(c, hs_auth_failed, "it does not know the job secret");
      admit(c);
    });
  });
}

void tcp_fabric::admit(const std::shared_ptr<in_conn>& c) {
  const std::span<const std::byte, hs_bytes> hs(c->hdr.data(), hs_bytes);
  if (auto no = judge_member(hs, view())) return refuse(c, no->status, no->why);
  const auto h = decode_hello(hs);
  const auto r = h.rank;
  auto& pe = peer(static_cast<int>(r));
  if (h.rail >= pe.in.size())
    return refuse(c, hs_bad_rank, rank_name(static_cast<int>(r)) + " opened rail " + std::to_string(h.rail) + ", this rank has " + std::to_string(pe.in.size()));
  if (!peer_alive(static_cast<int>(r)))
    return refuse(c, hs_taken_dead, rank_name(static_cast<int>(r)) + " was taken for dead here");
  if (c->sock.in_memory()) {
    // What the kernel and the rings' introduction said must hold in the handshake too.
    if (static_cast<int>(r) != c->introduced_as)
      return refuse(c, hs_bad_rank, "it set up its rings as " + rank_name(c->introduced_as) + " and says it is " + rank_name(static_cast<int>(r)));
    if (h.pid != 0 && h.pid != static_cast<std::uint32_t>(c->sock.memory()->peer().pid))
      return refuse(c, hs_bad_rank, "it names process " + std::to_string(h.pid) + " for single copy, but is process " +
                                        std::to_string(c->sock.memory()->peer().pid));
  }
  if (keep_mine(c, h)) return;
  auto& slot = pe.in[h.rail];
  // A reader of this rank's own connection to it, on which it has written nothing: it
  // opened this one at the same time, and sends on this one.
  const bool unused_reader = slot && slot->reverse && !slot->heard;
  if (slot && slot->open && !unused_reader)
    return refuse(c, hs_duplicate, rank_name(static_cast<int>(r)) + " is already connected on rail " + std::to_string(h.rail));
  if (unused_reader && slot->open) {
    slot->open = false;
    std::error_code ignored;
    slot->sock.close(ignored);
  }
  end_handshake(c);
  c->timer.cancel();
  c->peer = static_cast<int>(r);
  c->rail = h.rail;
  std::error_code ignored_ec;
  c->pid = h.pid;
  c->readable = h.pid != 0 && single_copy_allowed(c->sock.in_memory()) && probe_reads(h);
  c->duplex = (h.flags & hs_duplex) != 0 && !c->readable;
  // Receipts are written back without waiting, and frames.cpp reads what has come
  // without blocking.
  c->sock.non_blocking(ignored_ec);
  slot = c;
  pe.in_closed = false;
  ++counts_.incoming;
  if (c->sock.in_memory()) ++counts_.in_memory;
  std::error_code ignored;
  if (!c->sock.in_memory()) c->sock.socket().set_option(tcp::no_delay(true), ignored);
  final_reply(c, hs_ok | (c->readable ? hs_reads_you : 0) | (c->duplex ? hs_writes_back : 0));
  if (key_ && cfg_.encrypt) {
    const auto hello_bytes = std::span(c->hdr.data(), hs_bytes);
    c->chan = std::make_unique<auth::channel>(session_key(hello_bytes, c->nonce));
    c->back = std::make_unique<auth::channel>(session_key(hello_bytes, c->nonce, receipts_label));
    if (c->duplex) c->reverse_chan = std::make_unique<auth::channel>(session_key(hello_bytes, c->nonce, reverse_label));
  }
  asio::async_write(c->sock, asio::buffer(c->ack), [c](std::error_code, std::size_t) {});
  // This rank's own messages to it were waiting for this connection (hs_use_mine).
  const int p = static_cast<int>(r);
  auto alive = alive_;
  if (out(p, h.rail).st == out_conn::state::awaiting) {
    if (adopt(p, h.rail)) write_next(p, h.rail);
    else fail_out(p, h.rail, make_error_code(errc::limit_exceeded), "cannot send to " + rank_name(p) + " on its connection (no descriptor for it)");
  }
  if (*alive && c->open) read_frame(c);
}

void tcp_fabric::final_reply(const std::shared_ptr<in_conn>& c, std::uint32_t word) {
  wire::put_u32(c->ack.data(), hs_magic);
  wire::put_u32(c->ack.data() + 4, word);
  std::memset(c->ack.data() + 8, 0, auth::proof_bytes);
  if (!key_) return;
  const std::array<std::span<const std::byte>, 2> parts{std::span(c->hdr.data(), hs_bytes), std::span(c->nonce)};
  const auto mine = key_->prove(acceptor_label, parts);
  std::memcpy(c->ack.data() + 8, mine.data(), mine.size());
}

bool tcp_fabric::keep_mine(const std::shared_ptr<in_conn>& c, const hello& h) {
  const int p = static_cast<int>(h.rank);
  // Only where both ends would be duplex: no single copy offered either way.
  if ((h.flags & hs_duplex) == 0 || h.pid != 0 || offers_single_copy(p, memory_to(p))) return false;
  const auto& mine = out(p, h.rail);
  using st = out_conn::state;
  const bool opening = mine.st == st::resolving || mine.st == st::connecting || mine.st == st::handshake;
  // Up (and so admitted there before it opened this one), or the lower rank's of two
  // opening at once: the higher admits the lower's and is answered so here in turn.
  if (!((mine.st == st::ready && !mine.borrowed) || (opening && cfg_.rank < p))) return false;
  end_handshake(c);
  c->timer.cancel();
  final_reply(c, hs_use_mine);
  asio::async_write(c->sock, asio::buffer(c->ack), [c](std::error_code, std::size_t) {
    std::error_code ignored;
    c->sock.close(ignored);
  });
  return true;
}

std::optional<detail::message_buffer> tcp_fabric::hold_unexpected(const std::shared_ptr<in_conn>& c, tag tg, std::uint64_t len) {
  // The length comes from the wire: checked before anything is allocated for it.
  const std::size_t limit = held_total_.load(std::memory_order_relaxed), peer_limit = held_peer_.load(std::memory_order_relaxed);
  auto refuse_payload = [&](const std::string& why) {
    const std::string text = rank_name(c->peer) + " sent a message of " + std::to_string(len) + " B (collective " + std::to_string(tg.seq) + ", step " + std::to_string(tg.step) + ")" +
                             " with no receive of that size posted: " + why;
    log(log_level::error, rank_name(cfg_.rank) + ": " + text);
    abort(make_error_code(errc::limit_exceeded), text);
    return std::nullopt;
  };
  const std::uint64_t cost = len + held_overhead;
  if (!may_hold(cost, unexpected_bytes_, limit))
    return refuse_payload("with " + std::to_string(unexpected_bytes_) + " B already waiting for receives, more than this rank may hold (" +
                          std::to_string(limit) + " B, OPTCAST_UNEXPECTED_LIMIT)");
  auto& pe = peer(c->peer);
  if (!may_hold(cost, pe.unexpected_bytes, peer_limit))
    return refuse_payload("with " + std::to_string(pe.unexpected_bytes) + " B of its messages already waiting for receives, more than this rank holds from one peer (" +
                          std::to_string(peer_limit) + " B, OPTCAST_UNEXPECTED_PEER_LIMIT)");
  detail::message_buffer b;
  try {
    b = take_buffer(len);
  } catch (const std::exception& e) {  // bad_alloc, length_error: an error, not an exception through the event loop
    return refuse_payload(std::string("no memory to hold it (") + e.what() + ")");
  }
  unexpected_bytes_ += cost;
  pe.unexpected_bytes += cost;
  return b;
}

void tcp_fabric::sign(std::uint32_t seq, const call_signature& s) {
  fabric_base::sign(seq, s);
  for (int r = 0; r < cfg_.size; ++r) {
    bool consistent = true;
    peer(r).unexpected.each_of(seq, [&](tag, const held_message& m) { consistent = consistent && unexpected_consistent(r, seq, m.sig); });
    if (!consistent) return abort(make_error_code(errc::call_mismatch), last_error());
  }
}

std::error_code tcp_fabric::leftover(std::uint32_t seq) {
  const auto mine = signature_of(seq);
  for (int r = 0; r < cfg_.size; ++r) {
    const call_signature* unreceived = nullptr;
    peer(r).unexpected.each_of(seq, [&](tag, const held_message& m) {
      if (!unreceived && !m.sig.empty()) unreceived = &m.sig;
    });
    if (unreceived && !failure()) {
      note_unreceived(r, seq, *unreceived, mine);
      abort(make_error_code(errc::call_mismatch), last_error());
      return make_error_code(errc::call_mismatch);
    }
  }
  return {};
}

void tcp_fabric::protocol_error(const std::shared_ptr<in_conn>& c, const std::string& what) {
  const std::string why = what + " from " + rank_name(c->peer);
  log(log_level::error, rank_name(cfg_.rank) + ": " + why);
  abort(make_error_code(errc::protocol_violation), why);
}

void tcp_fabric::in_ended(const std::shared_ptr<in_conn>& c, const std::string& error) {
  const int p = c->peer;
  const std::string why = error.empty() ? rank_name(p) + " closed its connection"
                                        : "the connection from " + rank_name(p) + " failed: " + error;
  auto& pe = peer(p);
  const bool current = pe.in[static_cast<std::size_t>(c->rail)] == c;
  const auto quietly = [&] {
    c->open = false;
    std::error_code ignored;
    c->sock.close(ignored);
  };
  // This rank's own connection, on which it wrote nothing back: its end is the sending
  // half's to find (a write that fails), unless a receive waits on it with no other way in.
  if (c->reverse && !c->heard && !failure()) {
    const bool other = std::any_of(pe.in.begin(), pe.in.end(), [&](const auto& o) { return o && o != c && o->open; });
    if (!current || other || pe.posted.empty()) return quietly();
  }
  // After its goodbye nothing more was to come: the end, or a reset (this rank's own last
  // frames reached a socket it had closed), is no loss.
  if (c->said_bye && current) {
    if (pe.left) pe.in_closed = true;
    return quietly();
  }
  if (failure() || !current) return drop_in(p, make_error_code(errc::peer_lost), why);
  // Its receives wait for the cause (lost_connection); the socket is closed, so nothing
  // more is read into the one that was being filled.
  pe.in_closed = true;
  if (!pe.broke) pe.broke = ++breaks_;
  quietly();
  const operation* waiting = c->target ? c->target : pe.posted.front();
  lost_connection(why, waiting ? waiting->tg.seq : 0, waiting != nullptr);
}

void tcp_fabric::drop_in(int p, std::error_code ec, const std::string& why) {
  auto& pe = peer(p);
  pe.in_closed = true;
  auto alive = alive_;
  for (std::size_t i = 0; i < pe.in.size(); ++i)
    if (auto c = pe.in[i]) {
      c->open = false;
      shut(c->sock);
      c->cancelled = {};
      if (operation* op = std::exchange(c->target, nullptr)) {
        op->transport.state = st_none;
        note_error(why + ": " + describe_op(*op));
        op->complete(ec);
        if (!*alive) return;
      }
    }
  fail_lent(p, ec, why);  // their receipts would come on these connections
  if (*alive) fail_posted(p, ec, why);
}

std::string tcp_fabric::waiting_for(std::uint32_t seq) const {
  std::string waiting;
  for (operation* op = any_posted_.front(); op; op = op->transport.next)
    if (op->tg.seq == seq) waiting += "; " + describe_op(*op);
  for (const auto& pe : peers_) {
    for (const auto* q : {&pe.posted, &pe.lent})
      for (operation* op = q->front(); op; op = op->transport.next)
        if (op->tg.seq == seq) waiting += "; " + describe_op(*op);
    for (const auto& out : pe.out) {
      for (operation* op = out.queue.front(); op; op = op->transport.next)
        if (op->tg.seq == seq) waiting += "; " + describe_op(*op);
      if (out.writing && out.writing->tg.seq == seq) waiting += "; " + describe_op(*out.writing);
    }
    for (const auto& c : pe.in)
      if (c && c->target && c->target->tg.seq == seq) waiting += "; " + describe_op(*c->target);
  }
  return waiting;
}

}  // namespace optcast::tcp::impl
