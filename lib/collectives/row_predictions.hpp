// The registry rows' predictions for the automatic choice (choose.hpp), by the call's
// shape: what registry.cpp's table points at.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "round_loops.hpp"
#include "model/formulas.hpp"
#include "optcast/predict.hpp"
#include "proven_times.hpp"

namespace optcast::detail {

inline double block_bytes(std::size_t bytes, int n) { return std::ceil(static_cast<double>(bytes) / std::max(n, 1)); }

// The other collectives' predictions (choose.hpp), by the call's shape.
using CC = circulant_collective;
template <CC What>
inline double circulant_predicted(prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
  return predict_circulant(What, sh.p, bytes, sh.largest, sh.smallest, n, m);
}
template <CC What>
inline double ring_predicted(prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
  return predict_ring(What, sh.p, bytes, sh.largest, sh.smallest, n, m);
}
inline double combining_predicted(prediction_shape& sh, std::size_t bytes, int, const loggp_params& m) {
  return predict_combining(sh.p, bytes, m);
}
// Every round swaps and combines the whole vector.
inline double doubling_predicted(prediction_shape& sh, std::size_t bytes, int, const loggp_params& m) {
  const auto b = static_cast<double>(bytes);
  return proven::doubling_rounds(sh.p) * (round_time(b, m) + m.gamma * b);
}
// Recursive halving moves the circulant pair's bytes with one block in as many rounds,
// changing partners every round as it does (so with its sharing of links); for p not a
// power of two the fold adds two rounds of the whole vector.
inline double halving_predicted(prediction_shape& sh, std::size_t bytes, int, const loggp_params& m) {
  const auto b = static_cast<double>(bytes);
  const double fold = (sh.p & (sh.p - 1)) == 0 ? 0.0 : 2 * round_time(b, m) + m.gamma * b;
  return circulant_predicted<CC::allreduce>(sh, bytes, 1, m) + fold;
}
// Recursive doubling's allgather: the circulant allgather's bytes with one block in as
// many rounds; for p not a power of two the fold adds a segment's round and the whole's.
inline double doubling_allgather_predicted(prediction_shape& sh, std::size_t bytes, int, const loggp_params& m) {
  const double fold = (sh.p & (sh.p - 1)) == 0 ? 0.0 : round_time(static_cast<double>(sh.largest), m) + round_time(static_cast<double>(bytes), m);
  return circulant_predicted<CC::all_roots>(sh, bytes, 1, m) + fold;
}
// Every round a rank's k empty sends and receives.
inline double dissemination_predicted(prediction_shape& sh, std::size_t, int, const loggp_params& m) {
  return algorithms::dissemination_rounds(sh.p, sh.ports) * round_time(1, m);
}
// Every round one empty exchange.
inline double doubling_barrier_predicted(prediction_shape& sh, std::size_t, int, const loggp_params& m) {
  return proven::doubling_rounds(sh.p) * round_time(1, m);
}

}  // namespace optcast::detail
