// Dead peers, revocations and agreements on one rank (survival.hpp).
#include "survival.hpp"

#include <algorithm>
#include <utility>

#include "agreement.hpp"

namespace optcast::detail {

namespace {

// A control message in flight: it owns its bytes, and goes when the send completes.
struct control_send {
  operation op;
  std::vector<std::byte> bytes;
  std::size_t* in_flight;
  std::shared_ptr<bool> alive;  // the survival's, which counts it
};

}  // namespace

std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return out;
}

survival::survival(fabric_base& f)
    : f_(f), dead_(static_cast<std::size_t>(std::max(f.size(), 0)), 0), revived_at_(dead_.size(), 0) {}

survival::~survival() { *alive_ = false; }

bool survival::alive(int r) const noexcept { return r >= 0 && r < static_cast<int>(dead_.size()) && !dead_[static_cast<std::size_t>(r)]; }

bool survival::alive_in(std::uint32_t id, int r) const noexcept {
  if (!alive(r)) return false;
  const auto at = revived_at_[static_cast<std::size_t>(r)];
  if (at == 0) return true;
  const auto it = epoch_of_.find(id);
  return it != epoch_of_.end() && it->second >= at;
}

void survival::revive(int r) {
  if (r < 0 || r >= static_cast<int>(dead_.size()) || r == f_.rank() || alive(r)) return;
  dead_[static_cast<std::size_t>(r)] = 0;
  dead_why_.erase(r);
  revived_at_[static_cast<std::size_t>(r)] = ++epoch_;
  if (std::find(joiners_.begin(), joiners_.end(), r) == joiners_.end()) joiners_.push_back(r);
}

void survival::admit(int to, std::uint32_t id, const std::vector<int>& members) {
  std::erase(joiners_, to);
  control_message m;
  m.kind = control_message::admit;
  m.comm = id;
  m.failed.assign((dead_.size() + 63) / 64, 0);
  for (int j : members) m.failed[static_cast<std::size_t>(j) / 64] |= std::uint64_t{1} << (j % 64);
  send(to, m);
}

std::optional<std::pair<std::uint32_t, std::vector<int>>> survival::take_admission() {
  if (admission_) admission_taken_ = true;
  return std::exchange(admission_, std::nullopt);
}

void survival::note(std::string why) { f_.note_error(std::move(why)); }

bool survival::died(int r, std::error_code ec, const std::string& why) {
  if (!alive(r) || r == f_.rank()) return false;
  dead_[static_cast<std::size_t>(r)] = 1;
  dead_why_[r] = {ec, why};
  std::erase(joiners_, r);
  std::vector<std::uint32_t> ids{0};
  for (const auto& [id, members] : comms_)
    if (id != 0 && std::find(members.begin(), members.end(), r) != members.end()) ids.push_back(id);
  auto here = alive_;
  for (auto id : ids) {
    revoke(id, ec, why, true);
    if (!*here) return true;
  }
  std::vector<std::shared_ptr<agreement_session>> sessions;
  for (auto& [k, s] : sessions_) sessions.push_back(s);
  for (auto& s : sessions) {
    s->death(r);
    if (!*here) return true;
  }
  return true;
}

std::string survival::death_of(int r) const {
  const auto it = dead_why_.find(r);
  return it == dead_why_.end() ? "rank " + std::to_string(r) + " is dead" : it->second.second;
}

std::error_code survival::death_code(int r) const {
  const auto it = dead_why_.find(r);
  return it == dead_why_.end() ? make_error_code(errc::peer_lost) : it->second.first;
}

std::vector<int> survival::members_of(std::uint32_t id) const {
  if (id == 0) {
    std::vector<int> all(dead_.size());
    for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
    return all;
  }
  const auto it = comms_.find(id);
  return it == comms_.end() ? std::vector<int>{} : it->second;
}

void survival::enroll(std::uint32_t id, std::vector<int> members) {
  if (id == 0 || id >= seq_layout::reserved_id) return;
  int gone = -1;
  for (int m : members)
    if (!alive(m) && m != f_.rank() && gone < 0) gone = m;
  for (int m : members) std::erase(joiners_, m);  // taken in
  comms_[id] = std::move(members);
  epoch_of_[id] = epoch_;
  if (gone >= 0) revoke(id, make_error_code(errc::peer_lost), death_of(gone), true);
}

void survival::retire(std::uint32_t id) noexcept {
  if (id == 0) return;
  comms_.erase(id);
  epoch_of_.erase(id);
  revoked_.erase(id);
  finished_.erase(id);
  for (auto it = early_.begin(); it != early_.end();)
    if (it->first.first == id) {
      early_count_ -= std::min(early_count_, it->second.size());
      it = early_.erase(it);
    } else {
      ++it;
    }
}

void survival::revoke(std::uint32_t id, std::error_code ec, std::string why, bool tell) {
  if (id >= seq_layout::reserved_id || revoked_.count(id)) return;
  revoked_[id] = {ec, why};
  auto here = alive_;
  f_.fail_communicator(id, ec, why);
  // A replacement's job communicator is its predecessor's: the members drop what comes
  // for it, and one that has not revived it yet would refuse the connection.
  if (!*here || !tell || (id == 0 && f_.replacement())) return;
  control_message m;
  m.kind = control_message::revoke;
  m.comm = id;
  m.code = ec.category() == error_category() ? static_cast<std::uint32_t>(ec.value()) : static_cast<std::uint32_t>(errc::peer_lost);
  m.text = why;
  for (int r : members_of(id))
    if (r != f_.rank() && alive_in(id, r)) send(r, m);
}

