// The libfabric fabric's look for messages of mismatched calls (ofi_fabric.hpp, struct
// probe): a message that matches no receive waits in the provider's unexpected queue,
// where only a peek (FI_PEEK) finds it and its signature's hash tells the calls apart.
#include "ofi_fabric.hpp"

namespace optcast::ofi::impl {

// How long receives may make no progress before the rank looks for mismatched messages.
constexpr auto probe_interval = std::chrono::milliseconds(50);

void ofi_fabric::arm_probes() {
  if (!peek_works_ || probe_timer_armed_ || failure()) return;
  probe_timer_armed_ = true;
  received_at_tick_ = received_;
  probe_timer_.expires_after(probe_interval);
  probe_timer_.async_wait([this, alive = alive_](std::error_code ec) {
    if (!*alive) return;
    probe_timer_armed_ = false;
    if (!ec) probe_tick();
  });
}

void ofi_fabric::probe_tick() {
  if (!ep_ || failure()) return;
  std::vector<std::uint32_t> seqs;
  for (const operation* op = posted_.front(); op; op = op->transport.next)
    if (op->kind == op_kind::recv && !internal(*op) && std::find(seqs.begin(), seqs.end(), op->tg.seq) == seqs.end())
      seqs.push_back(op->tg.seq);
  if (seqs.empty()) return;  // nothing waited for: armed again by the next receive
  const bool stalled = received_ == received_at_tick_;
  if (stalled && probes_.empty() && !probing_)
    for (const auto seq : seqs)
      for (int r = 0; r < cfg_.size; ++r)
        if (r != cfg_.rank && peer_alive(r)) probes_.push_back({seq, r, {}});
  next_probe();
  arm_probes();
}

std::error_code ofi_fabric::leftover(std::uint32_t seq) {
  // Answered later: a mismatch found then fails the fabric, and every rank is told.
  if (peek_works_ && ep_ && !failure()) {
    probes_.push_back({seq, -1, signature_of(seq)});
    next_probe();
  }
  return {};
}

void ofi_fabric::next_probe() {
  if (probing_ || probes_.empty() || !peek_works_ || !ep_ || failure()) return;
  const probe& p = probes_.front();
  fi_msg_tagged msg{};
  msg.addr = p.src < 0 ? FI_ADDR_UNSPEC : addrs_[static_cast<std::size_t>(p.src)];
  msg.tag = tag{p.seq, 0}.packed();
  msg.ignore = 0xffffffffull;  // any step of that collective
  msg.context = &probe_ctx_;
  const ssize_t ret = fi_trecvmsg(ep_.get(), &msg, FI_PEEK);
  if (ret == -FI_EAGAIN) return progress_soon();
  if (ret) {
    log(log_level::debug, "ofi: FI_PEEK refused (" + fi_error(static_cast<int>(ret)) + "); mismatched calls wait for their deadline");
    peek_works_ = false;
    probes_.clear();
    return;
  }
  probing_ = std::move(probes_.front());
  probes_.pop_front();
  if (!wait_.is_open()) progress_soon();
}

bool ofi_fabric::probe_answer(bool found, std::uint64_t tg, std::uint64_t data) {
  if (!probing_) return true;
  const probe p = std::move(*probing_);
  probing_.reset();
  // rxm (1.17) gives a peeked message's CQ data without the FI_REMOTE_CQ_DATA flag (so
  // the flags are not consulted), and for some 0: a signature's hash is never 0, so 0
  // tells nothing.
  // A revoked communicator's messages are its sinks' to drop, whatever their calls were.
  if (found && data != 0 && !revoked(seq_layout::id_of(p.seq))) {
    const std::uint32_t seq = tag::unpack(tg).seq;
    const std::uint64_t theirs = data;
    if (p.src < 0 && theirs != p.sig.hash()) {
      // Every message of a collective is received within it: this one's call differs.
      abort(make_error_code(errc::call_mismatch),
            called_differently(seq, "a message of it (signature " + std::to_string(theirs) + ") was never received by rank " +
                                        std::to_string(cfg_.rank) + "'s " + p.sig.describe()));
      return false;
    }
    if (p.src >= 0 && !signature_hash_matches(seq, p.src, theirs)) {
      abort(make_error_code(errc::call_mismatch), last_error());
      return false;
    }
  }
  next_probe();
  return true;
}

}  // namespace optcast::ofi::impl
