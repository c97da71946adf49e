// The times the papers prove for the registry's rows (registry.cpp), as the simulator
// measures them: what `proves` of a row returns, shared by the rows that reach the same
// bound. Internal to lib/collectives.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "registry.hpp"
#include "alexandrov/loggp.hpp"
#include "karp/plans.hpp"
#include "traff/circulant.hpp"

namespace optcast::detail::proven {

inline bool logp_like(const sim::model& m) { return m.kind == sim::model_kind::logp || m.kind == sim::model_kind::postal; }
inline bool whole_postal(const sim::model& m) { return m.kind == sim::model_kind::postal && m.L == std::floor(m.L); }
inline std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

// ---- the bounds the papers prove, as the simulator measures them -----------------------

// Träff's Algorithm 1 and 7 and their reversals: n - 1 + ceil(log2 p) rounds per phase.
template <int Phases>
std::optional<proven_time> circulant_rounds(const sim::model& m, const run_shape& s) {
  if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
  return proven_time{Phases == 1 ? "n - 1 + ceil(log2 p)" : "2 (n - 1 + ceil(log2 p))",
               static_cast<double>(Phases * (s.blocks - 1 + circulant::ceil_log2(s.p))), proven_time::exact};
}

// The pipelined ring's rounds: a chain of p ranks passes n blocks in n + p - 2 rounds;
// the all-roots ring takes p - 1 steps of n blocks (fewer where blocks are empty).
inline std::optional<proven_time> chain_rounds(const sim::model& m, const run_shape& s) {
  if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
  return proven_time{"n + p - 2", static_cast<double>(s.blocks + s.p - 2), proven_time::exact};
}
template <int Phases>
std::optional<proven_time> ring_rounds(const sim::model& m, const run_shape& s) {
  if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
  return proven_time{Phases == 1 ? "(p - 1) n" : "2 (p - 1) n", static_cast<double>(Phases * (s.p - 1) * s.blocks),
                     proven_time::at_most};
}

// Recursive doubling: log2 of the largest power of two <= p, 2 more where p is not one.
inline int doubling_rounds(int p) {
  int m = 0;
  while ((2 << m) <= p) ++m;
  return m + ((1 << m) == p ? 0 : 2);
}
inline std::optional<proven_time> doubling_time(const sim::model& m, const run_shape& s) {
  if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
  return proven_time{"floor(log2 p), + 2 if p is not a power of 2", static_cast<double>(doubling_rounds(s.p)), proven_time::exact};
}

// Recursive halving then doubling: twice floor(log2 p), 2 more where p is not a power of two.
inline int halving_rounds(int p) { return 2 * doubling_rounds(p) - ((p & (p - 1)) == 0 ? 0 : 2); }
inline std::optional<proven_time> halving_time(const sim::model& m, const run_shape& s) {
  if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
  return proven_time{"2 floor(log2 p), + 2 if p is not a power of 2", static_cast<double>(halving_rounds(s.p)), proven_time::exact};
}

// The dissemination barrier: ceil(log_{k+1} p) rounds on k ports, the least any barrier
// takes (a rank learns of at most (k+1) times as many entries a round).
inline std::optional<proven_time> dissemination_time(const sim::model& m, const run_shape& s) {
  if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
  return proven_time{"ceil(log_{k+1} p)", static_cast<double>(algorithms::dissemination_rounds(s.p, m.ports)), proven_time::exact};
}

// Karp et al. 4.2: the combining broadcast's T steps for P = P(T) (B(P) by Theorem 4.3).
inline std::optional<proven_time> combining_time(const sim::model& m, const run_shape& s) {
  if (!whole_postal(m) || m.L < 1) return std::nullopt;
  const auto plan = logp::combining_for(s.p, static_cast<int>(m.L));
  return proven_time{"T (" + std::string(logp::to_string(plan->how)) + "; B(P) = " + num(logp::B(s.p, {m.L, 0, 1})) + ")",
                     static_cast<double>(plan->T)};
}
// Karp et al. 5: the least t in which n operands can be summed (Lemma 5.1).
inline std::optional<proven_time> summation_time(const sim::model& m, const run_shape& s) {
  if (!logp_like(m) || s.bytes < 1) return std::nullopt;
  const auto plan = logp::summation_schedule(static_cast<std::int64_t>(s.bytes), s.p, {m.L, m.o, m.g});
  return proven_time{"least t with N(t) >= n (Lemma 5.1)", plan.t, proven_time::exact};
}

// Karp et al. 4.1: L + 2o + g (n (P - 1) - 1), with g read as max(g, o), for n items
// per pair of ranks (an item cut from fewer bytes than blocks is empty and not sent).
inline std::optional<proven_time> staggered_time(const sim::model& m, const run_shape& s) {
  if (!logp_like(m) || s.p < 2 || s.bytes == 0) return std::nullopt;
  const auto n = static_cast<double>(std::min<std::uint64_t>(static_cast<std::uint64_t>(s.blocks), s.bytes));
  return proven_time{"L + 2o + g(n(P-1)-1)", m.L + 2 * m.o + std::max(m.g, m.o) * (n * (s.p - 1) - 1), proven_time::exact};
}

// Alexandrov et al.'s times for a scatter of k = bytes items per rank: the recurrences
// under any LogGP model; Table 2's closed forms in the simplified one (o = 0, G = 1).
template <algorithm A>
std::optional<proven_time> scatter_time(const sim::model& m, const run_shape& s) {
  if (m.kind == sim::model_kind::rounds) return std::nullopt;
  const auto k = static_cast<int>(s.bytes);
  if (A == algorithm::split_tree || A == algorithm::binomial)
    return proven_time{A == algorithm::split_tree ? "t^k(P), the A_t^k recurrence" : "the Binomial Tree recurrence (Lemma 2)",
                 loggp::split_table(s.p, {m.L, m.o, m.g, m.G}, static_cast<double>(s.bytes), A == algorithm::binomial).t(s.p),
                 proven_time::exact, true};
  if (m.o != 0 || m.G != 1) return std::nullopt;
  if (A == algorithm::long_message)
    return proven_time{"(P-2)g + (P-1)(k-1) + L (Table 2)", loggp::long_message_time(s.p, k, m.L, m.g), proven_time::exact, true};
  return proven_time{"((P-1)k - 1)g + L (Table 2)", loggp::short_message_time(s.p, k, m.L, m.g), proven_time::exact, true};
}

}  // namespace optcast::detail::proven
