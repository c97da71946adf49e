// Entry points of the circulant family: argument checks, algorithm and block count,
// working buffers, the deadline. The round loops are in circulant_all.cpp and reduce.cpp.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "algorithms.hpp"
#include "collective_common.hpp"
#include "optcast/choose.hpp"
#include "optcast/collectives.hpp"

namespace optcast::detail {

namespace {

std::string str(std::size_t v) { return std::to_string(v); }

// Checks counts (one per rank, none negative) and converts them; empty `why` if fine.
std::vector<std::size_t> check_counts(const communicator& c, const std::vector<std::int64_t>& counts,
                                      const char* what, std::string& why) {
  std::vector<std::size_t> out;
  if (counts.size() != static_cast<std::size_t>(c.size())) {
    why = std::string(what) + ": " + str(counts.size()) + " counts for " + std::to_string(c.size()) + " ranks";
    return out;
  }
  out.reserve(counts.size());
  for (std::size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] < 0) {
      why = std::string(what) + ": counts[" + str(j) + "] = " + std::to_string(counts[j]) + " is negative (or too large)";
      return {};
    }
    out.push_back(static_cast<std::size_t>(counts[j]));
  }
  return out;
}

// The block count: the caller's, or the least predicted by the LogGP model (choose.hpp)
// for what the collective moves; `largest`/`smallest` are the largest and smallest part
// of the all-roots ones.
int blocks_for(const communicator& c, const collective_options& o, const loggp_params& m, circulant_collective what,
               std::size_t bytes, std::size_t largest = 0, std::size_t smallest = 0) {
  if (o.blocks) return o.blocks;
  return choose_circulant_blocks(what, c.size(), bytes, largest, smallest, m, c.options().min_block_bytes).blocks;
}

// Which algorithm a reduction runs: circulant for commutative operators, the ordered
// binomial tree otherwise; empty `why` if the caller's choice is possible.
algorithm reduction_algorithm(const collective_options& o, const erased_reduction& op, const char* what,
                              std::string& why) {
  if (o.alg == algorithm::circulant && !op.commutative)
    why = std::string(what) +
          ": the circulant algorithm combines operands out of rank order; the operator is "
          "non-commutative (use algorithm::automatic or binomial, the rank-ordered tree)";
  if (o.alg != algorithm::automatic && o.alg != algorithm::circulant && o.alg != algorithm::binomial &&
      (o.alg != algorithm::combining || std::string_view(what) != "allreduce"))
    why = std::string(what) + ": the algorithms are circulant and binomial (rank-ordered)";
  if (o.alg == algorithm::combining && !op.commutative && why.empty())
    why = std::string(what) + ": the combining broadcast combines operands in a different order on every rank; "
          "the operator is non-commutative (use algorithm::automatic or binomial)";
  if (o.alg == algorithm::automatic) return op.commutative ? algorithm::circulant : algorithm::binomial;
  return o.alg;
}

}  // namespace

task<result<void>> allgatherv_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                    std::vector<std::int64_t> counts_in, std::size_t elem, bool regular,
                                    collective_options opts) {
  const std::uint32_t seq = c.next_seq();
  const char* what = regular ? "allgather" : "allgatherv";
  if (c.broken()) co_return fail(errc::broken);
  std::string why;
  const auto counts = check_counts(c, counts_in, what, why);
  if (!why.empty()) co_return refuse(c, why);
  if (opts.blocks < 0) co_return refuse(c, std::string(what) + ": blocks must not be negative");
  if (opts.alg != algorithm::automatic && opts.alg != algorithm::circulant && opts.alg != algorithm::staggered)
    co_return refuse(c, std::string(what) + ": the algorithms are circulant (Träff, Algorithm 7) and staggered (Karp et al. 4.1)");
  const std::size_t mine = counts[static_cast<std::size_t>(c.rank())];
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  if (in.size() != mine * elem)
    co_return refuse(c, std::string(what) + ": in has " + str(in.size() / elem) + " elements, this rank's count is " + str(mine));
  if (out.size() < total * elem)
    co_return refuse(c, std::string(what) + ": out has room for " + str(out.size() / elem) + " elements, the counts add up to " + str(total));

  const auto model = model_for(c, opts, what, why);
  if (!model) co_return refuse(c, why);
  const auto [least, most] = std::minmax_element(counts.begin(), counts.end());
  const algorithms::segment_layout lay(
      elem, blocks_for(c, opts, *model, circulant_collective::all_roots, total * elem, *most * elem, *least * elem), counts);
  auto own = lay.block(out, c.rank(), 0).data();  // block 0 starts the segment
  if (mine) std::memmove(own, in.data(), in.size());
  deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  result<void> r;  // not `co_await` in ?: (GCC 12 evaluated both arms there)
  if (opts.alg == algorithm::staggered)
    r = co_await algorithms::allgatherv_staggered(c.get_fabric(), seq, out, lay);
  else
    r = co_await algorithms::allgatherv_circulant(c.get_fabric(), seq, 0, out, lay);
  co_return finish(c, std::move(r));
}

