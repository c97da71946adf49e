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


namespace {

using detail::round_time;

double predict(const detail::entry& row, detail::prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
  if (sh.p <= 1) return 0;
  if (!row.predict || sh.ports < row.info.needs.ports) return INFINITY;
  return row.predict(sh, bytes, n, m);
}

}  // namespace

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
