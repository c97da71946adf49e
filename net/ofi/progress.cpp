// The libfabric fabric's operations: posting sends and receives (registering memory
// where the provider asks for it), cancelling, draining the completion queue, driving
// progress from the event loop, and deadlines. The peeks for mismatched messages are
// probes.cpp's.
#include "ofi_fabric.hpp"

namespace optcast::ofi::impl {

bool ofi_fabric::start(operation& op) noexcept {
  if (auto ec = check_op(*this, op)) return fail_now(op, ec, "bad operation");
  if (failure()) return fail_now(op, failure(), failure_detail());
  if (op.size > max_msg_)
    return fail_now(op, make_error_code(errc::invalid_argument), "message larger than the provider's " + std::to_string(max_msg_) + " B");
  if (op.tg.seq == credit_seq) return fail_now(op, make_error_code(errc::invalid_argument), "collective number 4294967295 is libfabric's own");
  if (std::string why; auto ec = refusal(op, why)) return fail_now(op, ec, why);
  op.transport.state = st_none;
  mr_of(op) = nullptr;
  if (op.kind == op_kind::recv) largest_recv_ = std::max(largest_recv_, op.size);
  // Control messages are not counted: the standing receive for them takes each at once.
  if (std::string why; op.kind == op_kind::send && op.tg.seq != seq_layout::control_seq && !count_send(op, why)) {
    log(log_level::error, rank_name(cfg_.rank) + ": " + why);
    return fail_now(op, make_error_code(errc::limit_exceeded), why);  // the collective's failure then tells every rank
  }
  if (auto ec = submit(op); ec) return fail_now(op, ec, last_error());
  return false;
}

void ofi_fabric::cancel(operation& op, std::error_code ec) noexcept {
  if (op.finished) return;
  switch (op.transport.state) {
    case st_retry:
      retry_.remove(op);
      break;
    case st_lost:
      lost_.remove(op);
      break;
    case st_reaped:
      reaped_.remove(op);
      break;
    case st_posted:
    case st_cancelling:
      // (abort() takes every operation out of posted_ before completing any.)
      if (op.transport.state == st_cancelling) return;
      // The provider finishes it with FI_ECANCELED (or normally, if too late); the
      // error to report waits in op.ec until then.
      op.transport.state = st_cancelling;
      op.ec = ec;
      fi_cancel(&ep_->fid, &ticket_of(op)->ctx);
      return;
    default:
      return;
  }
  op.transport.state = st_none;
  op.complete(ec);
}

void ofi_fabric::lost_peer(const std::string& why) {
  // Most often the peer failed and closed its endpoint (the store's word of why comes
  // within a round trip).
  start_loss_grace(why);
}

void ofi_fabric::abort(std::error_code ec, std::string detail) noexcept {
  note_failure(ec, detail);
  spread_failure();  // through the store: libfabric has no connection of ours to carry an abort frame
  stall_.clear();
  quiesce();
  auto alive = alive_;
  auto fail_all = [&](detail::op_queue& q) {
    while (operation* op = q.pop_front()) {
      release_mr(*op);
      op->transport.state = st_none;
      note_error(detail + ": " + describe_op(*op));
      op->complete(ec);
      if (!*alive) return false;
    }
    return true;
  };
  cancel_loss_grace();
  probe_timer_.cancel();
  sink_timer_.cancel();
  probes_.clear();
  if (fail_all(posted_) && fail_all(standing_) && fail_all(reaped_) && fail_all(retry_)) fail_all(lost_);
}

void ofi_fabric::quiesce() {
  if (!ep_ || !cq_) {
    ep_.reset();
    return;
  }
  for (auto* q : {&posted_, &standing_})
    for (operation* op = q->front(); op; op = op->transport.next)
      if (op->transport.state == st_posted) {
        op->transport.state = st_cancelling;
        fi_cancel(&ep_->fid, &ticket_of(*op)->ctx);
      }
  auto given_back = [&](void* ctx) {
    if (is_probe(ctx))
      probing_.reset();
    else if (operation* op = op_of(ctx))
      hold(*op);
  };
  // Receives are cancelled at once; a send the peer never takes (it died) is not.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  std::array<fi_cq_tagged_entry, 16> entries{};
  while ((!posted_.empty() || !standing_.empty()) && std::chrono::steady_clock::now() < until) {
    const ssize_t n = fi_cq_read(cq_.get(), entries.data(), entries.size());
    if (n == -FI_EAGAIN) {
      sched_yield();
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq_.get(), &err, 0) != 1) break;
      given_back(err.op_context);
      continue;
    }
    if (n < 0) break;
    for (ssize_t i = 0; i < n; ++i) given_back(entries[static_cast<std::size_t>(i)].op_context);
  }
  if (!posted_.empty() || !standing_.empty()) {
    ep_.reset();
    while (operation* op = posted_.front()) hold(*op);
    while (operation* op = standing_.front()) hold(*op);
  }
}

