// The registry rows' predictions for the automatic choice (choose.hpp), by the call's
// shape: what registry.cpp's table points at.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "algorithms.hpp"
#include "model/predict.hpp"
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
// Halves of the vector exchanged and combined, then exchanged back in the reverse order
// (the whole vector twice more where p is not a power of two). Each round is one
// exchange with one partner, in step with it: no sharing of links (changing_links).
inline double halving_predicted(prediction_shape& sh, std::size_t bytes, int, const loggp_params& m) {
  const auto b = static_cast<double>(bytes);
  int pof2 = 1;
  while (pof2 * 2 <= sh.p) pof2 *= 2;
  double t = pof2 == sh.p ? 0.0 : 2 * round_time(b, m) + m.gamma * b;
  for (double part = b / 2; pof2 > 1; pof2 /= 2, part /= 2) t += 2 * round_time(std::ceil(part), m) + m.gamma * part;
  return t;
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
