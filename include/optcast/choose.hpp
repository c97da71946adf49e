// The automatic choice of a broadcast's algorithm and block count from a LogGP model
// (the caller's, the fabric's own, or the communicator's: calibrated with `optcast
// calibrate`, or the defaults). Every candidate's time is predicted and the least wins.
//
// The rule. A message of b bytes takes hop(b) = L + 2o + (b - 1) G from its send to its
// receipt, and a processor sends the next no sooner than max(g, o) + (b - 1) G after; a
// round of a round-based schedule, whose sends forward what earlier rounds received,
// lasts step(b) = max(round, hop(b), max(g, o) + (b - 1) G), where round is the least a
// round takes with every rank exchanging at once (loggp_params::round: calibrated, else
// 0). Schedules whose links change
// partners every round (marked *) see G (1 + sharing) on a real network (fabric.hpp's
// loggp_params::sharing; 0 in the simulator). Then, with q = ceil(log2 p) and the
// message cut into n blocks of b = bytes / n:
//   circulant*  (n - 1 + q) step(b)                  Träff, Algorithm 1
//   binomial    q step(bytes)                        the whole message down a binomial tree
//   fibonacci*  rounds(n) step(b)                    Bruck-Cypher-Ho (fibonacci::rounds)
//   ktree*      (ceil(n/k) + h - 1) step(b)          Bar-Noy-Ho, k >= 2 ports only
//   rotation*   (ceil(n/k) + chain time) step(b)     Bar-Noy-Ho, k >= 2 ports only
//   logp_tree   B(p; L + (bytes-1) G, o, g + (bytes-1) G)  Karp et al.'s optimal tree, one item
//   ring        (n + p - 2) step(b)                  the pipelined chain (baseline)
// n runs over 1..64 and powers of two up to bytes / min_block_bytes (4096 at most), for
// each algorithm that pipelines; ties go to the earlier line.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "optcast/communicator.hpp"
#include "optcast/logp.hpp"
#include "optcast/predict.hpp"

namespace optcast {

struct broadcast_choice {
  struct candidate {
    algorithm alg;
    int blocks;
    double predicted;  // in the model's time unit
  };
  algorithm alg = algorithm::circulant;
  int blocks = 1;
  double predicted = 0;
  std::vector<candidate> considered;  // each algorithm with its best block count
  // One line: what was chosen and why, every candidate's prediction.
  std::string explain() const;
};

// `blocks` > 0 fixes the block count (the caller's), 0 lets the rule choose it.
broadcast_choice choose_broadcast(int p, std::size_t bytes, const loggp_params& m, int ports, std::size_t min_block_bytes,
                                  int blocks = 0);

namespace detail {
// The same choice as held in the cache, unshared: every rank of a world asks the same
// question, and a rank that only reads the answer need not copy its candidates.
std::shared_ptr<const broadcast_choice> choose_broadcast_shared(int p, std::size_t bytes, const loggp_params& m, int ports,
                                                                std::size_t min_block_bytes, int blocks);
}  // namespace detail

// The rule's prediction for one algorithm and block count (see above).
double predict_broadcast(algorithm alg, int p, std::size_t bytes, int blocks, const loggp_params& m, int ports);
// One algorithm's block count with the least prediction (a candidate of the automatic
// choice or not), over the same counts.
broadcast_choice::candidate best_broadcast_blocks(algorithm alg, int p, std::size_t bytes, const loggp_params& m, int ports,
                                                  std::size_t min_block_bytes);

// Träff's other circulant collectives (all *), their block count from the same model. With
// q = ceil(log2 p), the rounds R(n) = n - 1 + q of one phase, and a = max(L + 2o, g, o):
//   reduce                     R(n) (step(b) + gamma b)        the broadcast, reversed; b = bytes / n
//   allgather(v), reduce_scatter(_block), one phase, where m is the bytes every rank ends
//     with (starts with, for reduce_scatter) and c_max, c_min the largest and smallest
//     contribution:
//                              R(n) max(round, a + G V / R(n)), V = max(m - c_min, R(n) ceil(c_max / n))
//     (a rank receives all but its own part, and the largest part needs the R(n) rounds
//     of a pipelined broadcast of n blocks); with even parts n = 1 is best, with one rank
//     holding everything it is the broadcast's rule
//   allreduce                  twice reduce_scatter with even parts (Observation 1.4),
//                              plus gamma (bytes - bytes / p): the combining of its first half
// n runs over the same values as the broadcast's, for each algorithm that pipelines.
struct block_choice {
  int blocks = 1;
  double predicted = 0;
};
// The block count with the least prediction; `largest`/`smallest` as above (ignored for
// reduce; for allreduce, pass bytes / p and the remainder's share, or 0 to derive them).
block_choice choose_circulant_blocks(circulant_collective what, int p, std::size_t bytes, std::size_t largest,
                                     std::size_t smallest, const loggp_params& m, std::size_t min_block_bytes);

// The pipelined ring (baseline), whose links keep their partners (no sharing):
//   reduce                     (n + p - 2) (step(b) + gamma b), b = bytes / n
//   allgather(v), reduce_scatter(_block)   (p - 1) n step(ceil(c_max / n))
//   allreduce                  twice that with even parts, plus gamma (bytes - bytes / p) / n
// (its broadcast: (n + p - 2) step(b), in the broadcast table above). The allreduce's
// receives are posted ahead, so a block's combining overlaps the next block's transfer;
// what a step cannot hide is the combining of the block it sends on next, one n-th of
// its part: so the allreduce pipelines (n > 1) where combining costs (gamma > 0), and
// not in the simulator (gamma = 0), where n = 1 is its bound.
// The ring reduce's or allreduce's block count with the least prediction (`what`: reduce
// or allreduce).
block_choice choose_ring_blocks(circulant_collective what, int p, std::size_t bytes, const loggp_params& m,
                                std::size_t min_block_bytes);

// Allreduce with a commutative operator: Träff's circulant pair (above, n blocks) or Karp
// et al.'s combining broadcast (logp.hpp, Section 4.2), whose every message carries the
// whole vector. Under LogGP a message of b bytes is a LogP message with L and g
// lengthened by (b - 1) G (as for logp_tree): combining_params; the plan is the one for
// its postal latency, and takes T of its steps of max(g', o) + gamma bytes (every step
// combines a whole vector).
// Combining wins for small vectors on many ranks (it needs about B(P) steps where the
// circulant pair needs 2 ceil(log2 p) rounds of L + 2o), the circulant pair once the
// volume counts. allreduce() asks this only for operators whose result is the same in
// any order (the built-ins on integers): combining reduces in a different order on
// every rank, which for floating point would give ranks different bits.
struct allreduce_choice {
  algorithm alg = algorithm::circulant;
  int blocks = 1;
  double predicted = 0;
  double circulant = 0, combining = 0;  // each one's prediction
};
// `blocks` > 0: the circulant pair's n is the caller's.
allreduce_choice choose_allreduce(int p, std::size_t bytes, const loggp_params& m, std::size_t min_block_bytes, int blocks = 0);

}  // namespace optcast