detail::op_queue& ofi_fabric::queue_of(const operation& op) noexcept { return standing(op) ? standing_ : posted_; }

void ofi_fabric::hold(operation& op) {
  queue_of(op).remove(op);
  free_ticket(op);
  release_mr(op);
  op.transport.state = st_reaped;
  reaped_.push_back(op);
}

bool ofi_fabric::fail_now(operation& op, std::error_code ec, const std::string& why) {
  note_error(why + ": " + describe_op(op));
  return op.finish_now(ec);
}

std::error_code ofi_fabric::submit(operation& op) {
  std::error_code ec;
  if (retry_.empty()) {
    const auto r = try_post(op, ec);
    if (r != posted::again) return ec;
  }
  op.transport.state = st_retry;
  retry_.push_back(op);
  progress_soon();
  return {};
}

ofi_fabric::posted ofi_fabric::try_post(operation& op, std::error_code& ec) {
  if (!ep_ || failure()) {
    ec = failure() ? failure() : make_error_code(errc::broken);
    return posted::failed;
  }
  void* desc = nullptr;
  if (register_ && op.size) {
    fid_mr* mr = nullptr;
    // Keys are ours to choose, and must be unique, unless the provider picks them.
    const std::uint64_t key = (info_->domain_attr->mr_mode & FI_MR_PROV_KEY) ? 0 : ++last_key_;
    const int ret = fi_mr_reg(domain_.get(), op.data, op.size, op.kind == op_kind::send ? FI_SEND : FI_RECV, 0, key, 0, &mr, nullptr);
    if (ret) {
      note_error("fi_mr_reg: " + fi_error(ret) + ": " + describe_op(op));
      ec = make_error_code(errc::invalid_argument);
      return posted::failed;
    }
    mr_of(op) = mr;
    desc = fi_mr_desc(mr);
  }
  static std::byte empty{};
  std::byte* buf = op.size ? op.data : &empty;
  const fi_addr_t addr = addrs_[static_cast<std::size_t>(op.peer)];
  if (addr == FI_ADDR_UNSPEC) {  // a dead peer's, removed (lose_peer): it would match any source
    release_mr(op);
    ec = make_error_code(errc::peer_lost);
    return posted::failed;
  }
  const std::uint64_t ignore = internal(op) && internal_of(op).role == internal_op::sink ? sink_ignore() : 0;
  void* ctx = &take_ticket(op).ctx;
  const ssize_t ret = op.kind == op_kind::send
                          ? fi_tsenddata(ep_.get(), buf, op.size, desc, signature_of(op.tg.seq).hash(), addr, op.tg.packed(), ctx)
                          : fi_trecv(ep_.get(), buf, op.size, desc, addr, op.tg.packed(), ignore, ctx);
  if (ret == -FI_EAGAIN) {
    free_ticket(op);
    release_mr(op);
    return posted::again;
  }
  if (ret) {
    free_ticket(op);
    release_mr(op);
    note_error(std::string(op.kind == op_kind::send ? "fi_tsend: " : "fi_trecv: ") + fi_error(static_cast<int>(ret)) + ": " + describe_op(op));
    ec = make_error_code(errc::peer_lost);
    return posted::failed;
  }
  op.transport.state = st_posted;
  queue_of(op).push_back(op);
  if (op.kind == op_kind::recv && !internal(op)) arm_probes();
  if (!wait_.is_open() && !standing(op)) progress_soon();  // polling providers need us to come back
  return posted::yes;
}

