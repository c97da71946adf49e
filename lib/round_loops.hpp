// The algorithm layer: one coroutine per algorithm, the processor's round loop written
// against the fabric only. The collectives layer (lib/collectives/entry.cpp) validates arguments,
// picks the algorithm and the block count, and owns the deadline; these assume valid input.
#pragma once

#include <cstdint>
#include <span>
#include <memory>
#include <vector>

#include "blocks.hpp"
#include "karp/plans.hpp"
#include "static_schedules/packet_schedule.hpp"
#include "alexandrov/loggp.hpp"
#include "optcast/reduction.hpp"

#include "optcast/fabric.hpp"
#include "optcast/task.hpp"

namespace optcast::detail {

// Processor numbers with the root as 0, what every rooted round loop works in, and back.
struct rooted {
  int p, root;
  int virt(int rank) const noexcept { return (rank - root + p) % p; }
  int real(int v) const noexcept { return (v + root) % p; }
};

// Where virtual processor v's bytes of a scatter or gather lie in the root's buffer:
// [o[v], o[v + 1]) for v < p. A table (scatterv, gatherv: counts of the caller's), or
// equal parts of `each` bytes (scatter, gather): then no rank holds a table of p + 1
// offsets, and a simulated world of p ranks needs O(p) memory, not O(p^2).
struct segment_offsets {
  std::span<const std::size_t> table;  // p + 1 entries, or empty: equal parts
  std::size_t each = 0;
  std::size_t p = 0;
  std::size_t operator[](std::size_t v) const noexcept { return table.empty() ? v * each : table[v]; }
  std::size_t back() const noexcept { return (*this)[p]; }
};

}  // namespace optcast::detail

namespace optcast::algorithms {

// Träff, Algorithm 1: n blocks from `root` in n - 1 + ceil(log2 p) rounds. `lockstep`:
// the ranks may start at different times (broadcast_circulant.cpp says why it matters).
task<result<void>> broadcast_circulant(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                       int root, int n, std::uint32_t step0 = 0, bool lockstep = false);

// Karp et al., Section 2: the universal optimal tree B(P) for LogP parameters m; every
// rank receives once, then sends to its children one after the other.
task<result<void>> broadcast_logp_tree(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                       logp::params m);

// Karp et al., Sections 3.4-3.5: the k blocks of `buf` (block_partition) on `plan`,
// plan processor 0 being `root`, one plan step lasting `step` of the fabric's model time.
task<result<void>> broadcast_kitem(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                   const logp::kitem_plan& plan, double step);

// A static round schedule (Bruck-Cypher-Ho, Bar-Noy-Ho): the plan's m packets are the
// blocks of `buf`, plan processor q is rank root + q; plan.ports <= f.ports().
task<result<void>> broadcast_packets(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                     const packets::schedule& plan);

// Alexandrov et al. 4.4-4.7: scatter on the split tree of `table` (Binomial Tree, A_t,
// A_t^k). Virtual processor v = rank - root mod p owns bytes [offset[v], offset[v+1]);
// `all` (the root's, in virtual order) holds them all, `out` gets v's.
task<result<void>> scatter_tree(fabric& f, std::uint32_t seq, std::span<const std::byte> all, std::span<std::byte> out,
                                int root, const loggp::split_table& table, detail::segment_offsets offset);
// The same tree backwards: every processor's `in` lands at its offset in the root's `all`.
task<result<void>> gather_tree(fabric& f, std::uint32_t seq, std::span<const std::byte> in, std::span<std::byte> all,
                               int root, const loggp::split_table& table, detail::segment_offsets offset);
// 4.7, Figures 9-10: scatter on a plan whose messages carry pieces of item sets.
task<result<void>> scatter_pieces(fabric& f, std::uint32_t seq, std::span<const std::byte> all, std::span<std::byte> out,
                                  int root, const loggp::scatter_plan& plan, detail::segment_offsets offset);
// 4.2-4.3: the root sends every processor its bytes itself, in messages of `item` bytes
// (Short-Message), or whole (Simple Long-Message, item = 0); gather the reverse.
task<result<void>> scatter_direct(fabric& f, std::uint32_t seq, std::span<const std::byte> all, std::span<std::byte> out,
                                  int root, detail::segment_offsets offset, std::size_t item);
task<result<void>> gather_direct(fabric& f, std::uint32_t seq, std::span<const std::byte> in, std::span<std::byte> all,
                                 int root, detail::segment_offsets offset, std::size_t item);

// Binomial tree of the whole buffer: ceil(log2 p) rounds at the root.
task<result<void>> broadcast_binomial(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                      int root);

// The pipelined ring (baseline/ring.cpp): a chain of virtual ranks 0 -> 1 -> ... -> p - 1
// for n blocks, n + p - 2 rounds; the reduction runs it backwards (commutative operators).
task<result<void>> broadcast_ring(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root, int n,
                                  std::uint32_t step0 = 0);
task<result<void>> reduce_ring(fabric& f, std::uint32_t seq, std::span<std::byte> work, int root, int n,
                               const erased_reduction& op);

// Allreduce by recursive doubling: the whole vector, ceil(log2 p) exchanges, two more
// rounds for p not a power of two; every rank ends with the same bits.
task<result<void>> allreduce_recursive_doubling(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                                const erased_reduction& op);
// Allreduce by recursive halving then doubling (Rabenseifner): 2 (p - 1) / p of the
// vector in 2 log2 p pairwise exchanges, two more rounds for p not a power of two;
// every rank ends with the same bits (baseline/pairwise_allreduce.cpp).
task<result<void>> allreduce_recursive_halving(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                               const erased_reduction& op);

// The dissemination barrier on the fabric's k ports (baseline/dissemination.cpp):
// ceil(log_{k+1} p) rounds of k empty sends || k receives.
task<result<void>> barrier_dissemination(fabric& f, std::uint32_t seq);
task<result<void>> barrier_recursive_doubling(fabric& f, std::uint32_t seq);
int dissemination_rounds(int p, int k);

// p segments of one buffer, segment j holding count[j] elements of `elem` bytes at
// element offset offset[j], each split into n blocks of whole elements.
struct segment_layout {
  std::size_t elem = 1;
  int n = 1;
  std::vector<std::size_t> offset;
  std::vector<int> contributors;  // the j with count[j] > 0, ascending

