// The automatic choice of a broadcast's algorithm and block count from a LogGP model
// (the caller's, the fabric's own, or the communicator's: calibrated with `optcast
// calibrate`, or the defaults). Every candidate's time is predicted and the least wins.
//
// The rule. A message of b bytes takes hop(b) = L + 2o + (b - 1) G from its send to its
// receipt, and a processor sends the next no sooner than max(g, o) + (b - 1) G after; a
// round of a round-based schedule, whose sends forward what earlier rounds received,
// lasts step(b) = max(hop(b), max(g, o) + (b - 1) G). Then, with q = ceil(log2 p) and the
// message cut into n blocks of b = bytes / n:
//   circulant   (n - 1 + q) step(b)                  Träff, Algorithm 1
//   binomial    q step(bytes)                        the whole message down a binomial tree
//   fibonacci   rounds(n) step(b)                    Bruck-Cypher-Ho (fibonacci::rounds)
//   ktree       (ceil(n/k) + h - 1) step(b)          Bar-Noy-Ho, k >= 2 ports only
//   rotation    (ceil(n/k) + chain time) step(b)     Bar-Noy-Ho, k >= 2 ports only
//   logp_tree   B(p; L + (bytes-1) G, o, g + (bytes-1) G)  Karp et al.'s optimal tree, one item
// n runs over 1..64 and powers of two up to bytes / min_block_bytes (4096 at most), for
// each algorithm that pipelines; ties go to the earlier line.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "optcast/communicator.hpp"

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

// The rule's prediction for one algorithm and block count (see above).
double predict_broadcast(algorithm alg, int p, std::size_t bytes, int blocks, const loggp_params& m, int ports);

}  // namespace optcast
