// The cost model's formulas (predict.hpp, optcast/predict.hpp): a round's time, the
// rounds of the static schedules, and the predictions of the collectives other than the
// broadcast. The automatic choice that compares them is choose.cpp's.
#include "model/formulas.hpp"

#include <algorithm>
#include <cmath>

#include "alexandrov/loggp.hpp"
#include "bar_noy_ho/multiport.hpp"
#include "bruck_cypher_ho/fibonacci.hpp"
#include "karp/plans.hpp"
#include "traff/circulant.hpp"

namespace optcast {

namespace detail {

double round_time(double b, const loggp_params& m) {
  const double extra = std::max(b - 1, 0.0) * m.G;
  return std::max({m.round, m.L + 2 * m.o + extra, std::max(m.g, m.o) + extra});
}

loggp_params changing_links(const loggp_params& m) {
  loggp_params s = m;
  s.G *= 1 + std::max(m.sharing, 0.0);
  return s;
}

prediction_shape::prediction_shape(int procs, int k) : p(procs), q(circulant::ceil_log2(procs)), ports(k) {}
int prediction_shape::fibonacci_rounds(int n) {
  if (fib_depth < 0) fib_depth = fibonacci::rounds(fibonacci::choose(p, 1), 1) - 1;  // rounds = depth + n, any n >= 1
  return fib_depth + n;
}
int prediction_shape::ktree_rounds(int n) {
  if (ktree_height < 0) ktree_height = multiport::ktree_height(p, ports);
  return (n + ports - 1) / ports + ktree_height - 1;
}
int prediction_shape::rotation_rounds(int n) {
  if (chain < 0) chain = multiport::chain_time(multiport::best_chain(p, ports), ports);
  return (n + ports - 1) / ports + chain;
}

logp::params lengthened(std::size_t bytes, const loggp_params& m) {
  const double extra = std::max(static_cast<double>(bytes) - 1, 0.0) * m.G;
  return {m.L + extra, m.o, m.g + extra};
}

}  // namespace detail

using detail::round_time;

double predict_scatter(int p, std::size_t part, const loggp_params& m) {
  return loggp::split_table_for(p, {m.L, m.o, m.g, m.G}, static_cast<double>(part), false)->t(p);
}

double predict_circulant(circulant_collective what, int p, std::size_t bytes, std::size_t largest, std::size_t smallest,
                         int n, const loggp_params& given) {
  if (p <= 1 || bytes == 0) return 0;
  // Two ranks' schedule has one partner every round: its link never changes hands.
  const loggp_params m = p > 2 ? detail::changing_links(given) : given;
  n = std::max(n, 1);
  const double rounds = n - 1 + circulant::ceil_log2(p);
  if (what == circulant_collective::reduce) {
    // Each round combines the block it received before the next can go on.
    const double b = std::ceil(static_cast<double>(bytes) / n);
    return rounds * (round_time(b, m) + m.gamma * b);
  }
  if (what == circulant_collective::allreduce) {
    largest = (bytes + static_cast<std::size_t>(p) - 1) / static_cast<std::size_t>(p);
    smallest = bytes / static_cast<std::size_t>(p);
  }
  const double a = std::max(m.L + 2 * m.o, std::max(m.g, m.o));
  const double volume = std::max(static_cast<double>(bytes - std::min(smallest, bytes)), rounds * std::ceil(static_cast<double>(largest) / n));
  // A round's message of b bytes costs (b - 1) G beyond a one-byte one, as in round_time.
  const double phase = rounds * std::max(m.round, a + m.G * std::max(volume / rounds - 1, 0.0));
  // The reduce-scatter half combines every byte but its own part once.
  return what == circulant_collective::allreduce ? 2 * phase + m.gamma * static_cast<double>(bytes - smallest) : phase;
}

double predict_ring(circulant_collective what, int p, std::size_t bytes, std::size_t largest, std::size_t smallest, int n,
                    const loggp_params& m) {
  if (p <= 1 || bytes == 0) return 0;
  n = std::max(n, 1);
  if (what == circulant_collective::reduce) {
    const double b = std::ceil(static_cast<double>(bytes) / n);
    return (n + p - 2) * (round_time(b, m) + m.gamma * b);
  }
  if (what == circulant_collective::allreduce) {
    largest = (bytes + static_cast<std::size_t>(p) - 1) / static_cast<std::size_t>(p);
    smallest = bytes / static_cast<std::size_t>(p);
  }
  (void)smallest;
  // (p - 1) n rounds, each as long as the largest contribution's block takes.
  const double phase = static_cast<double>(p - 1) * n * round_time(std::ceil(static_cast<double>(largest) / n), m);
  return what == circulant_collective::allreduce ? 2 * phase + m.gamma * static_cast<double>(bytes - smallest) / n : phase;
}

logp::params combining_params(std::size_t bytes, const loggp_params& m) { return detail::lengthened(bytes, m); }

double predict_combining(int p, std::size_t bytes, const loggp_params& m) {
  if (p <= 1) return 0;
  const auto lm = combining_params(bytes, m);
  // Every step combines a whole vector before its value goes on; in every step every
  // rank sends and receives, so a step takes at least the calibrated round (where ranks
  // outnumber cores, a cycle of their turns: 8 B over 16 ranks of 2 cores was predicted
  // at 29 us, a tenth of one round).
  return logp::combining_for(p, logp::postal_steps(lm))->T * (std::max(lm.gap(), m.round) + m.gamma * static_cast<double>(bytes));
}

}  // namespace optcast
