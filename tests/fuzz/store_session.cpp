// The store's protocol as a whole: clients that connect, say hello, join, send any
// message, and disconnect, in any order, driven through the same judgement and table the
// store runs. Properties: only a hello that names this protocol, the job's security and
// a rank in range that is neither connected nor done joins, and into the slot of a rank
// the survivors went on without (excuse) only a replacement, a replacement only there;
// nothing is sent to a rank that has not joined (or has left); a get answers the latest
// set; farewell goes out only once every rank has said goodbye or is excused, with no
// failure, and never together with a failure; the job's first failure is kept, except
// that a death gives way to a reported reason and an excused rank's failure is
// forgotten; an excused rank's death fails nothing, an admitted replacement counts again;
// a stall inquiry never names a rank that answered its ping or reported the stall itself,
// and tells "nobody is stuck" only to ranks that reported one.
#include <map>

#include "fuzz.hpp"
#include "bootstrap/store_protocol.hpp"

using namespace optcast::store::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  optcast::fuzz::input in{{data, size}};
  const int n = 1 + in.byte() % 8;
  const bool secret = in.byte() & 1;
  std::vector<std::vector<message>> got(static_cast<std::size_t>(n));
  std::vector<bool> member(static_cast<std::size_t>(n));
  std::map<std::string, std::string> latest;
  bool farewell = false;
  std::vector<bool> alive(static_cast<std::size_t>(n)), stalled(static_cast<std::size_t>(n));  // in the open inquiry
  table t(n, [&](int r, const message& m) {
    FUZZ_REQUIRE(r >= 0 && r < n && member[static_cast<std::size_t>(r)]);
    if (m.type == m_verdict) FUZZ_REQUIRE(stalled[static_cast<std::size_t>(r)]);
    got[static_cast<std::size_t>(r)].push_back(m);
  });
  while (!in.rest.empty()) {
    const auto failure_before = t.failure();
    const bool was_inquiring = t.inquiry() != 0;
    bool reported = false;  // the step was a rank's own failure report
    const std::uint8_t what = in.byte();
    const int r = what % 8;
    if ((what >> 3) % 4 == 0) {  // a connection's first message: its hello
      auto d = decode(std::as_bytes(in.rest), max_hello_field);
      if (!d || !*d) return 0;
      in.rest = in.rest.subspan((*d)->used);
      const message& h = (*d)->msg;
      if (judge_hello(h, secret)) continue;
      FUZZ_REQUIRE(h.type == m_hello && h.key.starts_with(magic) && h.val.size() == (secret ? 32u : 0u));
      // As the store's server judges it: a member of the job, and into a failed rank's
      // slot only a replacement, a replacement only there.
      if (judge_member(h, n, [&](int x) { return t.taken(x); })) continue;
      const int who = static_cast<int>(h.arg);
      if (t.judge_rejoin(who, rejoins(h))) continue;
      FUZZ_REQUIRE(h.id == static_cast<std::uint32_t>(n) && who >= 0 && who < n && !t.joined(who) && !t.said_bye(who));
      const bool failed_slot = t.excused(who);  // died, or never came, and the others went on without it
      FUZZ_REQUIRE(rejoins(h) == failed_slot);
      member[static_cast<std::size_t>(who)] = true;
      t.join(who);
      FUZZ_REQUIRE(t.replacing(who) == failed_slot);
      if (t.failed()) FUZZ_REQUIRE(!got[static_cast<std::size_t>(who)].empty() && got[static_cast<std::size_t>(who)].back().type == m_job_failed);
    } else if ((what >> 3) % 4 == 1) {  // a connection closes
      if (r >= n || !t.joined(r)) continue;
      member[static_cast<std::size_t>(r)] = false;
      const bool bye = t.said_bye(r), excused = t.excused(r);
      const auto before = t.failure();
      t.leave(r);
      // A death fails the job, unless the survivors went on without the rank (or it is a
      // replacement not yet admitted): then it fails nothing.
      if (excused) FUZZ_REQUIRE(t.failure() == before);
      else if (!bye) FUZZ_REQUIRE(t.failed() && (!before || t.failure() == before));
    } else if ((what >> 3) % 4 == 3) {  // the store's inquiry window passes
      t.conclude();
    } else {  // a message from a joined rank
      auto d = decode(std::as_bytes(in.rest), max_field);
      if (!d || !*d) return 0;
      in.rest = in.rest.subspan((*d)->used);
      if (r >= n || !t.joined(r)) continue;
      const message& m = (*d)->msg;
      const auto before = t.failure();
      const std::size_t answers = got[static_cast<std::size_t>(r)].size();
      if (m.type == m_stalled) stalled[static_cast<std::size_t>(r)] = alive[static_cast<std::size_t>(r)] = true;
      reported = m.type == m_failed;
      if (m.type == m_pong && m.id == t.inquiry() && t.inquiry()) alive[static_cast<std::size_t>(r)] = true;
      if (!t.on_message(r, m)) {
        member[static_cast<std::size_t>(r)] = false;
        t.leave(r);
        continue;
      }
      if (m.type == m_set) latest[m.key] = m.val;
      if (m.type == m_get && latest.count(m.key)) {
        FUZZ_REQUIRE(got[static_cast<std::size_t>(r)].size() == answers + 1);
        const message& a = got[static_cast<std::size_t>(r)].back();
        FUZZ_REQUIRE(a.type == m_value && a.id == m.id && a.val == latest[m.key]);
      }
      if (m.type == m_admit) FUZZ_REQUIRE(!t.excused(r) && !t.replacing(r));  // a member again
      if (m.type == m_excuse && before && t.failure() != before)  // the failure was an excused rank's: forgotten
        FUZZ_REQUIRE(!t.failed() && before->arg < static_cast<std::uint32_t>(n) && t.excused(static_cast<int>(before->arg)));
      else if (before && before->id != lost_code) FUZZ_REQUIRE(t.failure() == before);  // the first reason stays
    }
    // An inquiry that ended in a failure names a rank that neither answered nor stalled.
    if (was_inquiring && !t.inquiry() && !reported && t.failure() != failure_before && t.failure()->id == timeout_code)
      FUZZ_REQUIRE(t.failure()->arg < static_cast<std::uint32_t>(n) && !alive[t.failure()->arg]);
    if (!t.inquiry()) {  // concluded (or none open): the next inquiry starts afresh
      std::fill(alive.begin(), alive.end(), false);
      std::fill(stalled.begin(), stalled.end(), false);
    }
    for (int x = 0; x < n; ++x)
      for (const auto& m : got[static_cast<std::size_t>(x)])
        if (m.type == m_farewell) farewell = true;
    if (farewell) {
      FUZZ_REQUIRE(!t.failed());
      for (int x = 0; x < n; ++x) FUZZ_REQUIRE(t.said_bye(x) || t.excused(x));
    }
  }
  return 0;
}