void ofi_fabric::release_mr(operation& op) {
  if (fid_mr*& mr = mr_of(op)) {
    fi_close(&mr->fid);
    mr = nullptr;
  }
}

operation* ofi_fabric::op_of(void* ctx) noexcept {
  // An abandoned ticket is never used again: a provider may give back a dead peer's
  // operation twice (cancelled, and flushed with its connection), and a second return of
  // a ticket reused meanwhile would complete another operation. A few bytes per operation
  // that was with a dead peer.
  auto* t = static_cast<ticket*>(ctx);
  if (!t->op && t->abandoned_from >= 0) --abandoned_recvs_[static_cast<std::size_t>(std::exchange(t->abandoned_from, -1))];
  return t->op;
}

ticket& ofi_fabric::take_ticket(operation& op) {
  ticket* t = free_tickets_;
  if (t)
    free_tickets_ = t->next_free;
  else
    t = &tickets_.emplace_back();
  *t = ticket{};
  t->op = &op;
  ticket_of(op) = t;
  return *t;
}

void ofi_fabric::free_ticket(operation& op) noexcept {
  if (ticket* t = std::exchange(ticket_of(op), nullptr)) {
    t->op = nullptr;
    t->next_free = free_tickets_;
    free_tickets_ = t;
  }
}

void ofi_fabric::abandon(operation& op) noexcept {
  if (ticket* t = std::exchange(ticket_of(op), nullptr)) {
    t->op = nullptr;  // never reused (op_of)
    // A receive stays posted on the dead peer's address vector entry until given back;
    // a later insert may reuse the entry, and the receive would match its messages.
    if (op.kind == op_kind::recv && op.peer >= 0 && ep_) {
      t->abandoned_from = op.peer;
      ++abandoned_recvs_[static_cast<std::size_t>(op.peer)];
      if (op.transport.state == st_posted) fi_cancel(&ep_->fid, &t->ctx);  // else cancelled already
    }
  }
  queue_of(op).remove(op);
  release_mr(op);
}

void ofi_fabric::finish(operation& op, std::error_code ec) {
  queue_of(op).remove(op);
  free_ticket(op);
  release_mr(op);
  op.transport.state = st_none;
  op.complete(ec);
}

