// The TCP fabric's frames as they come off a connection: headers taken from what the last
// read brought while it holds one, else the socket read for everything that has come; a
// payload from the same buffer and the rest of a large one straight into place; then the
// frame's meaning (a message for a posted receive or to hold, a reference, an abort, a
// goodbye).
#include "tcp_fabric.hpp"

#include "optcast/trace.hpp"

namespace optcast::tcp::impl {

void tcp_fabric::read_frame(const std::shared_ptr<in_conn>& c) {
  // Each frame's end calls this again; within the loop that asks for one more turn instead
  // of nesting (a burst of small frames would otherwise go as deep as it is long).
  if (c->in_loop) {
    c->more = true;
    return;
  }
  c->in_loop = true;
  auto alive = alive_;
  for (;;) {
    c->more = false;
    if (c->buffered() < frame_bytes) {
      if (!c->sock.in_memory()) {
        fill(c);
        break;
      }
      if (read_ring(c)) continue;
      if (!*alive) return;
      break;
    }
    c->take(c->hdr.data(), frame_bytes);
    on_frame(c);
    if (!*alive) return;
    if (!c->more || !c->open) break;
  }
  c->in_loop = false;
}

bool tcp_fabric::read_ring(const std::shared_ptr<in_conn>& c) {
  c->compact();
  std::error_code ec;
  const std::size_t n = c->sock.read_some(asio::buffer(c->rx.get() + c->rx_end, in_conn::rx_capacity - c->rx_end), ec);
  if (!ec) {
    c->rx_end += n;
    return true;
  }
  if (ec == asio::error::would_block) {
    // Nothing yet: the stream calls back when something comes (once set, for good).
    if (!c->owner) {
      c->owner = this;
      c->owner_alive = alive_;
      c->sock.keep_reading(&tcp_fabric::ring_ready, c.get());
    }
    return false;
  }
  reading_ended(c, ec);
  return false;
}

void tcp_fabric::reading_ended(const std::shared_ptr<in_conn>& c, std::error_code ec) {
  in_ended(c, ec != asio::error::eof ? ec.message() : c->buffered() ? "it closed in the middle of a frame header" : "");
}

void tcp_fabric::ring_ready(void* ctx) {
  auto* c = static_cast<in_conn*>(ctx);
  // Between the partial reads of a body the stream has no read waiting, and may call:
  // the bytes are the body's, its read's end goes on from there.
  if (!*c->owner_alive || !c->open || c->reading_body) return;
  c->owner->read_frame(c->shared_from_this());
}

void tcp_fabric::fill(const std::shared_ptr<in_conn>& c) {
  c->compact();
  auto got = [this, c](std::error_code ec, std::size_t n) {
    if (!c->open) return;
    if (ec == asio::error::would_block || ec == asio::error::try_again) return fill(c);
    if (ec) return reading_ended(c, ec);
    c->rx_end += n;
    c->drained = c->rx_end < in_conn::rx_capacity;
    read_frame(c);
  };
  const auto room = asio::buffer(c->rx.get() + c->rx_end, in_conn::rx_capacity - c->rx_end);
  if (c->drained && !borrowed_loop()) {
    // The last read emptied the socket: a read now would only say EAGAIN (Asio reads
    // before it waits), so wait for it to be readable, then read what came.
    c->sock.async_wait(tcp::socket::wait_read, c->bound([this, alive = alive_, c, room, got](std::error_code ec) {
      if (!*alive || !c->open) return;
      if (ec) return in_ended(c, ec.message());
      std::error_code rec;
      const std::size_t n = c->sock.read_some(room, rec);
      got(rec, n);
    }));
    return;
  }
  c->sock.async_read_some(room, c->bound([alive = alive_, got](std::error_code ec, std::size_t n) {
    if (*alive) got(ec, n);
  }));
}

void tcp_fabric::on_frame(const std::shared_ptr<in_conn>& c) {
  auto alive = alive_;
  const frame_header f = decode_frame(std::span<const std::byte, frame_bytes>(c->hdr.data(), frame_bytes));
  c->heard = true;
  if (f.kind == frame_header::abort) {
    c->abort_code = f.abort_code;
    return read_abort(c, f.len);
  }
  if (f.kind == frame_header::malformed || f.kind == frame_header::done) return protocol_error(c, "malformed frame header");
  if (c->said_bye) return protocol_error(c, "a frame after its goodbye");
  if (f.kind == frame_header::bye) return read_bye(c, f.tg.seq, f.sig, f.tg.step);
  if (f.kind == frame_header::ref) return read_ref(c, f.tg, f.sig, f.len);
  const std::uint64_t len = f.len;
  const tag tg = f.tg;
  const call_signature& sig = f.sig;
  if (operation* op = take_posted(c->peer, tg)) {
    if (auto bad = arrival_error(*op, sig, len)) {
      op->transport.state = st_none;
      op->complete(bad);
      if (!*alive) return;
      return read_payload(c, tg, sig, len);  // keep the stream in step: read it aside
    }
    op->transport.state = st_reading;
    c->target = op;
    return read_into(c, len);
  }
  read_payload(c, tg, sig, len);
}

template <class Then>
void tcp_fabric::read_body(const std::shared_ptr<in_conn>& c, std::byte* data, std::uint64_t len, Then then) {
  if (len == 0 && !c->chan) return then();
  // What the last read brought first; the rest (a large payload's) straight into place.
  const std::size_t got = c->take(data, len);
  const std::size_t tag_got = got == len && c->chan ? c->take(c->mac.data(), c->mac.size()) : 0;
  auto opened = [this, c, data, len] {
    return !c->chan || c->chan->open(std::span(c->hdr.data(), frame_bytes), data, len, c->mac.data());
  };
  if (got == len && (!c->chan || tag_got == c->mac.size())) {
    if (!opened()) return protocol_error(c, "a frame that fails authentication (forged, or altered on the way)");
    return then();
  }
  c->drained = false;  // whatever follows the body is read speculatively
  c->reading_body = true;
  const std::array<asio::mutable_buffer, 2> bufs{asio::buffer(data + got, len - got),
                                                 c->chan ? asio::buffer(c->mac.data() + tag_got, c->mac.size() - tag_got) : asio::mutable_buffer()};
  asio::async_read(c->sock, bufs, c->bound([this, alive = alive_, c, opened, then = std::move(then)](std::error_code ec, std::size_t) mutable {
    if (!*alive || !c->open) return;
    c->reading_body = false;
    if (ec) return in_ended(c, ec.message());
    if (!opened()) return protocol_error(c, "a frame that fails authentication (forged, or altered on the way)");
    then();
  }));
}

// by_reference.cpp's, here for read_body.
void tcp_fabric::read_ref(const std::shared_ptr<in_conn>& c, tag tg, const call_signature& sig, std::uint64_t len) {
  if (!c->readable) return protocol_error(c, "a message by reference on a connection that cannot carry one");
  read_body(c, c->ref.data(), ref_bytes, [this, c, tg, sig, len] { take_ref(c, tg, sig, len); });
}

void tcp_fabric::read_into(const std::shared_ptr<in_conn>& c, std::uint64_t len) {
  read_body(c, c->target->data, len, [this, c] { finish_into(c); });
}

void tcp_fabric::finish_into(const std::shared_ptr<in_conn>& c) {
  auto alive = alive_;
  if (operation* op = std::exchange(c->target, nullptr)) {
    op->transport.state = st_none;
    op->complete(std::exchange(c->cancelled, {}));
    if (!*alive) return;
  }
  if (c->open) read_frame(c);
}

void tcp_fabric::read_payload(const std::shared_ptr<in_conn>& c, tag tg, const call_signature& sig, std::uint64_t len) {
  auto b = hold_unexpected(c, tg, len);
  if (!b) return;
  c->pending_tag = tg;
  c->pending_sig = sig;
  c->payload = std::move(*b);
  read_body(c, c->payload.data(), len, [this, c] { stash(c); });
}

void tcp_fabric::stash(const std::shared_ptr<in_conn>& c) {
  auto& pe = peer(c->peer);
  const std::uint32_t seq = c->pending_tag.seq;
  // A control message is the survival layer's; a message of a revoked communicator is
  // nobody's (its receives have failed).
  if (seq == seq_layout::control_seq || revoked(seq_layout::id_of(seq))) {
    auto payload = std::move(c->payload);
    release_unexpected(pe, payload.size());
    auto alive = alive_;
    if (seq == seq_layout::control_seq) control_arrived(c->peer, std::span<const std::byte>(payload.data(), payload.size()));
    if (!*alive) return;
    give_back(std::move(payload));
    if (c->open) read_frame(c);
    return;
  }
  // A receive may have been posted while the payload was arriving.
  if (operation* op = take_posted(c->peer, c->pending_tag)) {
    const std::error_code ec = arrival_error(*op, c->pending_sig, c->payload.size());
    if (!ec && op->size) {
      std::memcpy(op->data, c->payload.data(), op->size);
    }
    release_unexpected(pe, c->payload.size());
    give_back(std::move(c->payload));
    op->transport.state = st_none;
    auto alive = alive_;
    op->complete(ec);
    if (!*alive) return;
  } else {
    if (!unexpected_consistent(c->peer, c->pending_tag.seq, c->pending_sig)) {
      release_unexpected(pe, c->payload.size());
      return abort(make_error_code(errc::call_mismatch), last_error());
    }
    pe.unexpected.hold(c->pending_tag, {c->pending_sig, std::move(c->payload), ++arrivals_, trace() ? trace_clock(*this) : -1}, spares_);
  }
  if (c->open) read_frame(c);
}

void tcp_fabric::read_abort(const std::shared_ptr<in_conn>& c, std::uint64_t len) {
  c->payload.resize(len);
  read_body(c, c->payload.data(), len, [this, c] {
    const std::string_view text(reinterpret_cast<const char*>(c->payload.data()), c->payload.size());
    lose_peer(c->peer, told_error(c->abort_code), abort_reason(text, rank_name(c->peer) + " failed"));
  });
}

void tcp_fabric::read_bye(const std::shared_ptr<in_conn>& c, std::uint32_t seq, const call_signature& sig, std::uint32_t connections) {
  read_body(c, nullptr, 0, [this, c, seq, sig, connections] {
    const int p = c->peer;
    auto& pe = peer(p);
    c->said_bye = true;
    // Its frames on the other rails may still be on their way: it has left once every
    // connection it said goodbye on has said so here.
    if (++pe.byes >= static_cast<int>(std::max<std::uint32_t>(connections, 1))) {
      pe.left.emplace(seq, sig);
      log(log_level::debug, rank_name(cfg_.rank) + ": " + rank_name(p) + " said goodbye");
      // Nothing more comes from it: a receive waiting on it never finishes.
      auto alive = alive_;
      while (operation* op = pe.posted.pop_front()) {
        op->transport.state = st_none;
        op->complete(peer_left(*op, seq, sig));
        if (!*alive) return;
      }
    }
    if (c->open) read_frame(c);  // for the end of the stream, which is now no loss
  });
}

}  // namespace optcast::tcp::impl
