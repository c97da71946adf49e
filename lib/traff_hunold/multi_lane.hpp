// The multi-lane collectives (lanes.hpp): node-local phase, one inter-node collective per
// lane at once, node-local phase. The inter-node collective is the caller's choice (the
// registry's adapter asks the model, as for any call on the lane's H ranks).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "lanes.hpp"
#include "optcast/reduction.hpp"
#include "optcast/task.hpp"

namespace optcast::algorithms {

// The inter-node collectives a lane runs, on its view (ranks = hosts).
using lane_broadcast = std::function<task<result<void>>(fabric& lane, std::span<std::byte> buf, int root)>;
using lane_reduce = std::function<task<result<void>>(fabric& lane, std::span<std::byte> work, int root)>;
using lane_allreduce = std::function<task<result<void>>(fabric& lane, std::span<std::byte> work)>;
// Lane member i's `each` bytes at byte offset at[i] of `buf` (strided: the job's buffer).
using lane_allgather =
    std::function<task<result<void>>(fabric& lane, std::span<std::byte> buf, std::vector<std::size_t> at, std::size_t each)>;

// Scatter and gather of `each` bytes per rank, rank r's at ((r - root) mod p) * each of
// the root's buffer (virtual order, the scatter rows' own): the lane's collective on its
// H ranks, each holding one piece of `each` bytes; `from` and `to` as the scatter rows'
// (the root's H pieces in virtual order, root host first).
using lane_scatter = std::function<task<result<void>>(fabric& lane, std::span<const std::byte> from, std::span<std::byte> to,
                                                      int root, std::size_t each)>;

// Reduce-scatter of H pieces of `each` bytes in place in `buf` (lane member i's result at
// i * each).
using lane_reduce_scatter = std::function<task<result<void>>(fabric& lane, std::span<std::byte> buf, std::size_t each)>;

// The root's host scatters the data over its ranks (one block each), every lane
// broadcasts its block between the hosts, every host allgathers its blocks.
task<result<void>> broadcast_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                        const detail::lane_shape& s, lane_broadcast inner);
// Node-local reduce-scatter (rank l of a host combines block l), each lane reduces its
// block to the root's host, the root gathers the blocks. Commutative operators.
task<result<void>> reduce_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> work, int root,
                                     const erased_reduction& op, const detail::lane_shape& s, lane_reduce inner);
// Node-local reduce-scatter, each lane allreduces its block, node-local allgather.
task<result<void>> allreduce_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                        const erased_reduction& op, const detail::lane_shape& s, lane_allreduce inner);
// Each lane allgathers its members' segments (`each` bytes, rank r's at r * each of
// `buf`) between the hosts, then every host allgathers what its lanes gathered.
task<result<void>> allgather_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> buf, std::size_t each,
                                        const detail::lane_shape& s, lane_allgather inner);

// Scatter's and gather's pieces of at least this many bytes go one message each straight
// between the root's buffer and where they are needed, passed on by the root's host's
// ranks as they arrive, instead of through packs (rooted_lanes.cpp).
inline constexpr std::size_t direct_piece_bytes = std::size_t{64} << 10;

// The root hands every rank of its host the blocks of its lane (H blocks, one message),
// then every lane scatters them from the root's host; the root's host's rails carry
// every byte once. `elem`: pieces split on whole elements.
task<result<void>> scatter_multi_lane(fabric& f, std::uint32_t seq, std::span<const std::byte> from, std::span<std::byte> to,
                                      int root, std::size_t each, std::size_t elem, const detail::lane_shape& s, lane_scatter inner);
// The reverse: every lane gathers to the root's host, whose ranks hand the root their
// lane's blocks. `inner` is the lanes' gather.
task<result<void>> gather_multi_lane(fabric& f, std::uint32_t seq, std::span<const std::byte> from, std::span<std::byte> to,
                                     int root, std::size_t each, std::size_t elem, const detail::lane_shape& s, lane_scatter inner);

// Reduce-scatter of equal parts (`each` bytes; rank r's part at r * each of `work`, where
// its result is left): every rank of a host receives the others' blocks of its lane and
// combines them in local-rank order, then every lane reduce-scatters between the hosts.
// Commutative operators.
task<result<void>> reduce_scatter_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> work, std::size_t each,
                                             const erased_reduction& op, const detail::lane_shape& s,
                                             lane_reduce_scatter inner);

}  // namespace optcast::algorithms
