// The cost model's formulas that the registry's rows and the automatic choice share
// (lib/model/formulas.cpp). Internal to lib/.
#pragma once

#include <cstddef>

#include "optcast/fabric.hpp"
#include "optcast/logp.hpp"
#include "optcast/predict.hpp"

namespace optcast::detail {

// The rounds of the schedules that depend on p and k alone, computed once per choice:
// the static schedules grow by one round per block (fibonacci) or per k blocks (ktree,
// rotation) over a depth that depends on p.
struct prediction_shape {
  int p, q, ports;
  // The all-roots collectives': the largest and smallest contribution (bytes).
  std::size_t largest = 0, smallest = 0;
  int fib_depth = -1, ktree_height = -1, chain = -1;
  prediction_shape(int procs, int k);
  int fibonacci_rounds(int n);
  int ktree_rounds(int n);
  int rotation_rounds(int n);
};
// A round of a round-based schedule whose sends forward what earlier rounds received:
// max(round, L + 2o + (b-1)G, max(g, o) + (b-1)G) for blocks of b bytes (choose.hpp; round:
// loggp_params::round, 0 unless calibrated).
double round_time(double b, const loggp_params& m);
// m with G as a schedule whose links change partners every round sees it on a real
// network: G (1 + m.sharing) (fabric.hpp).
loggp_params changing_links(const loggp_params& m);

// The LogP parameters of a LogGP message of `bytes`: L and g lengthened by (bytes - 1) G,
// the time its sender stays busy and its arrival is delayed beyond a one-byte message's.
logp::params lengthened(std::size_t bytes, const loggp_params& m);

}  // namespace optcast::detail