std::error_code survival::revoked(std::uint32_t id) const noexcept {
  const auto it = revoked_.find(id);
  return it == revoked_.end() ? std::error_code() : it->second.ec;
}

std::string survival::revocation(std::uint32_t id) const {
  const auto it = revoked_.find(id);
  return it == revoked_.end() ? std::string() : it->second.why;
}

void survival::send(int to, const control_message& m) {
  auto* s = new control_send{};
  s->bytes = m.encode();
  s->op = operation(f_, op_kind::send, to, tag{seq_layout::control_seq, 0}, s->bytes.data(), s->bytes.size());
  s->op.context = s;
  s->in_flight = &in_flight_;
  s->alive = alive_;
  s->op.on_complete = [](operation& o) noexcept {
    auto* sent = static_cast<control_send*>(o.context);
    if (*sent->alive) --*sent->in_flight;
    delete sent;
  };
  if (f_.post(s->op))
    delete s;
  else
    ++in_flight_;
}

void survival::arrived(int src, std::span<const std::byte> bytes) {
  if (!alive(src)) return;  // a dead peer's word counts no more
  auto m = control_message::decode(bytes);
  if (!m) {
    f_.abort(make_error_code(errc::protocol_violation), "a malformed control message from rank " + std::to_string(src));
    return;
  }
  if (m->kind == control_message::admit) {
    // Only a replacement waits for one; the first word stands (every member of the growth
    // sends the same, so that it comes while any of them lives).
    if (!f_.replacement() || admission_ || admission_taken_ || m->comm == 0) return;
    std::vector<int> members;
    for (std::size_t j = 0; j < dead_.size() && j / 64 < m->failed.size(); ++j)
      if (m->failed[j / 64] >> (j % 64) & 1) members.push_back(static_cast<int>(j));
    if (std::find(members.begin(), members.end(), f_.rank()) == members.end() ||
        std::find(members.begin(), members.end(), src) == members.end()) {
      f_.abort(make_error_code(errc::protocol_violation), "rank " + std::to_string(src) + " admitted this rank to a communicator without it or itself");
      return;
    }
    admission_.emplace(m->comm, std::move(members));
    return;
  }
  // A replacement's predecessor's communicators are not its: what comes for them is stale.
  if (!alive_in(m->comm, src)) return;
  if (m->kind == control_message::revoke) return revoke(m->comm, told_error(m->code), printable(m->text), true);
  const key k{m->comm, m->n};
  if (auto it = sessions_.find(k); it != sessions_.end()) {
    auto s = it->second;
    return s->message(src, *m);
  }
  if (was_finished(k)) return;
  if (++early_count_ > max_early) {
    f_.abort(make_error_code(errc::limit_exceeded),
             "more than " + std::to_string(max_early) + " agreement messages came for agreements this rank has not begun");
    return;
  }
  early_[k].emplace_back(src, std::move(*m));
}

bool survival::was_finished(key k) const {
  const auto it = finished_.find(k.first);
  return it != finished_.end() && std::find(it->second.begin(), it->second.end(), k.second) != it->second.end();
}

void survival::agree(std::uint32_t id, std::uint32_t n, std::vector<int> members, agreement mine,
                     std::chrono::milliseconds timeout, agreement_done done) {
  auto refuse = [&](const std::string& why) {
    note("agree: " + why);
    done(optcast::fail(errc::invalid_argument));
  };
  const auto me = std::find(members.begin(), members.end(), f_.rank());
  if (me == members.end()) return refuse("this rank is not among the members");
  if (members.size() > 64 * control_message::max_failed_words) return refuse("more members than an agreement takes");
  if (mine.words.size() > control_message::max_words)
    return refuse(std::to_string(mine.words.size()) + " words, more than " + std::to_string(control_message::max_words));
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 || sorted.back() >= f_.size())
    return refuse("the members are not distinct ranks of the job");
  const key k{id, n};
  if (sessions_.count(k) || was_finished(k))
    return refuse("agreement " + std::to_string(n) + " of communicator " + std::to_string(id) + " was made already");
  const int index = static_cast<int>(me - members.begin());
  auto s = std::make_shared<agreement_session>(*this, id, n, std::move(members), index, std::move(mine), timeout, std::move(done));
  sessions_[k] = s;
  auto here = alive_;
  s->begin();
  if (!*here) return;
  if (auto it = early_.find(k); it != early_.end()) {
    auto early = std::move(it->second);
    early_.erase(it);
    early_count_ -= std::min(early_count_, early.size());
    for (auto& [src, m] : early) {
      if (!alive_in(k.first, src)) continue;
      s->message(src, m);
      if (!*here) return;
    }
  }
}

void survival::finished(std::uint32_t id, std::uint32_t n) {
  sessions_.erase({id, n});
  auto& list = finished_[id];
  list.push_back(n);
  if (list.size() > 16) list.pop_front();
}

void survival::end(std::error_code ec, const std::string& why) {
  std::vector<std::shared_ptr<agreement_session>> sessions;
  for (auto& [k, s] : sessions_) sessions.push_back(s);
  auto here = alive_;
  for (auto& s : sessions) {
    s->fail(ec, why);
    if (!*here) return;
  }
}

std::string survival::waiting() const {
  std::string out;
  for (const auto& [k, s] : sessions_)
    if (auto w = s->waiting(); !w.empty()) out += "; " + w;
  return out;
}

}  // namespace optcast::detail