task<result<void>> reduce_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                erased_reduction op, int root, collective_options opts) {
  const std::uint32_t seq = c.next_seq();
  if (c.broken()) co_return fail(errc::broken);
  if (root < 0 || root >= c.size())
    co_return refuse(c, "reduce: root " + std::to_string(root) + " is not a rank of this " +
                            std::to_string(c.size()) + "-rank communicator");
  if (opts.blocks < 0) co_return refuse(c, "reduce: blocks must not be negative");
  if (c.rank() == root && out.size() != in.size())
    co_return refuse(c, "reduce: out has " + str(out.size() / op.elem) + " elements at the root, in has " +
                            str(in.size() / op.elem));
  std::string why;
  const algorithm alg = reduction_algorithm(opts, op, "reduce", why);
  if (!why.empty()) co_return refuse(c, why);
  const auto model = model_for(c, opts, "reduce", why);
  if (!model) co_return refuse(c, why);

  // The root reduces into `out`; the others into a copy of their operand.
  scratch_pool::lease scratch;
  std::span<std::byte> work = out;
  if (c.rank() != root) {
    scratch = c.get_fabric().scratch().take(in.size());
    work = scratch.span();
    if (!in.empty()) std::memcpy(work.data(), in.data(), in.size());
  } else if (!in.empty()) {
    std::memmove(work.data(), in.data(), in.size());
  }
  deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  auto& f = c.get_fabric();
  result<void> r;
  if (alg == algorithm::binomial)
    r = co_await algorithms::reduce_ordered(f, seq, work, root, op);
  else
    r = co_await algorithms::reduce_circulant(f, seq, work, root, blocks_for(c, opts, *model, circulant_collective::reduce, in.size()), op);
  co_return finish(c, std::move(r));
}

namespace {

// Tags of a second phase start here, past any first phase's rounds.
constexpr std::uint32_t second_phase = 1u << 30;

// Allreduce in `buf` (every rank's operand in, the reduction out).
task<result<void>> allreduce_in_place(communicator& c, std::uint32_t seq, std::span<std::byte> buf,
                                      const erased_reduction& op, algorithm alg, int n) {
  auto& f = c.get_fabric();
  if (alg == algorithm::binomial) {
    // Rank order: the ordered tree to rank 0, then its result broadcast.
    if (auto r = co_await algorithms::reduce_ordered(f, seq, buf, 0, op); !r) co_return r;
    co_return co_await algorithms::broadcast_circulant(f, seq, buf, 0, n, second_phase);
  }
  // Reduce-scatter then all-broadcast of the p segments (balanced, whole elements).
  const std::size_t count = buf.size() / op.elem;
  const block_partition parts(count, static_cast<std::size_t>(c.size()));
  std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()));
  for (std::size_t j = 0; j < counts.size(); ++j) counts[j] = parts.size(j);
  const algorithms::segment_layout lay(op.elem, n, counts);
  if (auto r = co_await algorithms::reduce_scatter_circulant(f, seq, 0, buf, lay, op); !r) co_return r;
  co_return co_await algorithms::allgatherv_circulant(f, seq, second_phase, buf, lay);
}

}  // namespace