bool ofi_fabric::drain() {
  bool any = false;
  auto alive = alive_;
  std::array<fi_cq_tagged_entry, 16> entries{};
  while (cq_ && ep_ && !failure()) {
    const ssize_t n = fi_cq_read(cq_.get(), entries.data(), entries.size());
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq_.get(), &err, 0) != 1) break;
      if (is_probe(err.op_context)) {
        const int code = err.err < 0 ? -err.err : err.err;
        if (code != FI_ENOMSG) {
          log(log_level::debug, "ofi: FI_PEEK failed (" + fi_error(code) + "); mismatched calls wait for their deadline");
          peek_works_ = false;
          probing_.reset();
          probes_.clear();
        } else if (!probe_answer(false, 0, 0)) {
          return true;
        }
        any = true;
        continue;
      }
      operation* given = op_of(err.op_context);
      if (!given) continue;  // abandoned
      operation& op = *given;
      std::error_code ec;
      std::string why;
      const int code = err.err < 0 ? -err.err : err.err;  // shm reports it negated
      if (op.transport.state == st_cancelling) {
        // Ours (a failed sibling, a deadline, a revocation, a dead peer), whichever way the
        // provider gave it back.
        any = true;
        finish(op, op.ec);
        if (!*alive || failure()) return true;
        continue;
      }
      if (code == FI_ETRUNC && internal(op) && internal_of(op).role == internal_op::sink) {
        // What a sink is for: a revoked communicator's message, taken and dropped.
        internal_of(op).got = err.len + err.olen;
        any = true;
        finish(op, {});
        if (!*alive || failure()) return true;
        continue;
      }
      if (code == FI_ETRUNC && internal(op)) {
        ec = make_error_code(errc::protocol_violation);
        why = "a message from " + rank_name(op.peer) + " on libfabric's own tag " + std::to_string(op.tg.seq) + " is larger than its " +
              std::to_string(op.size) + " B";
      } else if (code == FI_ETRUNC && err.data != 0 && !signature_hash_matches(op, err.data)) {
        ec = make_error_code(errc::call_mismatch);
        why = last_error();
      } else if (code == FI_ETRUNC) {
        // olen, the bytes that did not fit, is not reported by every provider (shm
        // leaves it 0). Either way the provider wrote only what fits.
        ec = size_error(op, "a larger message" + (err.olen ? " of " + std::to_string(op.size + err.olen) + " B" : std::string()));
        why = last_error();
      } else {  // including FI_ECANCELED we did not ask for: shm's for a dead peer
        why = describe_op(op) + ": " + fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, nullptr, 0) + " (" + fi_error(err.err) + ")";
        note_error(why);
        if (!failure()) {  // waits for the cause (lost_peer)
          queue_of(op).remove(op);
          free_ticket(op);
          release_mr(op);
          op.transport.state = st_lost;
          lost_.push_back(op);
          lost_peer(why);
          any = true;
          continue;
        }
        ec = make_error_code(errc::peer_lost);
      }
      // A failed operation fails the communicator.
      hold(op);
      abort(ec, why);
      return true;
    }
    if (n < 0) {
      abort(make_error_code(errc::protocol_violation), "fi_cq_read: " + fi_error(static_cast<int>(n)));
      return true;
    }
    // The whole batch leaves posted_ before any of it completes: a coroutine woken by
    // one may fail the fabric, whose quiesce() must not wait for the others.
    std::error_code bad;
    std::string why;
    const fi_cq_tagged_entry* peeked = nullptr;
    for (ssize_t i = 0; i < n; ++i) {
      const auto& e = entries[static_cast<std::size_t>(i)];
      if (is_probe(e.op_context)) {
        peeked = &e;
        continue;
      }
      operation* given = op_of(e.op_context);
      if (!given) continue;  // abandoned
      operation& op = *given;
      if (internal(op)) {
        internal_of(op).got = e.len;
        hold(op);
        continue;
      }
      if (op.kind == op_kind::recv) {
        ++received_;
        count_received(op.peer, e.len);
      }
      // (Without CQ data, which no provider here has been seen to drop on a receive,
      // there is nothing to check.)
      if (!bad && op.kind == op_kind::recv && (e.flags & FI_REMOTE_CQ_DATA) && !signature_hash_matches(op, e.data)) {
        bad = make_error_code(errc::call_mismatch);
        why = last_error();
      } else if (!bad && op.kind == op_kind::recv && e.len != op.size) {
        bad = size_error(op, "a message of " + std::to_string(e.len) + " B");
        why = last_error();
      }
      hold(op);
    }
    if (bad) {
      abort(bad, why);
      return true;
    }
    if (peeked && !probe_answer(true, peeked->tag, peeked->data)) return true;
    while (operation* op = reaped_.pop_front()) {
      any = true;
      op->transport.state = st_none;
      op->complete({});
      // Its waiter may have failed the fabric: abort() completed the rest of reaped_.
      if (!*alive || failure()) return true;
    }
  }
  next_probe();
  // Operations the provider could not take before (-FI_EAGAIN), in order.
  while (ep_ && !failure() && !retry_.empty()) {
    operation& op = *retry_.pop_front();
    std::error_code ec;
    const auto r = try_post(op, ec);  // links it into posted_ when taken
    if (r == posted::yes) continue;
    if (r == posted::again) {  // still full: back at the head, after more progress
      retry_.push_front(op);
      break;
    }
    op.transport.state = st_none;
    op.complete(ec);
    if (!*alive) return true;
  }
  return any;
}

