#include "optcast/choose.hpp"
#include "alexandrov/loggp.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "bruck_cypher_ho/fibonacci.hpp"
#include "karp/plans.hpp"
#include "bar_noy_ho/multiport.hpp"
#include "traff/circulant.hpp"
#include "registry.hpp"

namespace optcast {

namespace detail {

double round_time(double b, const loggp_params& m) {
  const double extra = std::max(b - 1, 0.0) * m.G;
  return std::max(m.L + 2 * m.o + extra, std::max(m.g, m.o) + extra);
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

}  // namespace detail

namespace {

using detail::round_time;

double predict(const detail::entry& row, detail::prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
  if (sh.p <= 1) return 0;
  if (!row.predict || sh.ports < row.info.needs.ports) return INFINITY;
  return row.predict(sh, bytes, n, m);
}

}  // namespace

double predict_scatter(int p, std::size_t part, const loggp_params& m) {
  return loggp::split_table_for(p, {m.L, m.o, m.g, m.G}, static_cast<double>(part), false)->t(p);
}

double predict_broadcast(algorithm alg, int p, std::size_t bytes, int n, const loggp_params& m, int ports) {
  detail::prediction_shape sh(p, ports);
  const auto* row = detail::find_entry(collective::broadcast, alg);
  return row ? predict(*row, sh, bytes, n, m) : INFINITY;
}

namespace {

// The block counts a choice tries: 1..64, then powers of two, up to bytes / min_block_bytes
// (at most 4096).
std::vector<int> block_counts(std::size_t bytes, std::size_t min_block_bytes) {
  std::vector<int> ns;
  const auto most = static_cast<int>(std::clamp<std::size_t>(bytes / std::max<std::size_t>(min_block_bytes, 1), 1, 4096));
  for (int n = 1; n <= std::min(most, 64); ++n) ns.push_back(n);
  for (int n = 128; n <= most; n *= 2) ns.push_back(n);
  if (most > 64 && ns.back() != most) ns.push_back(most);
  return ns;
}

broadcast_choice compute_choice(int p, std::size_t bytes, const loggp_params& m, int ports, std::size_t min_block_bytes,
                                int blocks) {
  const std::vector<int> ns = blocks > 0 ? std::vector<int>{blocks} : block_counts(bytes, min_block_bytes);
  detail::prediction_shape sh(p, ports);
  broadcast_choice out;
  out.predicted = INFINITY;
  // The registry's broadcast candidates that have a prediction, in its order (ties go
  // to the earlier row).
  for (const auto& row : detail::entries()) {
    if (row.info.coll != collective::broadcast || !row.info.automatic || !row.predict || ports < row.info.needs.ports)
      continue;
    const bool pipelines = row.blocks == detail::block_rule::broadcast_model;
    broadcast_choice::candidate best{row.info.alg, 1, INFINITY};
    for (int n : pipelines ? ns : std::vector<int>{1})
      if (const double t = predict(row, sh, bytes, n, m); t < best.predicted) best = {row.info.alg, n, t};
    out.considered.push_back(best);
    if (best.predicted < out.predicted) {
      out.alg = best.alg;
      out.blocks = best.blocks;
      out.predicted = best.predicted;
    }
  }
  return out;
}

}  // namespace

broadcast_choice::candidate best_broadcast_blocks(algorithm alg, int p, std::size_t bytes, const loggp_params& m, int ports,
                                                  std::size_t min_block_bytes) {
  broadcast_choice::candidate best{alg, 1, INFINITY};
  for (int n : block_counts(bytes, min_block_bytes))
    if (const double t = predict_broadcast(alg, p, bytes, n, m, ports); t < best.predicted) best = {alg, n, t};
  return best;
}

std::shared_ptr<const broadcast_choice> detail::choose_broadcast_shared(int p, std::size_t bytes, const loggp_params& m,
                                                                        int ports, std::size_t min_block_bytes, int blocks) {
  // Every rank of an in-process world asks the same question: answer it once.
  using key = std::tuple<int, std::size_t, double, double, double, double, double, int, std::size_t, int>;
  static std::mutex mu;
  static std::map<key, std::shared_ptr<const broadcast_choice>> recent;
  const key k{p, bytes, m.L, m.o, m.g, m.G, m.sharing, ports, min_block_bytes, blocks};
  {
    std::lock_guard lock(mu);
    if (auto it = recent.find(k); it != recent.end()) return it->second;
  }
  auto c = std::make_shared<const broadcast_choice>(compute_choice(p, bytes, m, ports, min_block_bytes, blocks));
  std::lock_guard lock(mu);
  if (recent.size() >= 256) recent.clear();
  recent.emplace(k, c);
  return c;
}

broadcast_choice choose_broadcast(int p, std::size_t bytes, const loggp_params& m, int ports, std::size_t min_block_bytes,
                                  int blocks) {
  return *detail::choose_broadcast_shared(p, bytes, m, ports, min_block_bytes, blocks);
}

double predict_circulant(circulant_collective what, int p, std::size_t bytes, std::size_t largest, std::size_t smallest,
                         int n, const loggp_params& given) {
  if (p <= 1 || bytes == 0) return 0;
  const loggp_params m = detail::changing_links(given);
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
  const double phase = rounds * a + m.G * volume;
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

block_choice choose_ring_blocks(circulant_collective what, int p, std::size_t bytes, const loggp_params& m,
                                std::size_t min_block_bytes) {
  // The allreduce's blocks are cut from one rank's part.
  const std::size_t cut = what == circulant_collective::allreduce ? (bytes + static_cast<std::size_t>(std::max(p, 1)) - 1) / static_cast<std::size_t>(std::max(p, 1)) : bytes;
  block_choice best{1, INFINITY};
  for (int n : block_counts(cut, min_block_bytes))
    if (const double t = predict_ring(what, p, bytes, 0, 0, n, m); t < best.predicted) best = {n, t};
  return best;
}

block_choice choose_circulant_blocks(circulant_collective what, int p, std::size_t bytes, std::size_t largest,
                                     std::size_t smallest, const loggp_params& m, std::size_t min_block_bytes) {
  // The blocks are cut from the largest part (all-roots) or the whole (reduce).
  const std::size_t cut = what == circulant_collective::all_roots ? largest
                          : what == circulant_collective::allreduce ? (bytes + static_cast<std::size_t>(std::max(p, 1)) - 1) / static_cast<std::size_t>(std::max(p, 1))
                                                                     : bytes;
  block_choice best{1, INFINITY};
  for (int n : block_counts(cut, min_block_bytes))
    if (const double t = predict_circulant(what, p, bytes, largest, smallest, n, m); t < best.predicted) best = {n, t};
  return best;
}

logp::params combining_params(std::size_t bytes, const loggp_params& m) { return detail::lengthened(bytes, m); }

double predict_combining(int p, std::size_t bytes, const loggp_params& m) {
  if (p <= 1) return 0;
  const auto lm = combining_params(bytes, m);
  // Every step combines a whole vector before its value goes on.
  return logp::combining_for(p, logp::postal_steps(lm))->T * (lm.gap() + m.gamma * static_cast<double>(bytes));
}

allreduce_choice choose_allreduce(int p, std::size_t bytes, const loggp_params& m, std::size_t min_block_bytes, int blocks) {
  const auto circ = blocks > 0 ? block_choice{blocks, predict_circulant(circulant_collective::allreduce, p, bytes, 0, 0, blocks, m)}
                               : choose_circulant_blocks(circulant_collective::allreduce, p, bytes, 0, 0, m, min_block_bytes);
  allreduce_choice out{algorithm::circulant, circ.blocks, circ.predicted, circ.predicted, predict_combining(p, bytes, m)};
  if (out.combining < out.circulant) {
    out.alg = algorithm::combining;
    out.predicted = out.combining;
  }
  return out;
}

std::string broadcast_choice::explain() const {
  std::string s = std::string(to_string(alg)) + " with n = " + std::to_string(blocks) + " (predicted";
  char buf[64];
  for (const auto& c : considered) {
    std::snprintf(buf, sizeof buf, " %s%s %.4g (n = %d)", c.alg == alg ? "*" : "", std::string(to_string(c.alg)).c_str(), c.predicted,
                  c.blocks);
    s += buf;
  }
  return s + ")";
}

}  // namespace optcast