task<result<void>> allreduce_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                   erased_reduction op, collective_options opts) {
  const std::uint32_t seq = c.next_seq();
  if (c.broken()) co_return fail(errc::broken);
  if (opts.blocks < 0) co_return refuse(c, "allreduce: blocks must not be negative");
  if (out.size() != in.size())
    co_return refuse(c, "allreduce: out has " + str(out.size() / op.elem) + " elements, in has " + str(in.size() / op.elem));
  std::string why;
  algorithm alg = reduction_algorithm(opts, op, "allreduce", why);
  if (!why.empty()) co_return refuse(c, why);
  if (!in.empty()) std::memmove(out.data(), in.data(), in.size());
  const auto model = model_for(c, opts, "allreduce", why);
  if (!model) co_return refuse(c, why);
  // The rank-ordered tree reduces the whole to rank 0 and broadcasts it: a reduce's block
  // count; the circulant pair moves p parts (Observation 1.4).
  int n = blocks_for(c, opts, *model, alg == algorithm::binomial ? circulant_collective::reduce : circulant_collective::allreduce,
                     in.size());
  // Automatic with an operator whose result does not depend on the order (integers):
  // the circulant pair or the combining broadcast, whichever the model predicts sooner
  // (choose.hpp). Floating-point sums stay circulant, whose every element is reduced on
  // one rank, so that all ranks get the same bits.
  if (opts.alg == algorithm::automatic && alg == algorithm::circulant && op.order_free) {
    const auto ch = choose_allreduce(c.size(), in.size(), *model, c.options().min_block_bytes, opts.blocks);
    alg = ch.alg;
    n = ch.blocks;
  }
  if (alg == algorithm::combining) {
    // Every message carries the whole vector: LogP with L and g lengthened by (b - 1) G.
    const logp::params m = combining_params(in.size(), *model);
    const auto plan = logp::combining_for(c.size(), logp::postal_steps(m));
    deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
    co_return finish(c, co_await algorithms::allreduce_combining(c.get_fabric(), seq, out, op, *plan, m.gap()));
  }
  deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  co_return finish(c, co_await allreduce_in_place(c, seq, out, op, alg, n));
}

task<result<void>> reduce_scatter_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                        std::vector<std::int64_t> counts_in, erased_reduction op, bool regular,
                                        collective_options opts) {
  const std::uint32_t seq = c.next_seq();
  const char* what = regular ? "reduce_scatter_block" : "reduce_scatter";
  if (c.broken()) co_return fail(errc::broken);
  std::string why;
  const auto counts = check_counts(c, counts_in, what, why);
  if (!why.empty()) co_return refuse(c, why);
  if (opts.blocks < 0) co_return refuse(c, std::string(what) + ": blocks must not be negative");
  const std::size_t mine = counts[static_cast<std::size_t>(c.rank())];
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  if (in.size() != total * op.elem)
    co_return refuse(c, std::string(what) + ": in has " + str(in.size() / op.elem) + " elements, the counts add up to " + str(total));
  if (out.size() != mine * op.elem)
    co_return refuse(c, std::string(what) + ": out has " + str(out.size() / op.elem) + " elements, this rank's count is " + str(mine));
  const algorithm alg = reduction_algorithm(opts, op, what, why);
  if (!why.empty()) co_return refuse(c, why);

  const auto model = model_for(c, opts, what, why);
  if (!model) co_return refuse(c, why);
  const auto [least, most] = std::minmax_element(counts.begin(), counts.end());
  const auto kind = alg == algorithm::binomial ? circulant_collective::reduce : circulant_collective::all_roots;
  auto scratch = c.get_fabric().scratch().take(in.size());
  const std::span<std::byte> work = scratch.span();
  if (!in.empty()) std::memcpy(work.data(), in.data(), in.size());
  const algorithms::segment_layout lay(
      op.elem, blocks_for(c, opts, *model, kind, in.size(), *most * op.elem, *least * op.elem), counts);
  deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  result<void> r;
  if (alg == algorithm::binomial)  // rank order: the whole reduction everywhere, then this rank's part
    r = co_await allreduce_in_place(c, seq, work, op, alg, lay.n);
  else
    r = co_await algorithms::reduce_scatter_circulant(c.get_fabric(), seq, 0, work, lay, op);
  if (r && mine) {
    auto seg = work.subspan(lay.offset[static_cast<std::size_t>(c.rank())] * op.elem, out.size());
    std::memcpy(out.data(), seg.data(), out.size());
  }
  co_return finish(c, std::move(r));
}

}  // namespace optcast::detail