void ofi_fabric::progress() {
  progress_posted_ = false;
  auto alive = alive_;
  const bool any = drain();
  if (!*alive) return;
  // Polling (no wait object, or operations the provider refused): when nothing arrived,
  // give the processor to the ranks we are waiting for (several commonly share a core).
  if (!any && (!wait_.is_open() || !retry_.empty())) sched_yield();
  arm();
}

bool ofi_fabric::check_network() {
  if ((posted_.empty() && !surviving_busy()) || !cq_ || !ep_ || failure() || !wait_.is_open())
    return false;  // (without a wait object progress() polls)
  auto alive = alive_;
  const bool any = drain();
  if (!*alive || !cq_ || !ep_ || failure()) return any;
  // fi_cq_read made progress, which may leave work behind that the descriptor will not
  // announce: the wait armed before holds only if fi_trywait still agrees.
  fid* f = &cq_->fid;
  if (fi_trywait(fabric_.get(), &f, 1) != FI_SUCCESS) progress_soon();
  return any;
}

void ofi_fabric::progress_soon() {
  if (progress_posted_) return;
  progress_posted_ = true;
  asio::post(ex_, [this, alive = alive_] {
    if (*alive) progress();
  });
}

void ofi_fabric::arm() {
  if (!cq_ || !ep_ || failure()) return;
  if (!wait_.is_open()) {
    if (!posted_.empty() || !retry_.empty() || probing_ || surviving_busy()) return progress_soon();
    if (sinks_ > 0) poll_sinks_later();
    return;
  }
  // -FI_EAGAIN promises no wakeup: the provider wants progress and the operation again.
  // rxm (1.17) refuses a send while it connects to the peer and runs its connection
  // progress inside that call (rxm_get_conn), so the event the fd would have reported may
  // be gone by the time we wait on it.
  if (!retry_.empty()) return progress_soon();
  if (waiting_) return;
  fid* f = &cq_->fid;
  if (fi_trywait(fabric_.get(), &f, 1) != FI_SUCCESS) return progress_soon();
  waiting_ = true;
  wait_.async_wait(asio::posix::stream_descriptor::wait_read, [this, alive = alive_](std::error_code ec) {
    if (!*alive) return;
    waiting_ = false;
    if (!ec) progress();
  });
}

void ofi_fabric::poll_sinks_later() {
  if (sink_timer_armed_) return;
  sink_timer_armed_ = true;
  sink_timer_.expires_after(sink_poll_);
  sink_poll_ = std::min(sink_poll_ * 2, std::chrono::milliseconds(100));
  sink_timer_.async_wait([this, alive = alive_](std::error_code ec) {
    if (!*alive) return;
    sink_timer_armed_ = false;
    if (!ec) progress();
  });
}

std::string ofi_fabric::waiting_for(std::uint32_t seq) const {
  std::string waiting;
  for (operation* op = posted_.front(); op; op = op->transport.next)
    if (op->tg.seq == seq) waiting += "; " + describe_op(*op);
  for (operation* op = retry_.front(); op; op = op->transport.next)
    if (op->tg.seq == seq) waiting += "; " + describe_op(*op) + " (not yet taken by the provider)";
  for (operation* op = lost_.front(); op; op = op->transport.next)
    if (op->tg.seq == seq) waiting += "; " + describe_op(*op);
  return waiting;
}

}  // namespace optcast::ofi::impl
