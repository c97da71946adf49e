// The libfabric fabric's own traffic (ofi_fabric.hpp): the credits that bound what a
// sender leaves unreceived, the standing receives for control messages, and the sinks
// that take a revoked communicator's messages.
#include "ofi_fabric.hpp"

namespace optcast::ofi::impl {

bool ofi_fabric::count_send(const operation& op, std::string& why) {
  flow& f = flow_[static_cast<std::size_t>(op.peer)];
  const std::uint64_t open = f.sent - f.confirmed, limit = cfg_.unexpected_peer_limit;
  // A message larger than the limit is let through alone: the receiver holds at most it.
  if (open > 0 && (op.size > limit || open > limit - op.size)) {
    why = rank_name(op.peer) + " has confirmed receiving " + std::to_string(f.confirmed) + " of the " + std::to_string(f.sent) + " B " +
          rank_name(cfg_.rank) + " sent it; " + std::to_string(op.size) + " B more (" + describe_op(op) +
          ") would leave more unreceived than a rank holds from one peer (" + std::to_string(limit) + " B, OPTCAST_UNEXPECTED_PEER_LIMIT)";
    return false;
  }
  f.sent += op.size;
  await_confirmation(op.peer);
  return true;
}

void ofi_fabric::await_confirmation(int peer) {
  flow& f = flow_[static_cast<std::size_t>(peer)];
  if (f.awaiting || f.sent - f.confirmed < window()) return;
  f.awaiting = true;
  post_internal(op_kind::recv, peer, 0);
}

void ofi_fabric::count_received(int peer, std::size_t bytes) {
  flow& f = flow_[static_cast<std::size_t>(peer)];
  f.received += bytes;
  if (f.received / window() == f.told / window()) return;
  f.told = f.received;
  post_internal(op_kind::send, peer, f.received);
}

ofi_fabric::internal_op& ofi_fabric::add_internal(internal_op::role_t role, op_kind kind, int peer, tag t, std::byte* data,
                                                  std::size_t size) {
  internal_op& io = internal_ops_.emplace_back();
  io.at = std::prev(internal_ops_.end());
  io.fabric = this;
  io.role = role;
  io.op = operation(*this, kind, peer, t, data, size);
  io.op.on_complete = &ofi_fabric::internal_done;
  io.op.context = &io;
  return io;
}

void ofi_fabric::post_internal(op_kind kind, int peer, std::uint64_t value) {
  internal_op& io = add_internal(internal_op::credit, kind, peer, tag{credit_seq, 0}, nullptr, sizeof(std::uint64_t));
  io.value = value;
  io.op.data = reinterpret_cast<std::byte*>(&io.value);
  if (auto ec = submit(io.op)) {  // the fabric failed: nothing to confirm any more
    io.op.ec = ec;
    internal_done(io.op);
  }
}

void ofi_fabric::post_control_receive(int peer, std::vector<std::byte> buf) {
  buf.resize(max_control_bytes);
  internal_op& io = add_internal(internal_op::control, op_kind::recv, peer, tag{seq_layout::control_seq, 0}, nullptr, buf.size());
  io.buf = std::move(buf);
  io.op.data = io.buf.data();
  if (auto ec = submit(io.op)) {
    io.op.ec = ec;
    internal_done(io.op);
  }
}

void ofi_fabric::post_sink(std::uint32_t id, int peer) {
  // A sink takes its message whole: an empty one (tried first) left rxm's rendezvous
  // senders waiting for their deadlines. So every sink shares one buffer (what lands
  // there is dropped) as large as this rank's largest receive yet, the size of a revoked
  // call's messages, and 1 MiB at least; one grown later takes a new buffer, the old ones
  // kept for the sinks still posted on them.
  const std::size_t want = std::max<std::size_t>(largest_recv_, std::size_t{1} << 20);
  if (want > discard_size_ || discard_.empty()) {
    discard_.push_back(std::make_unique<std::byte[]>(want));
    discard_size_ = want;
  }
  internal_op& io = add_internal(internal_op::sink, op_kind::recv, peer, tag{seq_layout::collective(id, 0), 0}, discard_.back().get(),
                                 discard_size_);
  io.comm = id;
  ++sinks_;
  sink_poll_ = std::chrono::milliseconds(1);
  if (auto ec = submit(io.op)) {
    io.op.ec = ec;
    internal_done(io.op);
  }
}

void ofi_fabric::internal_done(operation& op) noexcept {
  internal_op& io = internal_of(op);
  ofi_fabric& self = *io.fabric;
  if (io.role == internal_op::control) return self.control_received(op);
  if (io.role == internal_op::sink) return self.sink_received(op);
  const int peer = op.peer;
  const bool confirmation = op.kind == op_kind::recv && !op.ec;
  if (op.kind == op_kind::recv) {
    flow& f = self.flow_[static_cast<std::size_t>(peer)];
    f.awaiting = false;
    if (confirmation) f.confirmed = std::min(f.sent, std::max(f.confirmed, io.value));
  }
  self.erase_internal(io);  // op is gone from here on
  if (confirmation) self.await_confirmation(peer);
}

void ofi_fabric::erase_internal(internal_op& io) noexcept {
  internal_ops_.erase(io.at);
}

void ofi_fabric::control_received(operation& op) noexcept {
  internal_op& io = internal_of(op);
  const int peer = op.peer;
  const std::error_code ec = op.ec;
  std::vector<std::byte> buf = std::move(io.buf);
  const std::size_t got = io.got;
  erase_internal(io);
  // Ended with an error: the peer is dead or the fabric failed, and nothing more comes.
  if (ec || failure() || closing_ || !peer_alive(peer)) return;
  auto alive = alive_;
  control_arrived(peer, std::span<const std::byte>(buf.data(), std::min(got, buf.size())));
  if (*alive && !failure() && !closing_ && peer_alive(peer)) post_control_receive(peer, std::move(buf));
}

void ofi_fabric::sink_received(operation& op) noexcept {
  internal_op& io = internal_of(op);
  const int peer = op.peer;
  const std::uint32_t id = io.comm;
  const std::error_code ec = op.ec;
  const std::size_t got = io.got;
  erase_internal(io);
  --sinks_;
  if (ec || failure() || closing_ || !peer_alive(peer)) return;
  count_received(peer, got);  // the sender counted it: it is confirmed as received
  if (revoked(id)) post_sink(id, peer);
}

}  // namespace optcast::ofi::impl
