#include "store_protocol.hpp"

#include "optcast/fabric_base.hpp"

#include <charconv>

#include <cstring>
#include <utility>

#include "core/little_endian.hpp"

namespace optcast::store::proto {

std::string encode(const message& m) {
  std::string out(header_bytes + m.key.size() + m.val.size(), '\0');
  auto* p = reinterpret_cast<std::byte*>(out.data());
  wire::put_u32(p, static_cast<std::uint32_t>(out.size() - 4));
  p[4] = static_cast<std::byte>(m.type);
  wire::put_u32(p + 5, m.id);
  wire::put_u32(p + 9, m.arg);
  wire::put_u32(p + 13, static_cast<std::uint32_t>(m.key.size()));
  wire::put_u32(p + 17, static_cast<std::uint32_t>(m.val.size()));
  std::memcpy(out.data() + header_bytes, m.key.data(), m.key.size());
  std::memcpy(out.data() + header_bytes + m.key.size(), m.val.data(), m.val.size());
  return out;
}

result<header> decode_header(std::span<const std::byte, header_bytes> b, std::uint32_t field_limit) {
  header h;
  const std::uint32_t len = wire::get_u32(b.data());
  h.type = std::to_integer<std::uint8_t>(b[4]);
  h.id = wire::get_u32(b.data() + 5);
  h.arg = wire::get_u32(b.data() + 9);
  h.key_bytes = wire::get_u32(b.data() + 13);
  h.val_bytes = wire::get_u32(b.data() + 17);
  // In 64 bits: two lengths near 2^32 must not wrap into agreement.
  if (h.key_bytes > field_limit || h.val_bytes > field_limit ||
      std::uint64_t{len} != header_bytes - 4 + std::uint64_t{h.key_bytes} + h.val_bytes || h.type < m_hello || h.type > m_last)
    return fail(errc::protocol_violation);
  return h;
}

result<std::optional<decoded>> decode(std::span<const std::byte> in, std::uint32_t field_limit) {
  if (in.size() < header_bytes) return std::optional<decoded>();
  auto h = decode_header(in.first<header_bytes>(), field_limit);
  if (!h) return fail(h.error());
  const std::size_t total = header_bytes + std::size_t{h->key_bytes} + h->val_bytes;
  if (in.size() < total) return std::optional<decoded>();
  decoded d;
  d.msg.type = h->type;
  d.msg.id = h->id;
  d.msg.arg = h->arg;
  const char* body = reinterpret_cast<const char*>(in.data()) + header_bytes;
  d.msg.key.assign(body, h->key_bytes);
  d.msg.val.assign(body + h->key_bytes, h->val_bytes);
  d.used = total;
  return std::optional<decoded>(std::move(d));
}

namespace {
// The hello's key without its sealed_mark, and whether it had one; and without its
// rejoin_mark, which comes before it.
std::pair<std::string_view, bool> unsealed(std::string_view key) {
  if (key.ends_with(sealed_mark)) key = key.substr(0, key.size() - sealed_mark.size());
  else return {key.ends_with(rejoin_mark) ? key.substr(0, key.size() - rejoin_mark.size()) : key, false};
  return {key.ends_with(rejoin_mark) ? key.substr(0, key.size() - rejoin_mark.size()) : key, true};
}
}  // namespace

bool rejoins(const message& h) {
  std::string_view key = h.key;
  if (key.ends_with(sealed_mark)) key = key.substr(0, key.size() - sealed_mark.size());
  return key.ends_with(rejoin_mark);
}

std::optional<std::string> judge_hello(const message& h, bool store_has_secret) {
  if (h.type != m_hello) return "not an optcast store client (no hello)";
  const auto [key, sealed] = unsealed(h.key);
  const std::string_view spoken = key.substr(0, key.find('#'));
  if (spoken != magic) return "the client speaks '" + wire::printable(h.key) + "', this store " + std::string(magic);
  if (spoken.size() < key.size()) {
    std::uint64_t id = 0;
    const auto* first = key.data() + spoken.size() + 1;
    auto [end, ec] = std::from_chars(first, key.data() + key.size(), id);
    if (ec != std::errc{} || end != key.data() + key.size() || id == 0)
      return "the client's hello names no job ('" + wire::printable(h.key) + "')";
  }
  if (store_has_secret && h.val.size() != 32) return "this job has a secret (OPTCAST_SECRET) and the client did not offer one";
  if (!store_has_secret && !h.val.empty())
    return "the client has a job secret and this store has none (OPTCAST_SECRET set for some ranks only?)";
  return std::nullopt;
}

std::string hello_key(std::uint64_t job_id, bool sealed, bool rejoin) {
  return (job_id ? std::string(magic) + "#" + std::to_string(job_id) : std::string(magic)) + (rejoin ? std::string(rejoin_mark) : "") +
         (sealed ? std::string(sealed_mark) : "");
}

std::optional<std::string> judge_job(const message& h, std::uint64_t job_id) {
  const std::string_view key = unsealed(h.key).first;
  const auto hash = key.find('#');
  if (hash == std::string::npos) return std::nullopt;
  const std::string theirs(key.substr(hash + 1));
  if (theirs == std::to_string(job_id)) return std::nullopt;
  return "rank " + std::to_string(h.arg) + " belongs to job " + theirs +
         ", and this store serves another (two jobs sent to one store? give each its own OPTCAST_STORE)";
}

std::optional<std::string> judge_sealing(const message& h, bool store_seals) {
  const bool theirs = unsealed(h.key).second;
  if (theirs == store_seals) return std::nullopt;
  return theirs ? "rank " + std::to_string(h.arg) + " encrypts its store traffic (OPTCAST_ENCRYPT=1) and this store does not: set OPTCAST_ENCRYPT alike for every rank"
                : "this store encrypts its traffic (OPTCAST_ENCRYPT=1) and rank " + std::to_string(h.arg) + " does not: set OPTCAST_ENCRYPT alike for every rank";
}

std::optional<std::string> judge_member(const message& h, int size, const std::function<bool(int)>& taken) {
  if (h.id != static_cast<std::uint32_t>(size))
    return "rank " + std::to_string(h.arg) + " expects a job of " + std::to_string(h.id) + " ranks, this store serves " + std::to_string(size);
  if (h.arg >= static_cast<std::uint32_t>(size)) return "rank " + std::to_string(h.arg) + " out of range for " + std::to_string(size) + " ranks";
  if (taken(static_cast<int>(h.arg))) return "rank " + std::to_string(h.arg) + " is already connected, or has finished (two processes with the same rank?)";
  return std::nullopt;
}

table::table(int size, sender send)
    : send_(std::move(send)),
      joined_(static_cast<std::size_t>(size)),
      bye_(static_cast<std::size_t>(size)),
      ever_joined_(static_cast<std::size_t>(size)),
      excused_(static_cast<std::size_t>(size)),
      replacing_(static_cast<std::size_t>(size)),
      ready_(static_cast<std::size_t>(size)),
      stalled_(static_cast<std::size_t>(size)),
      answered_(static_cast<std::size_t>(size)),
      call_(static_cast<std::size_t>(size)),
      last_call_(static_cast<std::size_t>(size)) {
  held_.resize(static_cast<std::size_t>(size));
}

bool table::charge(int rank, std::size_t bytes) {
  auto& h = held_[static_cast<std::size_t>(rank)];
  if (h + bytes <= client_limit) {
    h += bytes;
    return true;
  }
  message m{m_job_failed, static_cast<std::uint32_t>(errc::limit_exceeded), static_cast<std::uint32_t>(rank), {},
            "rank " + std::to_string(rank) + " would hold " + std::to_string(h + bytes) + " B in the job's store, more than a rank may (" +
                std::to_string(client_limit) + " B)"};
  send_(rank, m);
  fail_job(rank, std::move(m), true);
  return false;
}

std::optional<std::string> table::judge_rejoin(int rank, bool rejoin) const {
  // Excused: the survivors went on without it, whether it died or never came.
  const bool failed_slot = excused_[static_cast<std::size_t>(rank)];
  if (rejoin && !failed_slot)
    return "rank " + std::to_string(rank) + " comes as a replacement (OPTCAST_REJOIN), and it is not a rank the survivors went on without";
  if (!rejoin && failed_slot)
    return "rank " + std::to_string(rank) + " failed and the survivors went on without it: a process in its place comes as a replacement (OPTCAST_REJOIN=1)";
  return std::nullopt;
}

void table::join(int rank) {
  // Into a failed rank's slot only a replacement comes (judge_rejoin).
  if (excused(rank)) replacing_[static_cast<std::size_t>(rank)] = true;
  joined_[static_cast<std::size_t>(rank)] = true;
  ever_joined_[static_cast<std::size_t>(rank)] = true;
  if (failure_) send_(rank, *failure_);
}

void table::misfit(std::uint32_t rank, const std::string& why) {
  fail_job(-1, message{m_job_failed, static_cast<std::uint32_t>(errc::invalid_argument), rank, {}, why.substr(0, max_failure_text)}, true);
}

void table::missing_after(std::chrono::milliseconds waited) {
  std::string names;
  int n = 0;
  // An excused rank is not missing: the survivors went on without it.
  for (int r = 0; r < size(); ++r)
    if (!ever_joined_[static_cast<std::size_t>(r)] && !excused_[static_cast<std::size_t>(r)] && ++n <= 8)
      names += (names.empty() ? "" : ", ") + std::to_string(r);
  if (n == 0) return;
  if (n > 8) names += " and " + std::to_string(n - 8) + " more";
  fail_job(-1,
           message{m_job_failed, static_cast<std::uint32_t>(errc::timeout), static_cast<std::uint32_t>(-1), {},
                   (n == 1 ? "rank " : "ranks ") + names + " did not join the job within " + std::to_string(waited.count()) +
                       " ms (not started, crashed while starting, or told another store or size)"},
           true);
}

// Records the job's first failure (a lost connection gives way to a report that may say
// why) and passes it on to every rank but `from`; `tell` false: they were told otherwise
// (peer_lost), only ranks joining later or saying bye get it.
void table::fail_job(int from, message m, bool tell) {
  // What an excused rank does, or what is said of it, no longer fails the job.
  const auto of = [&](std::uint32_t r) { return r < static_cast<std::uint32_t>(size()) && excused(static_cast<int>(r)); };
  if ((from >= 0 && excused(from)) || of(m.arg)) return;
  if (failure_ && (failure_->id != lost_code || m.id == lost_code)) return;
  // Every rank has said goodbye without a failure: the job succeeded, and every rank was
  // told so. A report after its own goodbye (no honest client sends one) changes nothing.
  if (!failure_ && all_done()) return;
  failure_ = std::move(m);
  if (!tell) return;
  for (int r = 0; r < size(); ++r)
    if (joined(r) && r != from) send_(r, *failure_);
}

bool table::on_message(int rank, const message& m) {
  switch (m.type) {
    case m_set: {
      const auto found = kv_.find(m.key);
      const std::size_t cost = m.key.size() + m.val.size() + entry_overhead;
      // What the key held before is its last setter's no longer.
      if (found != kv_.end()) refund(found->second.owner, m.key.size() + found->second.val.size() + entry_overhead);
      if (!charge(rank, cost)) {
        if (found != kv_.end()) kv_.erase(found);
        return false;
      }
      auto& slot = kv_[m.key];
      slot = {m.val, rank};
      send_(rank, {m_ok, m.id, 0, {}, {}});
      if (auto it = waiting_.find(m.key); it != waiting_.end()) {
        auto list = std::move(it->second);
        waiting_.erase(it);
        for (auto& [w, id] : list) {
          refund(w, m.key.size() + entry_overhead);
          send_(w, {m_value, id, 0, {}, slot.val});
        }
      }
      break;
    }
    case m_get:
      if (auto it = kv_.find(m.key); it != kv_.end()) {
        send_(rank, {m_value, m.id, 0, {}, it->second.val});
      } else {
        if (!charge(rank, m.key.size() + entry_overhead)) return false;
        waiting_[m.key].emplace_back(rank, m.id);
      }
      break;
    case m_failed:
      fail_job(rank, message{m_job_failed, m.arg, static_cast<std::uint32_t>(rank), {}, m.val.substr(0, max_failure_text)}, true);
      break;
    case m_bye:
      if (bye_[static_cast<std::size_t>(rank)]) return false;
      bye_[static_cast<std::size_t>(rank)] = true;
      if (m.key.size() == call_signature::wire_bytes) last_call_[static_cast<std::size_t>(rank)] = {m.arg, m.key};
      if (failure_) {
        send_(rank, *failure_);
      } else if (all_done()) {
        for (int r = 0; r < size(); ++r)
          if (joined(r)) send_(r, {m_farewell, 0, 0, {}, {}});
      }
      break;
    case m_excuse:
      if (!excuse(rank, m.val)) return false;
      break;
    case m_rejoin:  // a replacement, ready: the members may take it in
      if (!replacing(rank) || ready_[static_cast<std::size_t>(rank)]) return false;
      ready_[static_cast<std::size_t>(rank)] = true;
      for (int r = 0; r < size(); ++r)
        if (joined(r) && r != rank && !excused(r)) send_(r, {m_rejoined, 0, static_cast<std::uint32_t>(rank), {}, {}});
      break;
    case m_admit:  // the replacement is a member again: its death and goodbye count
      if (!replacing(rank) || !ready_[static_cast<std::size_t>(rank)]) return false;
      replacing_[static_cast<std::size_t>(rank)] = ready_[static_cast<std::size_t>(rank)] = false;
      excused_[static_cast<std::size_t>(rank)] = false;
      break;
    case m_stalled:
      if (failure_) {
        send_(rank, *failure_);
        return true;
      }
      stalled_[static_cast<std::size_t>(rank)] = true;
      if (!inquiring_) {
        inquiring_ = true;
        ++inquiry_;
        stalled_seq_ = m.arg;
        for (int r = 0; r < size(); ++r)
          if (joined(r) && !stalled_[static_cast<std::size_t>(r)]) send_(r, {m_ping, inquiry_, stalled_seq_, {}, {}});
      }
      if (m.arg == stalled_seq_ && m.key.size() == call_signature::wire_bytes) call_[static_cast<std::size_t>(rank)] = m.key;
      break;
    case m_pong:
      if (inquiring_ && m.id == inquiry_) {
        answered_[static_cast<std::size_t>(rank)] = true;
        if (m.key.size() == call_signature::wire_bytes) call_[static_cast<std::size_t>(rank)] = m.key;
      }
      break;
    default:
      return false;
  }
  // Every rank accounted for: no need to wait out the window.
  if (inquiring_) {
    bool all = true;
    for (int r = 0; r < size(); ++r)
      if (!stalled_[static_cast<std::size_t>(r)] && !answered_[static_cast<std::size_t>(r)] && !bye_[static_cast<std::size_t>(r)] &&
          !excused_[static_cast<std::size_t>(r)])
        all = false;
    if (all) conclude();
  }
  return true;
}

std::string table::differing_calls() const {
  int first = -1;
  std::string seen;
  const auto sig = [](const std::string& b) { return call_signature::decode(reinterpret_cast<const std::byte*>(b.data())); };
  for (int r = 0; r < size(); ++r) {
    const auto R = static_cast<std::size_t>(r);
    const std::string& mine = !call_[R].empty() ? call_[R] : last_call_[R].first == stalled_seq_ ? last_call_[R].second : call_[R];
    if (mine.empty() || sig(mine).empty()) continue;
    if (first < 0) {
      first = r;
      seen = mine;
    } else if (mine != seen) {
      return called_differently(stalled_seq_, calls_of(r, sig(mine), first, sig(seen)) + " (found by the store when the call stalled)");
    }
  }
  return {};
}

void table::conclude() {
  if (!inquiring_) return;
  inquiring_ = false;
  const std::string differ = differing_calls();
  std::fill(call_.begin(), call_.end(), std::string());
  if (!differ.empty() && !failure_) {
    fail_job(-1, message{m_job_failed, static_cast<std::uint32_t>(errc::call_mismatch), static_cast<std::uint32_t>(-1), {}, differ.substr(0, max_failure_text)}, true);
    std::fill(stalled_.begin(), stalled_.end(), false);
    std::fill(answered_.begin(), answered_.end(), false);
    return;
  }
  std::string silent, waiting;
  int first = -1;
  for (int r = 0; r < size(); ++r) {
    const auto R = static_cast<std::size_t>(r);
    if (stalled_[R]) {
      waiting += (waiting.empty() ? "" : ", ") + std::to_string(r);
    } else if (!answered_[R] && !bye_[R] && !excused_[R]) {
      silent += (silent.empty() ? "" : ", ") + std::to_string(r);
      if (first < 0) first = r;
    }
  }
  if (first >= 0 && !failure_) {
    const bool one = silent.find(',') == std::string::npos;
    fail_job(-1,
             message{m_job_failed, timeout_code, static_cast<std::uint32_t>(first), {},
                     (one ? "rank " : "ranks ") + silent + " stopped responding: no answer to the store within " + std::to_string(inquiry_window.count()) + " ms while rank" +
                         (waiting.find(',') == std::string::npos ? " " : "s ") + waiting + " waited in collective " + std::to_string(stalled_seq_) +
                         " near its deadline (stopped, hung, or not calling it)"},
             true);
  } else if (!failure_) {
    for (int r = 0; r < size(); ++r)
      if (stalled_[static_cast<std::size_t>(r)] && joined(r)) send_(r, {m_verdict, inquiry_, 0, {}, {}});
  }
  std::fill(stalled_.begin(), stalled_.end(), false);
  std::fill(answered_.begin(), answered_.end(), false);
}

void table::leave(int rank) {
  joined_[static_cast<std::size_t>(rank)] = false;
  stalled_[static_cast<std::size_t>(rank)] = false;
  for (auto& w : waiting_)  // not a structured binding: clang 14 cannot capture one
    std::erase_if(w.second, [&](auto& e) {
      if (e.first != rank) return false;
      refund(rank, w.first.size() + entry_overhead);
      return true;
    });
  std::erase_if(waiting_, [](auto& e) { return e.second.empty(); });
  if (replacing(rank)) {
    // A replacement not yet admitted fails nothing, but the members may be taking it in.
    replacing_[static_cast<std::size_t>(rank)] = false;
    const bool ready = ready_[static_cast<std::size_t>(rank)];
    ready_[static_cast<std::size_t>(rank)] = false;
    if (!ready) return;
    for (int r = 0; r < size(); ++r)
      if (joined(r) && !excused(r)) send_(r, {m_peer_lost, 0, static_cast<std::uint32_t>(rank), {}, {}});
    return;
  }
  if (bye_[static_cast<std::size_t>(rank)] || excused(rank)) return;
  for (int r = 0; r < size(); ++r)
    if (joined(r)) send_(r, {m_peer_lost, 0, static_cast<std::uint32_t>(rank), {}, {}});
  fail_job(-1, message{m_job_failed, lost_code, static_cast<std::uint32_t>(rank), {},
                       "rank " + std::to_string(rank) + " died (its store connection closed without goodbye)"},
           false);
}

bool table::all_done() const noexcept {
  for (int r = 0; r < size(); ++r)
    if (!bye_[static_cast<std::size_t>(r)] && !excused_[static_cast<std::size_t>(r)]) return false;
  return true;
}

bool table::excuse(int from, const std::string& list) {
  std::vector<int> ranks;
  for (std::size_t at = 0; at < list.size();) {
    const auto comma = std::min(list.find(',', at), list.size());
    const std::string one = list.substr(at, comma - at);
    if (one.empty() || one.size() > 9 || one.find_first_not_of("0123456789") != std::string::npos) return false;
    const int r = std::stoi(one);
    if (r >= size() || r == from) return false;  // a rank does not excuse itself
    ranks.push_back(r);
    at = comma + 1;
  }
  for (int r : ranks) excused_[static_cast<std::size_t>(r)] = true;
  // The job's failure was one of theirs: it is forgotten, and the job goes on.
  if (failure_ && failure_->arg < static_cast<std::uint32_t>(size()) && excused(static_cast<int>(failure_->arg))) failure_.reset();
  if (!failure_ && all_done())
    for (int r = 0; r < size(); ++r)
      if (joined(r)) send_(r, {m_farewell, 0, 0, {}, {}});
  return true;
}

}  // namespace optcast::store::proto
