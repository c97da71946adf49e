// The ranks of optcast-bench chaos --shrink (and --grow): a survivor shrinks until a round
// on the new communicator succeeds everywhere; with --grow it then grows again, taking in
// the replacement the benchmark starts for the victim, and runs rounds on the grown
// communicator the same way; the replacement waits to be admitted and joins those rounds.
// A round is a checked allreduce of the members' job ranks, --ops-after random verified
// collectives, and an agreement that all went well (the ULFM pattern: a round that failed
// anywhere is shrunk again everywhere, as every member holds the same communicator).
#include <chrono>
#include <deque>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <optcast/optcast.hpp>

#include "chaos_calls.hpp"
#include "chaos_shrink.hpp"

namespace optcast::bench {

std::string members_of(const communicator& c) {
  std::string s;
  for (int r = 0; r < c.size(); ++r) s += (r ? "," : "") + std::to_string(job_rank(c, r));
  return s;
}

bool holds(const std::string& members, int r) {
  std::stringstream ss(members);
  std::string m;
  while (std::getline(ss, m, ','))
    if (m == std::to_string(r)) return true;
  return false;
}

namespace {

bool error_line(std::ostream& out, std::error_code ec, const std::string& what, const std::string& detail) {
  out << "error " << ec.value() << " " << now_ns() << " " << what << ": " << describe(ec, detail) << "\n" << std::flush;
  return false;
}

// One round on c: 0 all went well on every member, 1 not (shrink c and try again), 2 an
// error this rank cannot go on from (reported), 3 a wrong result. `usable` (once): the
// time of the round's allreduce, right, is written as `usable_word`.
int one_round(communicator& c, std::uint64_t seed, const collective_options& o, long ops_after, std::ostream& out, bool& usable,
              const char* usable_word, int round) {
  std::int64_t v = job_rank(c, c.rank()), expected = 0;
  for (int r = 0; r < c.size(); ++r) expected += job_rank(c, r);
  bool ok = static_cast<bool>(run(c, allreduce(c, std::span<const std::int64_t>(&v, 1), std::span<std::int64_t>(&v, 1), ops::sum, o)));
  if (ok && v != expected) return out << "wrong allreduce on the communicator of round " << round << "\n", 3;
  if (ok && !usable) {
    usable = true;
    out << usable_word << " " << now_ns() << " " << round << "\n" << std::flush;
  }
  // The same calls on every member: drawn from what they all know alike.
  std::mt19937_64 again(seed ^ std::hash<std::string>{}(members_of(c)));
  std::error_code ec;
  for (long i = 0; ok && i < ops_after; ++i) {
    const int st = verified_call(c, again, i, o, out, ec);
    if (st == 3) return 3;
    ok = st == 0;
  }
  auto a = run(c, agree(c, ok ? 1 : 0));
  if (!a) return error_line(out, a.error(), "agree", c.last_error()), 2;
  return a->flag == 1 && a->failed.empty() ? 0 : 1;
}

// Whether every job rank of `ranks` is a member of c.
bool holds_all(const communicator& c, const std::vector<int>& ranks) {
  const auto m = members_of(c);
  return std::all_of(ranks.begin(), ranks.end(), [&](int r) { return holds(m, r); });
}

// Rounds on *cur until one succeeds everywhere and *cur holds every rank of `missing`
// (their replacements grown in); `kept` keeps each step's communicator. Writes "grown"
// at each growth, "grow-usable" at the first right allreduce with them all in, "regrown
// ROUND MEMBERS" at the end. 0, else 1 (an error, reported) or 3 (wrong).
int grow_rounds(std::deque<communicator>& kept, communicator*& cur, const std::vector<int>& missing, std::ostream& out, std::uint64_t seed,
                const collective_options& o, long ops_after, std::chrono::milliseconds grow_wait) {
  bool usable = false, again = false;
  for (int round = 1; round <= 8; ++round) {
    if (again) {
      auto s = run(*cur, shrink(*cur));
      if (!s) return error_line(out, s.error(), "shrink after a failed round", cur->last_error()), 1;
      kept.push_back(std::move(*s));
      cur = &kept.back();
    }
    again = true;
    int want = 0;
    for (int r : missing) want += !holds_all(*cur, {r});
    if (want > 0) {
      cur->options().timeout = grow_wait;  // grow waits as long for the replacements
      auto g = run(*cur, grow(*cur, want));
      if (!g && g.error() == make_error_code(errc::peer_lost)) continue;  // a member died: shrink, grow again
      if (!g) return error_line(out, g.error(), "grow", cur->last_error()), 1;
      kept.push_back(std::move(*g));
      cur = &kept.back();
      out << "grown " << now_ns() << " " << round << " " << members_of(*cur) << "\n" << std::flush;
    }
    const int st = one_round(*cur, seed, o, ops_after, out, usable, "grow-usable", round);
    if (st == 3) return 3;
    if (st == 2) return 1;
    if (st == 0 && holds_all(*cur, missing)) {
      out << "regrown " << now_ns() << " " << round << " " << members_of(*cur) << "\n" << std::flush;
      return 0;
    }
  }
  out << "error 0 " << now_ns() << " eight rounds of growing did not give a communicator that works\n";
  return 1;
}

int leave_job(communicator& c, std::ostream& out) {
  auto left = c.leave();
  out << "left " << (left ? std::string("ok") : describe(left.error(), c.failure_detail())) << "\n";
  return 0;
}

}  // namespace

// One rank of a shrinking trial. Its report: "fault NS WHY" when its first call fails,
// "usable NS ROUND" once a shrunk communicator's first allreduce is right, "done NS ROUND
// MEMBERS" once a round succeeded everywhere, then with --grow "growing NS" (and the file
// growing-RANK, for the benchmark to start the replacement) and grow_rounds' lines; "left
// ..." with the job's outcome; or "error CODE NS WHY", or "wrong ...". A replacement
// (OPTCAST_REJOIN=1) writes replacement-RANK.txt: "joined NS", "admitted NS MEMBERS", then
// grow_rounds' lines.
int shrink_rank_main(const std::string& fabric, const std::string& store, const std::string& report, std::uint64_t seed, int timeout_ms,
                     long ops_after, bool growing) {
  if (!store.empty()) ::setenv("OPTCAST_STORE", store.c_str(), 1);
  const bool replacement = job_config::from_env().rejoin;
  auto job = join(fabric);
  const std::string me = std::to_string(job.rank());
  std::ofstream out(report + (replacement ? "/replacement-" : "/rank-") + me + ".txt");
  const collective_options o{.timeout = std::chrono::milliseconds(timeout_ms)};
  const auto grow_wait = std::chrono::milliseconds(timeout_ms) + std::chrono::seconds(20);
  std::deque<communicator> kept;  // each step's, kept: references to them stay valid
  communicator* cur = &job;
  if (replacement) {
    out << "joined " << now_ns() << "\n" << std::flush;
    auto a = run(job, admitted(job, grow_wait));
    if (!a) return error_line(out, a.error(), "admitted", job.last_error()), 1;
    kept.push_back(std::move(*a));
    cur = &kept.back();
    out << "admitted " << now_ns() << " " << members_of(*cur) << "\n" << std::flush;
    const int rc = grow_rounds(kept, cur, {}, out, seed, o, ops_after, grow_wait);
    return rc ? rc : leave_job(*cur, out);
  }
  std::ofstream(report + "/ready-" + me);
  std::mt19937_64 rng(seed);
  std::error_code ec;
  for (long i = 0;; ++i) {
    const int st = verified_call(job, rng, i, o, out, ec);
    if (st == 3) return 3;
    if (st == 1) break;
  }
  out << "fault " << now_ns() << " " << describe(ec, job.failure_detail()) << "\n" << std::flush;
  bool usable = false;
  for (int round = 1;; ++round) {
    if (round > 8) {
      out << "error 0 " << now_ns() << " eight rounds of shrinking did not give a communicator that works\n";
      return 1;
    }
    auto s = run(*cur, shrink(*cur));
    if (!s) return error_line(out, s.error(), "shrink", cur->last_error()), 1;
    kept.push_back(std::move(*s));
    cur = &kept.back();
    const int st = one_round(*cur, seed ^ static_cast<std::uint64_t>(round), o, ops_after, out, usable, "usable", round);
    if (st == 3) return 3;
    if (st == 2) return 1;
    if (st == 0) {
      out << "done " << now_ns() << " " << round << " " << members_of(*cur) << "\n" << std::flush;
      break;
    }
  }
  if (growing) {
    std::vector<int> missing;  // the ranks the survivors went on without: their replacements come
    for (int r = 0; r < job.size(); ++r)
      if (!holds_all(*cur, {r})) missing.push_back(r);
    out << "growing " << now_ns() << "\n" << std::flush;
    std::ofstream(report + "/growing-" + me);
    if (const int rc = grow_rounds(kept, cur, missing, out, seed, o, ops_after, grow_wait)) return rc;
  }
  return leave_job(*cur, out);
}

}  // namespace optcast::bench
