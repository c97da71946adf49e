// One rank's part in an agreement (agreement.hpp).
#include "agreement.hpp"

#include <algorithm>

#include "survival.hpp"

namespace optcast::detail {

agreement_session::agreement_session(survival& s, std::uint32_t comm, std::uint32_t n, std::vector<int> members, int me,
                                     agreement mine, std::chrono::milliseconds timeout, agreement_done done)
    : s_(s),
      comm_(comm),
      n_(n),
      members_(std::move(members)),
      me_(me),
      mine_(std::move(mine)),
      done_(std::move(done)),
      dead_(members_.size()),
      contrib_(members_.size()),
      heard_(members_.size()) {
  for (std::size_t i = 0; i < members_.size(); ++i) dead_[i] = static_cast<int>(i) != me_ && !s_.alive_in(comm_, members_[i]);
  ballot_ = static_cast<int>(std::find(dead_.begin(), dead_.end(), 0) - dead_.begin());
  if (timeout.count() > 0) {
    deadline_ = s_.fabric().arm_deadline(seq_layout::control_seq, timeout);
    armed_ = true;
  }
}

agreement_session::~agreement_session() { disarm(); }

void agreement_session::disarm() noexcept {
  if (armed_) s_.fabric().disarm_deadline(deadline_);
  armed_ = false;
}

int agreement_session::index_of(int job_rank) const noexcept {
  const auto it = std::find(members_.begin(), members_.end(), job_rank);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

control_message agreement_session::contribution() const {
  control_message m;
  m.kind = control_message::contribute;
  m.comm = comm_;
  m.n = n_;
  m.ballot = static_cast<std::uint32_t>(ballot_);
  m.flag = mine_.flag;
  m.words = mine_.words;
  m.failed.assign((members_.size() + 63) / 64, 0);
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (dead_[i]) m.failed[i / 64] |= std::uint64_t{1} << (i % 64);
  return m;
}

void agreement_session::begin() { advance(); }

void agreement_session::advance() {
  if (decision_) return check_over();
  ballot_ = static_cast<int>(std::find(dead_.begin(), dead_.end(), 0) - dead_.begin());
  if (ballot_ != me_) {
    if (contributed_ != ballot_) {
      contributed_ = ballot_;
      s_.send(members_[static_cast<std::size_t>(ballot_)], contribution());
    }
    return;
  }
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (static_cast<int>(i) != me_ && !dead_[i] && !contrib_[i]) return;  // still waits for it
  control_message x = contribution();
  x.kind = control_message::decide;
  for (const auto& c : contrib_) {
    if (!c) continue;
    x.flag &= c->flag;
    if (x.words.size() < c->words.size()) x.words.resize(c->words.size(), 0);
    for (std::size_t w = 0; w < c->words.size(); ++w) x.words[w] |= c->words[w];
    for (std::size_t w = 0; w < c->failed.size() && w < x.failed.size(); ++w) x.failed[w] |= c->failed[w];
  }
  decide(x);
}

void agreement_session::decide(const control_message& x) {
  decision_ = x;
  decision_->kind = control_message::decide;
  auto self = shared_from_this();
  // Passed on before it is returned: if this rank returns it and then dies, the others
  // have it (or a survivor that took it does), so nobody decides otherwise.
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (static_cast<int>(i) != me_ && !dead_[i]) s_.send(members_[i], *decision_);
  disarm();
  agreement out;
  out.flag = x.flag;
  out.words = x.words;
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (i / 64 < x.failed.size() && (x.failed[i / 64] >> (i % 64) & 1)) out.failed.push_back(members_[i]);
  std::sort(out.failed.begin(), out.failed.end());
  returned_ = true;
  auto done = std::move(done_);
  check_over();
  if (done) done(std::move(out));
}

void agreement_session::message(int src, const control_message& m) {
  const int i = index_of(src);
  if (i < 0 || i == me_ || m.failed.size() > (members_.size() + 63) / 64) return;  // not a member's, or not of this size
  auto self = shared_from_this();
  const auto I = static_cast<std::size_t>(i);
  if (m.kind == control_message::contribute) {
    if (decision_) {
      // It took this rank for its coordinator after this rank decided (and passed the
      // decision on while it still waited on a lower one): the decision, as its coordinator's.
      if (!heard_[I]) {
        control_message x = *decision_;
        x.ballot = static_cast<std::uint32_t>(me_);
        s_.send(src, x);
      }
      return;
    }
    contrib_[I] = m;
    return advance();
  }
  if (m.kind != control_message::decide) return;
  heard_[I] = 1;
  if (!decision_ && (i == ballot_ || ballot_ == me_ || m.ballot >= static_cast<std::uint32_t>(ballot_))) {
    control_message x = m;
    x.ballot = std::max(m.ballot, static_cast<std::uint32_t>(ballot_));
    return decide(x);
  }
  advance();
}

void agreement_session::death(int job_rank) {
  const int i = index_of(job_rank);
  if (i < 0 || i == me_ || dead_[static_cast<std::size_t>(i)]) return;
  auto self = shared_from_this();
  dead_[static_cast<std::size_t>(i)] = 1;
  advance();
}

void agreement_session::fail(std::error_code ec, const std::string& why) {
  auto self = shared_from_this();
  disarm();
  const bool waiting = !returned_;
  returned_ = over_ = true;
  s_.finished(comm_, n_);
  if (waiting && done_) {
    s_.note("agreement " + std::to_string(n_) + " of communicator " + std::to_string(comm_) + ": " + why);
    auto done = std::move(done_);
    done(optcast::fail(ec));
  }
}

void agreement_session::check_over() {
  if (over_ || !decision_) return;
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (static_cast<int>(i) != me_ && !dead_[i] && !heard_[i]) return;
  over_ = true;
  s_.finished(comm_, n_);
}

std::string agreement_session::waiting() const {
  if (returned_) return {};
  std::string who;
  int count = 0;
  if (ballot_ == me_) {
    for (std::size_t i = 0; i < members_.size(); ++i)
      if (static_cast<int>(i) != me_ && !dead_[i] && !contrib_[i])
        who += (count++ ? ", " : "") + std::to_string(members_[i]);
  } else {
    who = std::to_string(members_[static_cast<std::size_t>(ballot_)]) + " (its coordinator)";
    count = 1;
  }
  if (who.empty()) return {};
  return "agreement " + std::to_string(n_) + " of communicator " + std::to_string(comm_) + " waiting for rank" +
         (count > 1 ? "s " : " ") + who;
}

}  // namespace optcast::detail
