#include "traff/circulant_check.hpp"

#include <algorithm>
#include <vector>

#include "traff/circulant.hpp"

namespace optcast::circulant {

namespace {

std::string at(int p, int r, int k) {
  return "p=" + std::to_string(p) + " r=" + std::to_string(r) + " k=" + std::to_string(k);
}

}  // namespace

schedule_tables compute_tables(int p) {
  schedule_tables t;
  const skips s(p);
  t.p = p;
  t.q = s.q();
  const auto P = static_cast<std::size_t>(p);
  const auto Q = static_cast<std::size_t>(t.q);
  t.baseblock.resize(P);
  t.recv.resize(P * Q);
  t.send.resize(P * Q);
  for (int r = 0; r < p; ++r) {
    const auto off = static_cast<std::size_t>(r) * Q;
    t.baseblock[static_cast<std::size_t>(r)] = baseblock(s, r);
    recv_schedule(s, r, {t.recv.data() + off, Q});
    int v = 0;
    send_schedule(s, r, {t.send.data() + off, Q}, &v);
    t.max_violations = std::max(t.max_violations, v);
  }
  return t;
}

condition_report check_conditions(int p) { return check_conditions(compute_tables(p)); }

condition_report check_conditions(const schedule_tables& t) {
  condition_report rep;
  const int p = t.p, q = t.q;
  const skips s(p);
  if (q == 0) return rep;
  const auto Q = static_cast<std::size_t>(q);
  rep.max_send_violations = t.max_violations;
  if (t.max_violations > 4)
    rep.failure = "p=" + std::to_string(p) + ": " + std::to_string(t.max_violations) +
                  " send-schedule violations at one rank (Theorem 3 allows 4)";
  const auto& recv = t.recv;
  const auto& send = t.send;
  const auto& base = t.baseblock;
  auto R = [&](int r, int k) { return recv[static_cast<std::size_t>(r) * Q + static_cast<std::size_t>(k)]; };
  auto S = [&](int r, int k) { return send[static_cast<std::size_t>(r) * Q + static_cast<std::size_t>(k)]; };
  for (int r = 0; r < p && !rep.failure; ++r) {
    const int b = base[static_cast<std::size_t>(r)];
    for (int k = 0; k < q && !rep.failure; ++k) {
      if (R(r, k) != S(s.from(r, k), k))
        rep.failure = at(p, r, k) + ": condition 1, recvblock differs from the from-processor's sendblock";
      else if (S(r, k) != R(s.to(r, k), k))
        rep.failure = at(p, r, k) + ": condition 2, sendblock differs from the to-processor's recvblock";
    }
    if (rep.failure) break;
    // Condition 3: q different blocks, {-1..-q} without b - q, plus b (the root: {-1..-q}).
    std::vector<int> got, want;
    for (int k = 0; k < q; ++k) got.push_back(R(r, k));
    for (int j = 1; j <= q; ++j)
      if (r == 0 || -j != b - q) want.push_back(-j);
    if (r != 0) want.push_back(b);
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    if (r != 0 && (b < 0 || b >= q))
      rep.failure = at(p, r, 0) + ": baseblock " + std::to_string(b) + " outside [0, q)";
    else if (got != want)
      rep.failure = at(p, r, 0) + ": condition 3, the receive blocks are not q different blocks with the baseblock";
    if (rep.failure || r == 0) continue;  // the root holds every block from the start
    // Condition 4: only what was received earlier (or the baseblock, a phase ago) is sent.
    for (int k = 0; k < q && !rep.failure; ++k) {
      bool ok = S(r, k) == b - q;
      for (int j = 0; j < k && !ok; ++j) ok = S(r, k) == R(r, j);
      if (!ok) rep.failure = at(p, r, k) + ": condition 4, sends a block it has not received";
    }
  }
  return rep;
}

replay_report replay_broadcast(int p, int n) {
  replay_report rep;
  const skips s(p);
  const auto P = static_cast<std::size_t>(p);
  const auto N = static_cast<std::size_t>(n);
  std::vector<broadcast_plan> plans;
  plans.reserve(P);
  for (int r = 0; r < p; ++r) plans.emplace_back(s, r, n);
  std::vector<std::uint8_t> has(P * N, 0);
  std::fill_n(has.begin(), N, 1);  // the root
  std::vector<broadcast_plan::step> steps(P);
  std::vector<int> arrivals;
  const int first = plans.front().first_round(), end = plans.front().end_round();
  for (int i = first; i < end && !rep.failure; ++i) {
    for (int r = 0; r < p; ++r) {
      auto& pl = plans[static_cast<std::size_t>(r)];
      if (pl.first_round() != first || pl.end_round() != end) {
        rep.failure = "p=" + std::to_string(p) + ": ranks disagree on the rounds";
        return rep;
      }
      steps[static_cast<std::size_t>(r)] = pl.round(i);
    }
    arrivals.clear();
    for (int r = 0; r < p && !rep.failure; ++r) {
      const auto& st = steps[static_cast<std::size_t>(r)];
      const std::string where = "p=" + std::to_string(p) + " n=" + std::to_string(n) +
                                " round " + std::to_string(i) + " rank " + std::to_string(r);
      if (st.send_block >= 0) {
        ++rep.messages;
        const auto& peer = steps[static_cast<std::size_t>(st.to)];
        if (!has[static_cast<std::size_t>(r) * N + static_cast<std::size_t>(st.send_block)])
          rep.failure = where + ": sends block " + std::to_string(st.send_block) + " it does not have";
        else if (peer.recv_block != st.send_block || peer.from != r)
          rep.failure = where + ": sends block " + std::to_string(st.send_block) + " to " +
                        std::to_string(st.to) + ", which does not receive it";
      }
      if (st.recv_block >= 0) {
        const auto& peer = steps[static_cast<std::size_t>(st.from)];
        if (peer.send_block != st.recv_block || peer.to != r)
          rep.failure = where + ": waits for block " + std::to_string(st.recv_block) + " from " +
                        std::to_string(st.from) + ", which does not send it";
        arrivals.push_back(r);
      }
    }
    // Blocks received in a round may be sent on only in later rounds.
    for (int r : arrivals)
      has[static_cast<std::size_t>(r) * N + static_cast<std::size_t>(steps[static_cast<std::size_t>(r)].recv_block)] = 1;
    ++rep.rounds;
  }
  if (rep.failure) return rep;
  const int q = s.q();
  const int want = q == 0 ? 0 : n - 1 + q;
  if (rep.rounds != want)
    rep.failure = "p=" + std::to_string(p) + " n=" + std::to_string(n) + ": " +
                  std::to_string(rep.rounds) + " rounds, not n - 1 + q = " + std::to_string(want);
  for (std::size_t r = 0; r < P && !rep.failure; ++r)
    for (std::size_t b = 0; b < N && !rep.failure; ++b)
      if (!has[r * N + b])
        rep.failure = "p=" + std::to_string(p) + " n=" + std::to_string(n) + ": rank " +
                      std::to_string(r) + " misses block " + std::to_string(b) + " at the end";
  return rep;
}

}  // namespace optcast::circulant
