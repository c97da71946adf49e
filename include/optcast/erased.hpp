// The collectives on untyped bytes: for language bindings and programs whose element
// types are known only at run time (a tensor's dtype). The typed calls of
// optcast/collectives.hpp are templates over these; each behaves exactly as its typed
// twin there (the same checks, algorithms, block counts, deadlines and failures), with
// sizes in bytes and counts in elements of `elem` bytes (for the reductions, the
// operator's elem).
//
//   optcast::erased_reduction sum = optcast::reduction<float>(optcast::ops::sum).erased();
//   co_await optcast::erased::allreduce(comm, in_bytes, out_bytes, sum);
//
// A binding's own element type (float16, say) takes reduction<T>::custom(...).erased(),
// or an erased_reduction of its own filling (optcast/reduction.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "optcast/algorithm.hpp"
#include "optcast/communicator.hpp"
#include "optcast/cost_model.hpp"
#include "optcast/reduction.hpp"
#include "optcast/task.hpp"

namespace optcast {

// What a collective call may ask for beyond its arguments; every rank passes the same.
struct collective_options {
  algorithm alg = algorithm::automatic;  // automatic: the communicator's default
  int blocks = 0;                        // circulant pipelining depth n; 0: from the cost model
  std::optional<std::chrono::milliseconds> timeout;  // default: the communicator's
  // LogP(GP) parameters for algorithms shaped by them (logp_tree); default: the
  // fabric's own model (the simulator's), else the communicator's.
  std::optional<loggp_params> model;
  // Scatter with split_tree: let a message carry part of a processor's item set, routed
  // through a processor that is idle by then, where the model says that finishes sooner
  // (Alexandrov et al. 4.7, Figures 9-10). Off: A_t^k as the paper defines it.
  bool split_sets = false;
};
using broadcast_options = collective_options;

// Every rank passes a buffer of the same size; the root's bytes end up in all of them
// (the typed broadcast of collectives.hpp forwards here: broadcast takes bytes as they are).
task<result<void>> broadcast(communicator& c, std::span<std::byte> data, int root,
                             broadcast_options opts = {});

namespace erased {

// Every rank's `in` (in.size() bytes, the same on every rank) lands in `out` in rank
// order (p in.size() bytes). `in` may be this rank's part of `out`.
task<result<void>> allgather(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, std::size_t elem,
                             collective_options opts = {});
// Rank j contributes counts[j] elements; they land in `out` in rank order.
task<result<void>> allgatherv(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                              std::vector<std::int64_t> counts, std::size_t elem, collective_options opts = {});
// The elementwise reduction of every rank's `in` in `out` at the root.
task<result<void>> reduce(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, erased_reduction op,
                          int root, collective_options opts = {});
// The reduction of every rank's `in` in `out` on every rank. `in` may be `out`.
task<result<void>> allreduce(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, erased_reduction op,
                             collective_options opts = {});
// `in` is p blocks of out.size() bytes; rank j gets the reduction of everyone's block j.
task<result<void>> reduce_scatter_block(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                        erased_reduction op, collective_options opts = {});
// `in` is p segments of counts[0], counts[1], ... elements; rank j gets the reduction of
// everyone's segment j (counts[rank] elements).
task<result<void>> reduce_scatter(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                  std::vector<std::int64_t> counts, erased_reduction op, collective_options opts = {});
// `in` is p blocks, block j for rank j; block j of `out` gets what rank j sent this rank.
task<result<void>> alltoall(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, std::size_t elem,
                            collective_options opts = {});
// The root's `in` holds every rank's `out` in rank order; every rank's part is its own `out`.
task<result<void>> scatter(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, std::size_t elem,
                           int root, collective_options opts = {});
// Rank j receives counts[j] elements, packed in rank order in the root's `in`.
task<result<void>> scatterv(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                            std::vector<std::int64_t> counts, std::size_t elem, int root, collective_options opts = {});
// Every rank's `in` lands in the root's `out` in rank order.
task<result<void>> gather(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, std::size_t elem,
                          int root, collective_options opts = {});
// Rank j sends counts[j] elements; the root's `out` holds exactly their sum, in rank order.
task<result<void>> gatherv(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                           std::vector<std::int64_t> counts, std::size_t elem, int root, collective_options opts = {});
// Optimal summation of n operands (each op.elem bytes, written by `load`) into the root's
// `out` (op.elem bytes; other ranks' hold their partial sums).
task<result<void>> summation(communicator& c, std::int64_t n, operand_loader load, std::span<std::byte> out,
                             erased_reduction op, int root = 0, collective_options opts = {});

}  // namespace erased

}  // namespace optcast
