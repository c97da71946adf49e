// The registry behind optcast/algorithm.hpp: each row is an algorithm_info plus what the
// library does with it: the round loop to run (through a small adapter per row, which
// builds the algorithm's plan), the block-count rule, the LogGP prediction the automatic
// choice compares, and the time its paper proves, which the simulator and the registry
// test hold every run to.
//
// Adding an algorithm: its round loop (and plan) in a file of its own, declared in
// round_loops.hpp; one row in registry.cpp. CONTRIBUTING.md says it step by step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>

#include "round_loops.hpp"
#include "optcast/collectives.hpp"
#include "traff_hunold/lanes.hpp"
#include "model/formulas.hpp"
#include "optcast/algorithm.hpp"
#include "optcast/bounds.hpp"
#include "optcast/fabric.hpp"
#include "optcast/cost_model.hpp"
#include "optcast/reduction.hpp"

namespace optcast::detail {

// What each collective's round loops take, after the entry point has checked the call,
// resolved the algorithm and block count, and prepared the buffers. Passed by value: an
// adapter that builds a plan is a coroutine, and its frame keeps the copy.
struct broadcast_call {
  fabric* f;
  std::uint32_t seq;
  std::span<std::byte> data;
  int root, blocks, ports;
  loggp_params model;
};
struct scatter_call {  // scatter: from the root's whole to each part; gather: back
  fabric* f;
  std::uint32_t seq;
  std::span<const std::byte> from;  // scatter: the root's segments in virtual order (root first)
  std::span<std::byte> to;          // gather: the root's, in virtual order
  int root;
  detail::segment_offsets offset;  // virtual processor v's bytes: [offset[v], offset[v+1])
  std::size_t elem;
  loggp_params model;
  bool split_sets;
};
struct segments_call {  // allgather(v), alltoall, reduce_scatter(_block)
  fabric* f;
  std::uint32_t seq;
  // reduce_scatter: one buffer, in == out. allgather: in is this rank's operand, which
  // out holds too, in its segment (in == out where nothing else holds it): the rows that
  // send the own segment straight on may send it from there (segment_layout::own_source).
  std::span<const std::byte> in;
  std::span<std::byte> out;
  const algorithms::segment_layout* lay;
  const erased_reduction* op;  // reductions only
  loggp_params model = {};     // for a row that chooses again inside (multi_lane's lanes)
  std::span<const std::byte> own() const noexcept {
    return in.data() == out.data() ? std::span<const std::byte>() : in;
  }
};
struct reduction_call {  // reduce, allreduce
  fabric* f;
  std::uint32_t seq;
  std::span<std::byte> work;
  int root, blocks;
  const erased_reduction* op;
  loggp_params model;
  // The operand, when `work` does not hold it yet (allreduce): a runner reads it from
  // here (the ring, as it combines) or loads it into `work` first (load_operand). Equal
  // to `work` in place; empty when `work` holds it.
  std::span<const std::byte> in = {};
};
struct summation_call {
  fabric* f;
  std::uint32_t seq;
  std::span<std::byte> acc;
  int root;
  std::int64_t n;
  logp::params model;  // in operator applications
  const erased_reduction* op;
  const operand_loader* load;
};

struct barrier_call {
  fabric* f;
  std::uint32_t seq;
};

template <class Call>
using runner_of = task<result<void>> (*)(Call);
using runner = std::variant<std::monostate, runner_of<broadcast_call>, runner_of<scatter_call>, runner_of<segments_call>,
                            runner_of<reduction_call>, runner_of<summation_call>, runner_of<barrier_call>>;

// How a call without .blocks gets its block count.
enum class block_rule {
  one,                  // the algorithm does not pipeline (the caller's count is ignored)
  given_or_one,         // the caller's count of items, else 1
  broadcast_model,      // the least LogGP prediction over n (choose.hpp)
  kitem_linear,         // the k-item broadcasts: the linear cost model's n
  circulant_reduce,     // choose_circulant_blocks(reduce)
  circulant_all_roots,  // choose_circulant_blocks(all_roots)
  circulant_allreduce,  // choose_circulant_blocks(allreduce)
  ring_reduce,          // choose_ring_blocks(reduce)
  ring_allreduce,       // choose_ring_blocks(allreduce)
};

struct entry {
  algorithm_info info;
  runner run;
  block_rule blocks = block_rule::one;
  bool uses_model = false;  // shaped by the LogGP parameters (so the caller's are checked)
  // The prediction the automatic choice compares (null: not predicted), for `bytes` as
  // the collective's call shape has them (choose.hpp) and n blocks.
  double (*predict)(prediction_shape&, std::size_t bytes, int n, const loggp_params&) = nullptr;
  // The paper's time under `m` for a run of this shape, where it states one.
  std::optional<proven_time> (*proves)(const sim::model& m, const run_shape& s) = nullptr;
  // A row that decomposes by host (multi_lane): its prediction on the communicator's
  // topology, in place of `predict` (which has none).
  double (*predict_lanes)(collective coll, const lane_shape& s, const call_shape& shape, const loggp_params& m,
                          const call_traits& t) = nullptr;

  template <class Call>
  runner_of<Call> runner_for() const {
    auto* r = std::get_if<runner_of<Call>>(&run);
    return r ? *r : nullptr;
  }
};

std::span<const entry> entries() noexcept;
const entry* find_entry(collective coll, algorithm alg) noexcept;

}  // namespace optcast::detail
