// The algorithms optcast has, and the collectives they serve: one registry (lib/collectives/registry.cpp)
// that names each algorithm, says which paper and section it comes from, what it needs
// of the call (ports, operator properties), and whether the automatic choice considers
// it. Parsing, refusals, dispatch, the automatic choice, `optcast simulate --list`, the
// benchmarks and README's algorithm table all read it.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "optcast/error.hpp"

namespace optcast {

enum class algorithm {
  automatic,       // chosen per call from the registry's candidates (see choose.hpp)
  circulant,       // Träff: n - 1 + ceil(log2 p) rounds per phase
  binomial,        // binomial tree of the whole buffer; for reductions the rank-ordered tree
  logp_tree,       // Karp et al.: the universal optimal tree B(P) for the LogP parameters
  staggered,       // Karp et al. 4.1: all-to-all, rank i sends to i+1, ..., i+P-1, one every g
  combining,       // Karp et al. 4.2: allreduce as P overlapping reductions, the time of one
  buffered,        // Karp et al. 3.5: k-item broadcast, B(P-1) + L + k - 1 with choosing receivers
  single_sending,  // Karp et al. 3.4: k-item broadcast, within B(P-1) + 2L + k - 2 (Theorem 3.7)
  fibonacci,       // Bruck, Cypher and Ho: n blocks on d generalized Fibonacci trees, one port
  ktree,           // Bar-Noy and Ho 3: k ports, k spanning trees
  rotation,        // Bar-Noy and Ho 4: k ports, chained broadcasting black boxes
  short_message,   // Alexandrov et al. 4.2 (scatter, gather): one message per element
  long_message,    // 4.3: one message per rank, all from (to) the root
  split_tree,      // 4.5-4.7: A_t^k, the scatter tree of least LogGP time; gather backwards
  continuous,      // Karp et al. 3.1-3.3: continuous broadcast (broadcast_stream)
  ring,            // baseline: the pipelined ring, fixed neighbours (chain for rooted collectives)
  recursive_doubling,  // baseline: allreduce (and barrier) by pairwise exchanges of the whole vector, log2 p rounds
  multi_lane,  // Träff and Hunold 2020: node-local phase, an inter-node collective on every lane at once, node-local phase
  dissemination,  // baseline: barrier, in round i each rank signals the k ranks j (k+1)^i ahead, ceil(log_{k+1} p) rounds
  recursive_halving,  // baseline: allreduce as a reduce-scatter by recursive halving, an allgather by recursive doubling
};

enum class collective {
  broadcast,
  scatter,
  gather,
  allgather,
  allgatherv,
  alltoall,
  reduce,
  allreduce,
  reduce_scatter_block,
  reduce_scatter,
  summation,
  stream,
  barrier,
};

std::string_view to_string(algorithm a) noexcept;
std::string_view to_string(collective c) noexcept;
// By name ("circulant", "reduce_scatter"); errc::invalid_argument for an unknown one.
result<algorithm> parse_algorithm(std::string_view name);
result<collective> parse_collective(std::string_view name);

// What an algorithm needs of a call.
struct requirements {
  int ports = 1;             // at least this many ports (the k-port algorithms: 2)
  bool commutative = false;  // a commutative operator (it combines out of rank order)
  // The automatic choice takes it only for operators whose bits do not depend on the
  // order at all (it reduces in a different order on every rank, so floating-point sums
  // would differ between ranks); asked for by name, commutative is enough.
  bool order_free = false;
  // Hosts of several ranks, or several rails (fabric.hpp's topology), the same number of
  // ranks on each host: the multi-lane decomposition's.
  bool lanes = false;
};

// What a call offers: the communicator's ports, the operator's properties (reductions).
struct call_traits {
  int ports = 1;
  bool commutative = true;
  bool order_free = true;
  bool lanes = false;  // the communicator's topology has lanes (requirements::lanes)
  bool operator==(const call_traits&) const = default;
};

// The cost model a paper analyses its algorithm in. A schedule for the rounds model
// runs under every model (LogP's waiting only delays it); a LogP, postal or LogGP
// schedule may let messages meet at a port, which those models queue and the strict
// rounds model reports as a port violation.
enum class paper_model { rounds, postal, logp, loggp };
std::string_view to_string(paper_model m) noexcept;

// One row of the registry.
struct algorithm_info {
  collective coll;
  algorithm alg;
  std::string_view paper;    // "Träff 2024", "Karp et al. 1993", ...
  std::string_view where;    // the section, algorithm or theorem
  std::string_view summary;  // what it does and the bound it reaches, one sentence
  paper_model model;         // the model its paper analyses it in
  requirements needs;
  bool automatic;  // a candidate of the automatic choice (predicted where a model rule exists)
};

// Every row, collectives in enum order, each collective's algorithms in preference order
// (the automatic choice takes the first candidate that fits where it has no prediction).
std::span<const algorithm_info> registry() noexcept;
// The row of `alg` for `coll`, or null if `alg` does not serve `coll`.
const algorithm_info* find(collective coll, algorithm alg) noexcept;
// "circulant, binomial and logp_tree": the algorithms of `coll`, for messages.
std::string algorithm_names(collective coll);
// "broadcast, scatter, ..., stream": every collective, for messages.
std::string collective_names();
// Why `alg` cannot run `coll` for a call with `traits`, starting with the collective's
// name; empty if it can. automatic always can.
std::string refusal(collective coll, algorithm alg, const call_traits& traits);

}  // namespace optcast