  bool uniform = true;             // every segment has the same count
  bool placed = false;             // some segment lies elsewhere than right after the one before (place())
  // Equal segments one after another: where the fast paths' arithmetic on j holds.
  bool equal_in_order() const noexcept { return uniform && !placed; }
  segment_layout(std::size_t elem_bytes, int blocks, std::span<const std::size_t> counts);
  // Segment j at element offset at[j] instead of right after segment j - 1 (a lane's
  // members' segments where they lie, strided, in a buffer of every rank's). The round
  // loops reach segments through block() only, so they work on either.
  void place(std::span<const std::size_t> at) {
    for (std::size_t j = 0; j < at.size() && j + 1 < offset.size(); ++j) {
      placed = placed || at[j] != offset[j];
      offset[j] = at[j];
    }
  }
  // Bytes of block b of segment j, within the buffer (block_partition's split, with the
  // divisions done once per segment: this runs p times per round).
  std::span<std::byte> block(std::span<std::byte> buf, int j, int b) const noexcept {
    const auto& s = split_[static_cast<std::size_t>(j)];
    const auto ub = static_cast<std::size_t>(b);
    const std::size_t first = offset[static_cast<std::size_t>(j)] + ub * s.base + (ub < s.extra ? ub : s.extra);
    return {buf.data() + first * elem, (s.base + (ub < s.extra ? 1 : 0)) * elem};
  }
  // Where `own` (segment j apart from buf: an allgather's operand, also copied into buf)
  // has buf's block `b` of segment j; b itself without one. A rank's own blocks sent
  // from its operand, which the call never writes, reach a peer that reads them straight
  // out of this process's memory (single copy) from lines its cache still holds call
  // after call, where buf's copy is rewritten each call and must come across again.
  std::span<const std::byte> own_source(std::span<std::byte> buf, int j, std::span<std::byte> b,
                                        std::span<const std::byte> own) const noexcept {
    if (own.empty()) return b;
    return own.subspan(static_cast<std::size_t>(b.data() - buf.data()) - offset[static_cast<std::size_t>(j)] * elem, b.size());
  }
  // The size of that block alone.
  std::size_t block_bytes(int j, int b) const noexcept {
    const auto& s = split_[static_cast<std::size_t>(j)];
    return (s.base + (static_cast<std::size_t>(b) < s.extra ? 1 : 0)) * elem;
  }

private:
  struct split {
    std::size_t base, extra;
  };
  std::vector<split> split_;
};

// The layout every rank of a call of one shape asks for, made once per thread and shape:
// the ones this thread made last are shared, read only, while any call still uses them,
// and up to 4,096 ranks kept between calls too. In a simulated world of 1,000 ranks each building
// its own (three arrays of p) was a fifth of the run, in malloc and page faults; on two
// ranks a small allgather's allocations were a sixth of its call. `each`: every segment
// `count` elements (allgather); else `count` elements split evenly over the p segments
// (block_partition: a reduce-scatter's parts of an allreduce).
std::shared_ptr<const segment_layout> kept_layout(bool each, std::size_t elem, std::size_t count, std::size_t p, int blocks);

// Allgather by recursive doubling (baseline/pairwise_allgather.cpp): log2 p pairwise
// exchanges of everything held, two more rounds for p not a power of two; the segments
// one after another (a layout not placed). `own`, where given, holds this rank's segment
// as out does (own_source below).
task<result<void>> allgather_recursive_doubling(fabric& f, std::uint32_t seq, std::span<std::byte> out, const segment_layout& lay,
                                                std::span<const std::byte> own = {});

// Träff, Algorithm 7: every rank broadcasts its segment at once, n - 1 + q rounds.
// `buf` holds all segments; this rank's is in place. Tags use steps step0 + round.
task<result<void>> allgatherv_circulant(fabric& f, std::uint32_t seq, std::uint32_t step0,
                                        std::span<std::byte> buf, const segment_layout& lay);

// The ring all-gather: rank r sends to r + 1 and receives from r - 1 only, every block of
// every segment in (p - 1) n rounds; and its reversal, the ring reduce-scatter. `own` as
// for recursive doubling.
task<result<void>> allgatherv_ring(fabric& f, std::uint32_t seq, std::uint32_t step0, std::span<std::byte> buf,
                                   const segment_layout& lay, std::span<const std::byte> own = {});
task<result<void>> reduce_scatter_ring(fabric& f, std::uint32_t seq, std::uint32_t step0, std::span<std::byte> buf,
                                       const segment_layout& lay, const erased_reduction& op);
// Both in one pass, 2 (p - 1) n rounds: the allgather's receives are posted while the
// reduce-scatter runs. Tags use steps 0 .. 2 (p - 1) n - 1. The operand is `in` (which
// may be `buf` itself, not a part of it): it is read where it is, as each segment is
// first sent or combined, so the result needs no copy of it first.
task<result<void>> allreduce_ring(fabric& f, std::uint32_t seq, std::span<const std::byte> in, std::span<std::byte> buf,
                                  const segment_layout& lay, const erased_reduction& op);

// Karp et al., Section 4.1: the staggered all-to-all broadcast, each segment's n blocks
// as n items; L + 2o + g (n (p - 1) - 1) under LogP with g >= o.
task<result<void>> allgatherv_staggered(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                        const segment_layout& lay);

// The same schedule for all-to-all personalized: segment j of `in` goes to rank j, rank
// j's lands in segment j of `out` (this rank's own segment is not touched).
task<result<void>> alltoall_staggered(fabric& f, std::uint32_t seq, std::span<std::byte> in,
                                      std::span<std::byte> out, const segment_layout& lay);

// Observation 1.4: Algorithm 7 backwards, reducing instead of copying; afterwards this
// rank's segment of `buf` holds the reduction of every rank's, the others are spent.
task<result<void>> reduce_scatter_circulant(fabric& f, std::uint32_t seq, std::uint32_t step0,
                                            std::span<std::byte> buf, const segment_layout& lay,
                                            const erased_reduction& op);

// Karp et al., Section 4.2: the combining broadcast on `plan` (steps of `step_time`
// model units); `acc` holds this rank's operand and ends as the reduction. Commutative
// operators only.
task<result<void>> allreduce_combining(fabric& f, std::uint32_t seq, std::span<std::byte> acc,
                                       const erased_reduction& op, const logp::combining_plan& plan,
                                       double step_time);

// Karp et al., Section 5: this rank's part of the summation tree `plan`, rooted at
// `root`; `acc` (one element) ends as the partial sum of its subtree, the whole sum at
// the root. Operands come from `load`.
task<result<void>> summation_tree(fabric& f, std::uint32_t seq, const logp::summation_plan& plan, int root,
                                  std::span<std::byte> acc, const erased_reduction& op,
                                  const operand_loader& load);

// Observation 1.3: Algorithm 1 backwards; `work` (this rank's operand, overwritten)
// ends as the reduction at the root. Commutative operators only.
task<result<void>> reduce_circulant(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                    int root, int n, const erased_reduction& op);

// The binomial tree over ranks in order (reduction.hpp): `work` ends as
// in_0 (+) ... (+) in_{p-1} at rank 0, and is then sent on to `root` (step 1).
task<result<void>> reduce_ordered(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                  int root, const erased_reduction& op);

}  // namespace optcast::algorithms
