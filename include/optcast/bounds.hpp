// The times the papers prove, as the simulator measures them: for each registry row
// (optcast/algorithm.hpp) that states one under a given cost model. `optcast simulate`
// prints it beside every run, and the registry test holds every row to it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "optcast/algorithm.hpp"
#include "optcast/cost_model.hpp"

namespace optcast {

struct proven_time {
  // exact, at most or at least the value; reference: printed beside the run, not
  // promised (the model given lacks what the paper assumes).
  enum kind { exact, at_most, at_least, reference };
  std::string name;  // the formula, e.g. "n - 1 + ceil(log2 p)"
  double value;
  kind how = at_most;
  // Compared with the communication finishing time (Alexandrov et al.'s footnote 4: every
  // rank free to communicate again) rather than the last rank's finish.
  bool by_communication = false;

  // The time of a run to compare: its finish, or its communication finish.
  double measure(double finish, double comm_finish) const noexcept { return by_communication ? comm_finish : finish; }
  // Whether a run's time meets the promise (a reference is never a promise: true).
  bool met_by(double t) const noexcept {
    const double eps = 1e-9 * std::max(1.0, std::fabs(value));
    switch (how) {
      case exact: return std::fabs(t - value) <= eps;
      case at_most: return t <= value + eps;
      case at_least: return t >= value - eps;
      case reference: return true;
    }
    return false;
  }
  // "at most ", "at least ", "" (exact) or "reference: ".
  const char* promise() const noexcept {
    constexpr const char* words[] = {"", "at most ", "at least ", "reference: "};
    return words[how];
  }
};

// A run as `optcast simulate` describes it: p ranks, `bytes` as its --bytes reads for
// the collective (allgather: per rank; alltoall: per pair; summation: the operand
// count), n blocks, the root.
struct run_shape {
  int p;
  std::uint64_t bytes;
  int blocks;
  int root = 0;
  int per_host = 1, rails = 1;  // ranks per host (in blocks) and rails per host
};

// The time the paper of `alg` proves for `coll` under `m`, for a run of shape `s`; none
// where the row states none for that model.
std::optional<proven_time> proven(collective coll, algorithm alg, const sim::model& m, const run_shape& s);

// The least time any algorithm can take (how = at_least), where a paper proves one: the
// broadcast of n blocks under the rounds model with k ports, Bar-Noy and Ho's Lemma 3
// (for k = 1 it is Bruck, Cypher and Ho's Lemma 2.1, n - 1 + ceil(log2 p)).
std::optional<proven_time> lower_bound(collective coll, const sim::model& m, const run_shape& s);

// What every host's rails must carry, at G per byte on each of k rails, for H = p / n
// hosts of n ranks (Träff and Hunold's setting; the bounds of the side-by-side tables):
// broadcast and reduce m G / k, allreduce 2 (H - 1) / H m G / k, reduce-scatter
// (H - 1) / H m G / k, allgather, scatter and gather (H - 1) n m G / k with m per rank.
// A reference (how = reference): no algorithm sends less, but the latency and overhead
// terms are left out, so a run may come within the bytes' rounding of it, not below.
// None without several hosts of several ranks or rails, or without G, or for the other
// collectives.
std::optional<proven_time> hosts_bound(collective coll, const sim::model& m, const run_shape& s);

}  // namespace optcast
