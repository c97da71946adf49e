// The calls in flight on a rank and the checks of arriving messages against them
// (optcast/fabric_base.hpp).
#include "optcast/fabric_base.hpp"

#include <algorithm>
#include <iterator>

#include "survival/survival.hpp"

namespace optcast {

fabric_base::fabric_base() = default;
fabric_base::~fabric_base() = default;

detail::survival& fabric_base::survival_state() {
  if (!survival_) survival_ = std::make_unique<detail::survival>(*this);
  return *survival_;
}

// The face is the fabric itself, which its users change through it (revoke, agree) as
// through any of its other handles.
survivable* fabric_base::survival() const noexcept { return survives_failures() ? const_cast<fabric_base*>(this) : nullptr; }

bool fabric_base::peer_alive(int r) const noexcept { return survival_ ? survival_->alive(r) : r >= 0 && r < size(); }

void fabric_base::enroll(std::uint32_t id, std::vector<int> members) { survival_state().enroll(id, std::move(members)); }

void fabric_base::retire(std::uint32_t id) noexcept {
  if (survival_) survival_->retire(id);
}

void fabric_base::revoke(std::uint32_t id, std::error_code ec, std::string detail) noexcept {
  if (failure()) return;  // everything fails already
  if (!survives_failures()) return abort(ec, std::move(detail));
  try {
    survival_state().revoke(id, ec, std::move(detail), true);
  } catch (const std::bad_alloc&) {
    abort(ec, "revoking communicator " + std::to_string(id) + ": out of memory");
  }
}

std::error_code fabric_base::revoked(std::uint32_t id) const noexcept { return survival_ ? survival_->revoked(id) : std::error_code(); }

std::string fabric_base::revocation(std::uint32_t id) const { return survival_ ? survival_->revocation(id) : std::string(); }

void fabric_base::agree(std::uint32_t id, std::uint32_t n, std::vector<int> members, agreement mine,
                        std::chrono::milliseconds timeout, agreement_done done) {
  if (failure()) {
    note_error("agree: " + failure_detail());
    return done(fail(failure()));
  }
  if (!survives_failures()) {
    note_error("this fabric (" + std::string(name()) + ") cannot agree among survivors");
    return done(fail(errc::invalid_argument));
  }
  survival_state().agree(id, n, std::move(members), std::move(mine), timeout, std::move(done));
}

void fabric_base::control_arrived(int src, std::span<const std::byte> payload) noexcept {
  if (failure()) return;
  try {
    survival_state().arrived(src, payload);
  } catch (const std::bad_alloc&) {
    abort(make_error_code(errc::limit_exceeded), "out of memory for a control message from rank " + std::to_string(src));
  }
}

bool fabric_base::peer_died(int r, std::error_code ec, const std::string& why) noexcept {
  try {
    return survival_state().died(r, ec, why);
  } catch (const std::bad_alloc&) {
    abort(ec, why);
    return true;
  }
}

std::error_code fabric_base::refusal(const operation& op, std::string& why) const {
  if (!survival_) return {};
  if ((op.kind == op_kind::send || op.kind == op_kind::recv) && op.peer >= 0 && !survival_->alive(op.peer)) {
    why = survival_->death_of(op.peer);
    return survival_->death_code(op.peer);
  }
  if (op.tg.seq == seq_layout::control_seq) return {};
  const auto id = seq_layout::id_of(op.tg.seq);
  if (auto ec = survival_->revoked(id)) {
    why = "communicator " + std::to_string(id) + " was revoked: " + survival_->revocation(id);
    return ec;
  }
  return {};
}

std::vector<int> fabric_base::joiners() const { return survival_ ? survival_->joiners() : std::vector<int>{}; }

void fabric_base::admit_replacement(int to, std::uint32_t id, const std::vector<int>& members) { survival_state().admit(to, id, members); }

std::optional<std::pair<std::uint32_t, std::vector<int>>> fabric_base::take_admission() {
  return survival_ ? survival_->take_admission() : std::nullopt;
}

void fabric_base::peer_replaced(int r) { survival_state().revive(r); }

void fabric_base::end_agreements(std::error_code ec, const std::string& why) noexcept {
  if (survival_) survival_->end(ec, why);
}

std::size_t fabric_base::control_in_flight() const noexcept { return survival_ ? survival_->in_flight() : 0; }

bool fabric_base::surviving_busy() const noexcept { return survival_ && (survival_->in_flight() > 0 || survival_->agreeing()); }

std::string fabric_base::agreements_waiting() const { return survival_ ? survival_->waiting() : std::string(); }

void fabric_base::sign(std::uint32_t seq, const call_signature& s) {
  if (s.empty()) return;
  if (signed_one_.second.empty())
    signed_one_ = {seq, s};
  else
    signed_more_.emplace_back(seq, s);
}

void fabric_base::unsign(std::uint32_t seq) noexcept {
  signed_call done;
  if (auto it = std::find_if(signed_more_.rbegin(), signed_more_.rend(), [&](const signed_call& c) { return c.first == seq; });
      it != signed_more_.rend()) {
    done = *it;
    signed_more_.erase(std::next(it).base());
  } else if (signed_one_.first == seq && !signed_one_.second.empty()) {
    done = std::exchange(signed_one_, {});
  } else {
    return;
  }
  constexpr std::size_t kept = 31;  // and the newest
  if (!finished_newest_.second.empty()) {
    if (finished_.empty()) finished_.reserve(kept);  // once, not at every doubling
    if (finished_.size() < kept)
      finished_.push_back(finished_newest_);
    else
      finished_[finished_next_++ % kept] = finished_newest_;
  }
  finished_newest_ = done;
}

call_signature fabric_base::signature_of(std::uint32_t seq) const noexcept {
  for (auto it = signed_more_.rbegin(); it != signed_more_.rend(); ++it)
    if (it->first == seq) return it->second;
  if (signed_one_.first == seq) return signed_one_.second;
  return {};
}

call_signature fabric_base::call_made(std::uint32_t seq) const noexcept {
  if (auto s = signature_of(seq); !s.empty()) return s;
  if (finished_newest_.first == seq) return finished_newest_.second;
  for (const auto& [q, sig] : finished_)
    if (q == seq) return sig;
  return {};
}

bool fabric_base::signature_matches(const operation& op, const call_signature& theirs) {
  const auto mine = signature_of(op.tg.seq);
  if (mine == theirs) return true;
  note_error(called_differently(op.tg.seq, calls_of(op.peer, theirs, rank(), mine)));
  return false;
}

bool fabric_base::signature_hash_matches(const operation& op, std::uint64_t theirs) {
  return signature_hash_matches(op.tg.seq, op.peer, theirs);
}

bool fabric_base::signature_hash_matches(std::uint32_t seq, int src, std::uint64_t theirs) {
  const auto mine = signature_of(seq);
  if (mine.hash() == theirs) return true;
  note_error(called_differently(seq, (src >= 0 ? "rank " + std::to_string(src) + "'s call" : "another rank's call") + " (signature " +
                                         std::to_string(theirs) + ") differs from rank " + std::to_string(rank()) + "'s " + mine.describe()));
  return false;
}

bool fabric_base::unexpected_consistent(int src, std::uint32_t seq, const call_signature& theirs) {
  if (theirs.empty() || failure()) return true;  // not a collective's; or nothing to save
  const auto mine = signature_of(seq);
  if (!mine.empty()) {
    if (mine == theirs) return true;
    note_error(called_differently(seq, calls_of(src, theirs, rank(), mine)));
    return false;
  }
  // Every message of a collective is received within it: one for a collective this rank
  // has finished was sent by a call that differs from this rank's.
  if (finished_newest_.first == seq && !finished_newest_.second.empty()) {
    note_unreceived(src, seq, theirs, finished_newest_.second);
    return false;
  }
  for (const auto& [s, sig] : finished_)
    if (s == seq && !sig.empty()) {
      note_unreceived(src, seq, theirs, sig);
      return false;
    }
  return true;  // not started here yet: checked when it is (sign)
}

void fabric_base::note_unreceived(int src, std::uint32_t seq, const call_signature& theirs, const call_signature& mine) {
  note_error(mine == theirs ? "rank " + std::to_string(src) + " sent a message of collective " + std::to_string(seq) + " (" +
                                  theirs.describe() + ") that rank " + std::to_string(rank()) +
                                  " finished without receiving it: the ranks' calls differ"
                            : called_differently(seq, calls_of(src, theirs, rank(), mine)));
}

std::error_code fabric_base::peer_left(const operation& op, std::uint32_t their_seq, const call_signature& theirs) {
  const auto mine = signature_of(op.tg.seq);
  const std::string them = "rank " + std::to_string(op.peer);
  if (!theirs.empty() && their_seq == op.tg.seq && !mine.empty() && mine != theirs)
    note_error(called_differently(op.tg.seq, calls_of(op.peer, theirs, rank(), mine)));
  else
    note_error(them + " has left the job (closed its communicator) " +
               (theirs.empty() ? std::string("without finishing a collective")
                               : "after collective " + std::to_string(their_seq) + ", " + theirs.describe() + ",") +
               " while " + describe_op(op) + " waits for it: the ranks' calls differ (not every rank made this call, or not alike)");
  return make_error_code(errc::call_mismatch);
}

result<void> fabric_base::settle_outcome(const result<void>& job, const std::string& job_detail, std::error_code own,
                                    const std::string& own_detail) {
  if (!job) {
    replace_failure(job.error(), job_detail);
    return job;
  }
  if (own && own != errc::cancelled) {  // never reached the store (it went first)
    replace_failure(own, own_detail);
    return fail(own);
  }
  return {};
}

std::error_code fabric_base::arrival_error(const operation& op, const call_signature& theirs, std::size_t bytes) {
  if (!signature_matches(op, theirs)) return make_error_code(errc::call_mismatch);
  if (bytes != op.size) return size_error(op, "a message of " + std::to_string(bytes) + " B");
  return {};
}

std::error_code fabric_base::size_error(const operation& op, const std::string& got) {
  const auto mine = signature_of(op.tg.seq);
  if (!mine.empty()) {
    note_error(called_differently(op.tg.seq, "size mismatch: " + describe_op(op) + " got " + got + ", rank " + std::to_string(rank()) +
                                                 " called " + mine.describe()));
    return make_error_code(errc::call_mismatch);
  }
  note_error("size mismatch: " + describe_op(op) + " got " + got);
  return make_error_code(errc::size_mismatch);
}

std::error_code told_error(std::uint64_t code) noexcept {
  switch (static_cast<errc>(code)) {
    case errc::timeout:
    case errc::protocol_violation:
    case errc::size_mismatch:
    case errc::limit_exceeded:
    case errc::call_mismatch:
    case errc::deadlock:
    case errc::port_violation:
    case errc::revoked:
      return make_error_code(static_cast<errc>(code));
    default:
      return make_error_code(errc::peer_lost);
  }
}

std::error_code check_op(const fabric& f, const operation& op) noexcept {
  if (op.peer == any_peer && (op.kind != op_kind::recv || !f.receives_from_any()))
    return make_error_code(errc::invalid_argument);
  if (op.peer != any_peer && (op.peer < 0 || op.peer >= f.size() || op.peer == f.rank()))
    return make_error_code(errc::invalid_argument);
  if (op.size > 0 && op.data == nullptr) return make_error_code(errc::invalid_argument);
  return {};
}

}  // namespace optcast
