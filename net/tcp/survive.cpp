// The TCP fabric when a link or a peer fails: a broken link's operations wait for the
// cause (loss_grace); a peer that failed is cut off (its connections closed, what
// waits on it failed, what it sent and nobody took given back) and the survival layer
// (fabric_base) revokes the communicators it was in; every other connection stays, so
// the survivors go on over them (optcast/survive.hpp).
#include "tcp_fabric.hpp"

#include <memory>

namespace optcast::tcp::impl {

void tcp_fabric::out_lost(int p, int rail, const std::string& why) {
  if (failure()) return fail_out(p, rail, make_error_code(errc::peer_lost), why);
  auto& out = this->out(p, rail);
  out.st = out_conn::state::failed;
  shut(out.sock);
  if (!peer(p).broke) peer(p).broke = ++breaks_;
  const operation* waiting = out.writing ? out.writing : out.queue.front();
  lost_connection(why, waiting ? waiting->tg.seq : 0, waiting != nullptr);
}

void tcp_fabric::lost_connection(const std::string& why, std::uint32_t seq, bool waits) {
  // Most often the other end failed and closed its connections; its abort frame or the
  // store's word says why within a round trip. The operations on the connection wait
  // for that (abort() then ends them with the cause) or for the grace to pass. The peer
  // may also have left in good order, its calls having differed from this rank's: the
  // store, asked now, can tell.
  log(log_level::debug, rank_name(cfg_.rank) + ": " + why + "; its cause awaited");
  if (waits) stall_.connection_lost(job_.get(), seq, why);
  start_loss_grace(why);
}

void tcp_fabric::fail_out(int p, std::error_code ec, const std::string& why) {
  auto alive = alive_;
  for (int rail = 0; rail < static_cast<int>(peer(p).out.size()) && *alive; ++rail) fail_out(p, rail, ec, why);
}

void tcp_fabric::fail_out(int p, int rail, std::error_code ec, const std::string& why) {
  auto& out = this->out(p, rail);
  if (out.st != out_conn::state::failed) {
    out.st = out_conn::state::failed;
    shut(out.sock);
  }
  auto alive = alive_;
  out.cancelled = {};
  if (operation* op = std::exchange(out.writing, nullptr)) {
    op->transport.state = st_none;
    note_error(why + ": " + describe_op(*op));
    op->complete(ec);
    if (!*alive) return;
  }
  while (operation* op = out.queue.pop_front()) {
    op->transport.state = st_none;
    note_error(why + ": " + describe_op(*op));
    op->complete(ec);
    if (!*alive) return;
  }
}

void tcp_fabric::lose_peer(int r, std::error_code ec, const std::string& why) noexcept {
  // This rank named as the one that failed (a stall's verdict): it is out of the job.
  if (r < 0 || r >= cfg_.size || r == cfg_.rank) return told(ec, why);
  if (failure() || closing_ || !peer_alive(r)) return;
  log(log_level::info, rank_name(cfg_.rank) + ": " + rank_name(r) + " is lost: " + why);
  auto alive = alive_;
  // Revoked first: a call that fails on r's loss then finds its communicator revoked, and
  // goes on as a survivor's (finish()) rather than failing this rank.
  peer_died(r, ec, why);
  if (!*alive) return;
  drop_held(peer(r), [](tag) { return true; });
  fail_out(r, ec, why);
  if (!*alive) return;
  drop_in(r, ec, why);
}

void tcp_fabric::reset_peer(int r) noexcept {
  // A replacement takes r's place: whatever is left of the dead process's connections
  // goes (its handlers ran when they were cut, at its death), and r starts as a peer not
  // yet connected, whose address is looked up again.
  if (r < 0 || r >= cfg_.size || r == cfg_.rank || failure() || closing_) return;
  const auto lost = make_error_code(errc::peer_lost);
  const std::string why = rank_name(r) + "'s process was replaced";
  auto alive = alive_;
  drop_held(peer(r), [](tag) { return true; });
  fail_out(r, lost, why);
  if (!*alive) return;
  drop_in(r, lost, why);
  if (!*alive) return;
  const int rails = peer(r).rails;
  std::destroy_at(&peer(r));
  std::construct_at(&peer(r), ex_);
  auto& pe = peer(r);
  pe.in.resize(acceptors_.size());
  while (pe.out.size() < acceptors_.size()) pe.out.emplace_back(ex_);
  pe.rails = rails;
  log(log_level::info, rank_name(cfg_.rank) + ": " + rank_name(r) + " has a replacement");
  peer_replaced(r);
}

bool tcp_fabric::link_broken(int p) const noexcept {
  const auto& pe = peers_[static_cast<std::size_t>(p)];
  if (pe.left) return false;
  if (pe.in_closed) return true;
  return std::any_of(pe.out.begin(), pe.out.end(), [](const out_conn& o) { return o.st == out_conn::state::failed; });
}

void tcp_fabric::grace_over(const std::string& why) noexcept {
  // No word of a cause came: whoever's link broke is taken for dead, the first to break
  // first (the likeliest cause; a survivor that exits after its failure breaks its links
  // later). A rank alive but cut off finds its own links cut, and fails the same way.
  std::vector<int> broken;
  for (int p = 0; p < cfg_.size; ++p)
    if (p != cfg_.rank && peer_alive(p) && link_broken(p)) broken.push_back(p);
  std::stable_sort(broken.begin(), broken.end(), [&](int a, int b) {
    const auto x = peer(a).broke, y = peer(b).broke;
    return (x ? x : ~std::uint64_t{0}) < (y ? y : ~std::uint64_t{0});
  });
  lose_broken(broken, why, "the connection with ", " broke");
}

void tcp_fabric::fail_communicator(std::uint32_t id, std::error_code ec, const std::string& why) noexcept {
  const auto of_it = [id](const operation& op) { return op.tg.seq != seq_layout::control_seq && seq_layout::id_of(op.tg.seq) == id; };
  // Taken off their queues first, all of them, into failing_: completing one may run its
  // collective on, which cancels others (cancel() then completes them at once, their
  // owners about to go) or starts new ones.
  const auto collect = [&](operation& op) {
    op.transport.state = st_failing;
    failing_.push_back(op);
  };
  any_posted_.drain_if(of_it, collect);
  for (auto& pe : peers_) {
    pe.posted.drain_if(of_it, collect);
    // A send by reference stays until its receipt: the receiver may be copying it now, and
    // its memory must hold what was sent until then (cancel() says the same).
    for (auto& out : pe.out) out.queue.drain_if(of_it, collect);
    drop_held(pe, [id](tag t) { return t.seq != seq_layout::control_seq && seq_layout::id_of(t.seq) == id; });
  }
  // A frame being written or read stays: its bytes are on the wire, and it ends with them.
  auto alive = alive_;
  while (operation* op = failing_.pop_front()) {
    op->transport.state = st_none;
    note_error(why + ": " + describe_op(*op));
    op->complete(ec);
    if (!*alive) return;
  }
}

}  // namespace optcast::tcp::impl
