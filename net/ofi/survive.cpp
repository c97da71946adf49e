// The libfabric fabric when a peer fails: what waits on the peer, and every operation of
// a communicator it was in, is taken back from the provider before it ends (the memory
// stays the provider's until it gives the operation back), and the survival layer
// (fabric_base) revokes those communicators; the endpoint stays, so the survivors go on
// over it (optcast/survive.hpp), and a replacement takes a dead peer's place (grow).
#include "ofi_fabric.hpp"

namespace optcast::ofi::impl {

void ofi_fabric::give_up(detail::op_queue& q, bool (*which)(const operation&, std::uint32_t), std::uint32_t arg, std::error_code ec,
                         detail::op_queue& now) noexcept {
  if (&q == &posted_ || &q == &standing_) {
    // Each ends when the provider gives it back: a receive cancelled, a send taken by its
    // receiver's sink (post_sink) or failed with its dead peer's connection. Until then it
    // stays where it is.
    for (operation* op = q.front(); op; op = op->transport.next)
      if (op->transport.state == st_posted && which(*op, arg)) {
        op->transport.state = st_cancelling;
        op->ec = ec;
        fi_cancel(&ep_->fid, &ticket_of(*op)->ctx);
      }
    progress_soon();  // a polling provider gives them back only when asked
    return;
  }
  q.drain_if([&](const operation& op) { return which(op, arg); }, [&](operation& op) {
    op.transport.state = st_failing;
    now.push_back(op);
  });
}

void ofi_fabric::complete_all(detail::op_queue& q, std::error_code ec, const std::string& why) noexcept {
  auto alive = alive_;
  while (operation* op = q.pop_front()) {
    op->transport.state = st_none;
    if (!internal(*op)) note_error(why + ": " + describe_op(*op));
    op->complete(ec);
    if (!*alive) return;
  }
}

void ofi_fabric::fail_communicator(std::uint32_t id, std::error_code ec, const std::string& why) noexcept {
  if (!ep_) return;
  constexpr auto of_it = [](const operation& op, std::uint32_t comm) {
    return !internal(op) && op.tg.seq != seq_layout::control_seq && seq_layout::id_of(op.tg.seq) == comm;
  };
  detail::op_queue now;
  for (auto* q : {&posted_, &retry_, &lost_}) give_up(*q, of_it, id, ec, now);
  std::erase_if(probes_, [id](const probe& p) { return seq_layout::id_of(p.seq) == id; });
  for (int r = 0; r < cfg_.size; ++r)
    if (r != cfg_.rank && peer_alive(r)) post_sink(id, r);
  complete_all(now, ec, why);
}

void ofi_fabric::retire(std::uint32_t id) noexcept {
  fabric_base::retire(id);  // revoked(id) is false from here on: a sink is not posted again
  if (!ep_) return;
  for (operation* op = standing_.front(); op; op = op->transport.next)
    if (internal_of(*op).role == internal_op::sink && internal_of(*op).comm == id && op->transport.state == st_posted) {
      op->transport.state = st_cancelling;
      op->ec = make_error_code(errc::cancelled);
      fi_cancel(&ep_->fid, &ticket_of(*op)->ctx);
    }
  progress_soon();
}

void ofi_fabric::lose_peer(int r, std::error_code ec, const std::string& why) noexcept {
  // This rank named as the one that failed (a stall's verdict): it is out of the job.
  if (r < 0 || r >= cfg_.size || r == cfg_.rank || !survives_) return told(ec, why);
  if (failure() || closing_ || !peer_alive(r)) return;
  log(log_level::info, rank_name(cfg_.rank) + ": " + rank_name(r) + " is lost: " + why);
  auto alive = alive_;
  // Revoked first: a call that fails on r's loss then finds its communicator revoked, and
  // goes on as a survivor's (finish()) rather than failing this rank.
  peer_died(r, ec, why);
  if (!*alive || failure() || !ep_) return;
  // Everything with r ends now, whatever the provider does with it: a send to r may never
  // be given back (rxm keeps a rendezvous send whose receiver died), nor a receive r
  // began a rendezvous for and then stood still in (a stopped rank, taken for dead). The
  // tickets stay with the provider; r's address goes from the address vector, which closes
  // rxm's connection with it, so nothing of r's comes into this rank's memory any more.
  detail::op_queue now;
  for (auto* q : {&posted_, &standing_})
    for (operation* op = q->front(); op;) {
      operation* next = op->transport.next;
      if (op->peer == r) {
        abandon(*op);
        op->transport.state = st_failing;
        now.push_back(*op);
      }
      op = next;
    }
  constexpr auto with = [](const operation& op, std::uint32_t peer) { return op.peer == static_cast<int>(peer); };
  for (auto* q : {&retry_, &lost_}) give_up(*q, with, static_cast<std::uint32_t>(r), ec, now);
  if (fi_addr_t& addr = addrs_[static_cast<std::size_t>(r)]; addr != FI_ADDR_UNSPEC) {
    if (const int ret = fi_av_remove(av_.get(), &addr, 1, 0))
      log(log_level::debug, "ofi: fi_av_remove for " + rank_name(r) + ": " + fi_error(ret));
    addr = FI_ADDR_UNSPEC;
  }
  std::erase_if(probes_, [r](const probe& p) { return p.src == r; });
  complete_all(now, ec, why);
}

void ofi_fabric::reset_peer(int r) noexcept {
  // A replacement takes r's place. The dead process's operations were given up and its
  // address removed when it was lost (lose_peer, which the store's word of the
  // replacement runs first where it had not): the replacement's endpoint, published
  // before the store said it is ready, goes into the address vector, and r is a peer
  // again once it is there.
  if (r < 0 || r >= cfg_.size || r == cfg_.rank || failure() || closing_ || !ep_ || !survives_) return;
  job_->lookup(addr_key(r), [this, alive = alive_, r](result<std::string> v) {
    if (!*alive || failure() || closing_ || !ep_ || peer_alive(r)) return;
    if (!v) return refuse_replacement(r, "its endpoint is not in the store (" + v.error().message() + ")");
    std::vector<unsigned char> name;
    std::size_t length = 0;
    if (auto why = endpoint_of(r, *v, name, length); !why.empty()) return refuse_replacement(r, why);
    insert_replacement(r, std::move(name), std::chrono::steady_clock::now() + cfg_.bootstrap_timeout);
  });
}

void ofi_fabric::refuse_replacement(int r, const std::string& why) {
  // Not taken in here: the members' growth then fails alike (a replacement not ready on
  // every member), and they go on without it.
  log(log_level::warn, rank_name(cfg_.rank) + ": " + rank_name(r) + "'s replacement is not taken in: " + why);
}

void ofi_fabric::insert_replacement(int r, std::vector<unsigned char> name, std::chrono::steady_clock::time_point until) {
  if (failure() || closing_ || !ep_ || peer_alive(r)) return;
  // Not while a receive of the dead process's is with the provider: it names the address
  // vector entry the replacement's insert may reuse, and would take its messages into
  // memory that is gone. They were cancelled at the loss; the provider gives them back.
  if (abandoned_recvs_[static_cast<std::size_t>(r)] > 0) {
    if (std::chrono::steady_clock::now() >= until)
      return refuse_replacement(r, std::to_string(abandoned_recvs_[static_cast<std::size_t>(r)]) +
                                       " receives from the dead process were not given back by the provider");
    progress_soon();
    auto t = std::make_shared<asio::steady_timer>(ex_, std::chrono::milliseconds(1));
    t->async_wait([this, alive = alive_, t, r, name = std::move(name), until](std::error_code) mutable {
      if (*alive) insert_replacement(r, std::move(name), until);
    });
    return;
  }
  {
    fi_addr_t& addr = addrs_[static_cast<std::size_t>(r)];
    if (addr != FI_ADDR_UNSPEC) {
      (void)fi_av_remove(av_.get(), &addr, 1, 0);
      addr = FI_ADDR_UNSPEC;
    }
    fi_addr_t fresh = FI_ADDR_UNSPEC;
    if (const int n = fi_av_insert(av_.get(), name.data(), 1, &fresh, 0, nullptr); n != 1)
      return refuse_replacement(r, "fi_av_insert: " + fi_error(n < 0 ? n : -FI_EINVAL));
    addr = fresh;
  }
  log(log_level::info, rank_name(cfg_.rank) + ": " + rank_name(r) + " has a replacement");
  peer_replaced(r);
  post_control_receive(r, {});
}

void ofi_fabric::grace_over(const std::string& why) noexcept {
  if (!survives_) return abort(make_error_code(errc::peer_lost), why);
  // No word of a cause came: the peers whose transfers failed are taken for dead, the
  // first to fail first. A rank alive but cut off finds its own transfers failing, and
  // fails the same way.
  std::vector<int> broken;
  for (operation* op = lost_.front(); op; op = op->transport.next)
    if (peer_alive(op->peer) && std::find(broken.begin(), broken.end(), op->peer) == broken.end()) broken.push_back(op->peer);
  lose_broken(broken, why, "a transfer with ", " failed");
}

}  // namespace optcast::ofi::impl
