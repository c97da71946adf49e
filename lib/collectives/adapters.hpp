// The registry's adapters (registry.cpp's rows): each turns the checked call into its
// round loop's arguments, building the plan the loop runs on; it is a coroutine where it
// builds one, so that the plan lives as long as the loop. Included by registry.cpp only.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>

#include "registry.hpp"
#include "row_predictions.hpp"
#include "bruck_cypher_ho/fibonacci.hpp"
#include "karp/plans.hpp"
#include "bar_noy_ho/multiport.hpp"
#include "alexandrov/loggp.hpp"
#include "traff/circulant.hpp"
#include "optcast/predict.hpp"

namespace optcast::detail::adapters {

// ---- broadcast ------------------------------------------------------------------------

inline task<result<void>> bcast_circulant(broadcast_call c) {
  return algorithms::broadcast_circulant(*c.f, c.seq, c.data, c.root, c.blocks);
}
inline task<result<void>> bcast_binomial(broadcast_call c) { return algorithms::broadcast_binomial(*c.f, c.seq, c.data, c.root); }
inline task<result<void>> bcast_logp_tree(broadcast_call c) {
  // LogGP: a message of b bytes keeps its sender busy (b - 1) G longer and arrives that
  // much later, so the tree is the LogP tree for L + (b-1) G and g + (b-1) G (G = 0: LogP's).
  return algorithms::broadcast_logp_tree(*c.f, c.seq, c.data, c.root, lengthened(c.data.size(), c.model));
}
template <bool Buffered>
task<result<void>> bcast_kitem(broadcast_call c) {
  const int L = logp::postal_steps({c.model.L, c.model.o, c.model.g});
  const int p = c.f->size();
  const auto plan = Buffered ? logp::kitem_buffered_for(p, L, c.blocks) : logp::kitem_single_for(p, L, c.blocks);
  co_return co_await algorithms::broadcast_kitem(*c.f, c.seq, c.data, c.root, *plan, std::max(c.model.g, c.model.o));
}
inline task<result<void>> bcast_fibonacci(broadcast_call c) {
  const auto plan = fibonacci::schedule_for(c.f->size(), c.blocks);
  co_return co_await algorithms::broadcast_packets(*c.f, c.seq, c.data, c.root, *plan);
}
template <bool Rotation>
task<result<void>> bcast_multiport(broadcast_call c) {
  const auto plan = Rotation ? multiport::rotation_for(c.f->size(), c.blocks, c.ports) : multiport::ktree_for(c.f->size(), c.blocks, c.ports);
  co_return co_await algorithms::broadcast_packets(*c.f, c.seq, c.data, c.root, *plan);
}

inline task<result<void>> bcast_ring(broadcast_call c) { return algorithms::broadcast_ring(*c.f, c.seq, c.data, c.root, c.blocks); }

// ---- scatter and gather ---------------------------------------------------------------

inline std::shared_ptr<const loggp::split_table> table_of(const scatter_call& c, bool binomial) {
  // Item sets of the mean size: the recurrence's optimality (Theorem 1) is for equal
  // ones; with irregular counts the same splits are used.
  const int p = c.f->size();
  return loggp::split_table_for(p, {c.model.L, c.model.o, c.model.g, c.model.G},
                                static_cast<double>(c.offset.back()) / p, binomial);
}
// The split tree's LogGP time for sets of one rank's part (the automatic choice weighs it
// against the multi-lane row where the topology has lanes).
template <bool Binomial>
double split_predicted(prediction_shape& sh, std::size_t, int, const loggp_params& m) {
  return loggp::split_table_for(sh.p, {m.L, m.o, m.g, m.G}, static_cast<double>(sh.largest), Binomial)->t(sh.p);
}
template <bool Binomial>
task<result<void>> scatter_split(scatter_call c) {
  const auto table = table_of(c, Binomial);
  if (!Binomial && c.split_sets) {
    std::vector<std::size_t> segment(static_cast<std::size_t>(c.f->size()));
    for (std::size_t v = 0; v < segment.size(); ++v) segment[v] = c.offset[v + 1] - c.offset[v];
    const auto plan = loggp::split_sets_plan_for(*table, c.f->size(), segment, {c.model.L, c.model.o, c.model.g, c.model.G});
    co_return co_await algorithms::scatter_pieces(*c.f, c.seq, c.from, c.to, c.root, *plan, c.offset);
  }
  co_return co_await algorithms::scatter_tree(*c.f, c.seq, c.from, c.to, c.root, *table, c.offset);
}
template <bool Short>
task<result<void>> scatter_root(scatter_call c) {
  return algorithms::scatter_direct(*c.f, c.seq, c.from, c.to, c.root, c.offset, Short ? c.elem : 0);
}
template <bool Binomial>
task<result<void>> gather_split(scatter_call c) {
  const auto table = table_of(c, Binomial);
  co_return co_await algorithms::gather_tree(*c.f, c.seq, c.from, c.to, c.root, *table, c.offset);
}
template <bool Short>
task<result<void>> gather_root(scatter_call c) {
  return algorithms::gather_direct(*c.f, c.seq, c.from, c.to, c.root, c.offset, Short ? c.elem : 0);
}

// ---- the all-roots collectives and reductions ----------------------------------------

inline task<result<void>> allgather_circulant(segments_call c) {
  return algorithms::allgatherv_circulant(*c.f, c.seq, 0, c.out, *c.lay);
}
// A lane's segments lie apart in its buffer (multi_lane_runners.cpp): there the circulant
// allgather, which moves the same bytes in as many rounds, one block of a segment at a time.
inline task<result<void>> allgather_rd(segments_call c) {
  if (c.lay->placed) return algorithms::allgatherv_circulant(*c.f, c.seq, 0, c.out, *c.lay);
  return algorithms::allgather_recursive_doubling(*c.f, c.seq, c.out, *c.lay, c.own());
}
inline task<result<void>> allgather_ring(segments_call c) { return algorithms::allgatherv_ring(*c.f, c.seq, 0, c.out, *c.lay, c.own()); }
inline task<result<void>> allgather_staggered(segments_call c) { return algorithms::allgatherv_staggered(*c.f, c.seq, c.out, *c.lay); }
inline task<result<void>> alltoall_staggered(segments_call c) {
  // Read only: the layout's block() hands out mutable spans of whatever buffer it is given.
  return algorithms::alltoall_staggered(*c.f, c.seq, {const_cast<std::byte*>(c.in.data()), c.in.size()}, c.out, *c.lay);
}

// Tags of a second phase start here, past any first phase's rounds.
constexpr std::uint32_t second_phase = 1u << 30;

inline task<result<void>> reduce_circ(reduction_call c) {
  return algorithms::reduce_circulant(*c.f, c.seq, c.work, c.root, c.blocks, *c.op);
}
inline task<result<void>> reduce_rng(reduction_call c) {
  return algorithms::reduce_ring(*c.f, c.seq, c.work, c.root, c.blocks, *c.op);
}
inline task<result<void>> reduce_ord(reduction_call c) { return algorithms::reduce_ordered(*c.f, c.seq, c.work, c.root, *c.op); }

// The allreduce runners that work in place: the operand into `work` first.
inline void load_operand(const reduction_call& c) {
  if (!c.in.empty() && c.in.data() != c.work.data()) std::memmove(c.work.data(), c.in.data(), c.in.size());
}

// Rank order: the ordered tree to rank 0, then its result broadcast (n blocks).
inline task<result<void>> allreduce_ordered(reduction_call c) {
  load_operand(c);
  if (auto r = co_await algorithms::reduce_ordered(*c.f, c.seq, c.work, 0, *c.op); !r) co_return r;
  co_return co_await algorithms::broadcast_circulant(*c.f, c.seq, c.work, 0, c.blocks, second_phase, true);
}
// Observation 1.4: reduce-scatter then all-broadcast of the p segments (balanced, whole
// elements), in the layout kept for the shape (algorithms::kept_layout).
inline std::shared_ptr<const algorithms::segment_layout> even_segments(const reduction_call& c) {
  return algorithms::kept_layout(false, c.op->elem, c.work.size() / c.op->elem, static_cast<std::size_t>(c.f->size()), c.blocks);
}
inline task<result<void>> allreduce_circ(reduction_call c) {
  load_operand(c);
  const auto lay = even_segments(c);
  if (auto r = co_await algorithms::reduce_scatter_circulant(*c.f, c.seq, 0, c.work, *lay, *c.op); !r) co_return r;
  co_return co_await algorithms::allgatherv_circulant(*c.f, c.seq, second_phase, c.work, *lay);
}
// The same pair on the ring, run as one pass.
inline task<result<void>> allreduce_rng(reduction_call c) {
  const auto lay = even_segments(c);
  co_return co_await algorithms::allreduce_ring(*c.f, c.seq, c.in, c.work, *lay, *c.op);
}
// Round loops of the whole vector in place (recursive doubling, halving).
template <auto Loop>
task<result<void>> in_place(reduction_call c) {
  load_operand(c);
  return Loop(*c.f, c.seq, c.work, *c.op);
}
inline task<result<void>> allreduce_comb(reduction_call c) {
  load_operand(c);
  // Every message carries the whole vector: LogP with L and g lengthened by (b - 1) G.
  const logp::params m = lengthened(c.work.size(), c.model);
  const auto plan = logp::combining_for(c.f->size(), logp::postal_steps(m));
  co_return co_await algorithms::allreduce_combining(*c.f, c.seq, c.work, *c.op, *plan, m.gap());
}

inline task<result<void>> reduce_scatter_circ(segments_call c) {
  return algorithms::reduce_scatter_circulant(*c.f, c.seq, 0, c.out, *c.lay, *c.op);
}
inline task<result<void>> reduce_scatter_rng(segments_call c) {
  return algorithms::reduce_scatter_ring(*c.f, c.seq, 0, c.out, *c.lay, *c.op);
}
// Rank order: the whole reduction everywhere, then each rank reads its part.
inline task<result<void>> reduce_scatter_ord(segments_call c) {
  return allreduce_ordered({c.f, c.seq, c.out, 0, c.lay->n, c.op, {}});
}

inline task<result<void>> summation_logp(summation_call c) {
  // Summation plans differ with n, so they are not cached; O(P log n) to build.
  const auto plan = logp::summation_schedule(c.n, c.f->size(), c.model);
  co_return co_await algorithms::summation_tree(*c.f, c.seq, plan, c.root, c.acc, *c.op, *c.load);
}

}  // namespace optcast::detail::adapters
