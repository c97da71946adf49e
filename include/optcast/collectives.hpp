// Collectives as free functions on a communicator, each an awaitable task:
//   if (auto r = co_await optcast::broadcast(comm, bytes, root); !r) ...
// or blocking, from code that is not a coroutine:
//   auto r = optcast::run(comm, optcast::broadcast(comm, bytes, root));
#pragma once

#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include <concepts>
#include <cstdint>
#include <limits>
#include <vector>

#include "optcast/choose.hpp"
#include "optcast/communicator.hpp"
#include "optcast/erased.hpp"
#include "optcast/logp.hpp"
#include "optcast/reduction.hpp"

namespace optcast {

template <class T>
  requires std::is_trivially_copyable_v<T>
task<result<void>> broadcast(communicator& c, std::span<T> data, int root,
                             broadcast_options opts = {}) {
  return broadcast(c, std::as_writable_bytes(data), root, opts);
}

// The block count the automatic choice uses for `bytes` on p ranks: it minimises
// (n - 1 + q)(alpha + beta * bytes / n), i.e. n = sqrt((q - 1) * beta * bytes / alpha),
// kept to blocks of at least min_block_bytes.
int automatic_block_count(std::size_t bytes, int p, const communicator_options& o) noexcept;

// What broadcast(c, `bytes` bytes, root, opts) runs on this communicator: the algorithm
// and block count, with the model's prediction and every candidate (choose.hpp). A fixed
// algorithm keeps the block count the model gives it (or the caller's). An error, with
// the reason in *why, where broadcast would refuse the options.
result<broadcast_choice> plan_broadcast(communicator& c, std::size_t bytes, const broadcast_options& opts = {},
                                        std::string* why = nullptr);

// What a call of another collective moves, for plan_collective: `bytes` in all (what a
// reduction reduces, what allgather(v) gathers), the largest and smallest rank's part
// for the all-roots ones, and the operator's properties (call_traits::ports is filled
// from the communicator).
struct call_shape {
  std::size_t bytes = 0;
  std::size_t largest = 0, smallest = 0;
  bool commutative = true, order_free = true;
  bool operator==(const call_shape&) const = default;
};
struct collective_plan {
  algorithm alg = algorithm::automatic;
  int blocks = 1;
};
// What a call of `coll` with `opts` runs on this communicator (the automatic choice
// resolved, the block count by its algorithm's rule), without running it; an error,
// with the reason in *why, where the call would refuse the options. Broadcast: as
// plan_broadcast.
result<collective_plan> plan_collective(communicator& c, collective coll, const call_shape& shape,
                                        const collective_options& opts = {}, std::string* why = nullptr);

// Returns on a rank once every rank of the communicator has called it (no rank leaves
// before the last one enters): the dissemination barrier, ceil(log_{k+1} p) rounds of
// empty messages on k ports.
task<result<void>> barrier(communicator& c, collective_options opts = {});

// Point-to-point messages outside any collective, matched by (peer, user_tag) in order,
// on this communicator only. Tags go up to seq_layout::max_user_tag (2^20 - 1; a larger
// one is refused). Both ranks must agree on the size, as for the fabric.
task<result<void>> send(communicator& c, int peer, std::uint32_t user_tag,
                        std::span<const std::byte> data,
                        std::optional<std::chrono::milliseconds> timeout = {});
task<result<void>> recv(communicator& c, int peer, std::uint32_t user_tag,
                        std::span<std::byte> data,
                        std::optional<std::chrono::milliseconds> timeout = {});
// The first message with `user_tag` from any rank (MPI_ANY_SOURCE); its sender's rank.
// Messages that have arrived are taken earliest first; a receive of a named peer posted
// before this one takes that peer's message first. On the fabrics whose
// fabric::receives_from_any() says so (TCP, local); elsewhere refused with
// invalid_argument.
task<result<int>> recv_any(communicator& c, std::uint32_t user_tag, std::span<std::byte> data,
                           std::optional<std::chrono::milliseconds> timeout = {});

// Counts as given (any integer type), for the byte-level entry points to check: a
// negative count, or one too large for int64, stays visible as negative.
template <std::integral C>
std::vector<std::int64_t> checked_counts(std::span<const C> counts) {
  std::vector<std::int64_t> out;
  out.reserve(counts.size());
  for (C c : counts) {
    if constexpr (std::is_signed_v<C>)
      out.push_back(static_cast<std::int64_t>(c));
    else
      out.push_back(static_cast<std::uint64_t>(c) > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                        ? -1
                        : static_cast<std::int64_t>(c));
  }
  return out;
}


// Scatter and gather (Alexandrov, Ionescu, Schauser, Scheiman, "LogGP", Section 4). The
// root's buffer holds every rank's segment in rank order; every rank passes the same
// counts, root and options. Algorithms: split_tree (the default: A_t^k, the split tree
// of least LogGP time for the model's L, o, g, G, optimal for one item per rank),
// binomial (splits in halves, Lemma 2), long_message (the root sends every rank its
// segment) and short_message (one message per element). The model is the caller's
// (`opts.model`), else the fabric's own (the simulator's), else the communicator's.

// The root's `in` holds p * out.size() elements (elsewhere `in` is not read and may be
// empty); rank j receives elements [j out.size(), (j+1) out.size()) in `out`.
template <class T>
  requires std::is_trivially_copyable_v<T>
task<result<void>> scatter(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out, int root,
                           collective_options opts = {}) {
  return erased::scatter(c, std::as_bytes(in), std::as_writable_bytes(out), sizeof(T), root, opts);
}

// Rank j receives counts[j] elements (any may be 0), packed in rank order in the root's
// `in`, which holds exactly their sum; out.size() must be counts[rank].
template <class T, std::integral C>
  requires std::is_trivially_copyable_v<T>
task<result<void>> scatterv(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                            std::span<const C> counts, int root, collective_options opts = {}) {
  return erased::scatterv(c, std::as_bytes(in), std::as_writable_bytes(out), checked_counts(counts), sizeof(T), root, opts);
}

// Every rank's `in` (all the same length) lands in the root's `out` in rank order: out
// has p * in.size() elements at the root (elsewhere it is not written and may be empty).
template <class T>
  requires std::is_trivially_copyable_v<T>
task<result<void>> gather(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out, int root,
                          collective_options opts = {}) {
  return erased::gather(c, std::as_bytes(in), std::as_writable_bytes(out), sizeof(T), root, opts);
}

// Rank j sends counts[j] elements; the root's `out` holds exactly their sum, in rank order.
template <class T, std::integral C>
  requires std::is_trivially_copyable_v<T>
task<result<void>> gatherv(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                           std::span<const C> counts, int root, collective_options opts = {}) {
  return erased::gatherv(c, std::as_bytes(in), std::as_writable_bytes(out), checked_counts(counts), sizeof(T), root, opts);
}

// The circulant family (Träff, Observation 1 and Appendix A). Every rank passes the same
// counts, root, operator and options; element type T must be trivially copyable. Each
// takes n - 1 + ceil(log2 p) rounds (allreduce twice that), n the block count. Bad
// arguments give errc::invalid_argument with the reason in comm.last_error(); sizes that
// disagree between ranks surface as errc::size_mismatch (or a timeout on ranks that
// wait for a peer that failed).

// Every rank's `in` (all the same length) lands in `out` in rank order: out has
// p * in.size() elements. `in` may be this rank's part of `out`.
template <class T>
  requires std::is_trivially_copyable_v<T>
task<result<void>> allgather(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                             collective_options opts = {}) {
  return erased::allgather(c, std::as_bytes(in), std::as_writable_bytes(out), sizeof(T), opts);
}

// Rank j contributes counts[j] elements (any may be 0); they land in `out` in rank
// order, so out needs at least sum(counts) elements. in.size() must be counts[rank].
// Ranks that contribute nothing cost nothing in packing.
template <class T, std::integral C>
  requires std::is_trivially_copyable_v<T>
task<result<void>> allgatherv(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                              std::span<const C> counts, collective_options opts = {}) {
  return erased::allgatherv(c, std::as_bytes(in), std::as_writable_bytes(out), checked_counts(counts), sizeof(T), opts);
}

// The elementwise reduction of every rank's `in` lands in `out` at the root (out must
// have in.size() elements there; it is not used elsewhere and may be empty). Circulant
// for commutative operators, the rank-ordered binomial tree otherwise (reduction.hpp).
template <class T>
task<result<void>> reduce(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                          reduction<std::type_identity_t<T>> op, int root, collective_options opts = {}) {
  return erased::reduce(c, std::as_bytes(in), std::as_writable_bytes(out), op.erased(), root, opts);
}

// The reduction of every rank's `in` in `out` on every rank (the same length):
// reduce_scatter then allgather on the circulant graph. `in` may be `out`.
template <class T>
task<result<void>> allreduce(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                             reduction<std::type_identity_t<T>> op, collective_options opts = {}) {
  return erased::allreduce(c, std::as_bytes(in), std::as_writable_bytes(out), op.erased(), opts);
}

// `in` is p blocks of out.size() elements; rank j gets the reduction of everyone's
// block j in `out`.
template <class T>
task<result<void>> reduce_scatter_block(communicator& c, std::span<const std::type_identity_t<T>> in,
                                        std::span<T> out, reduction<std::type_identity_t<T>> op,
                                        collective_options opts = {}) {
  return erased::reduce_scatter_block(c, std::as_bytes(in), std::as_writable_bytes(out), op.erased(), opts);
}

// `in` is p segments of counts[0], counts[1], ... elements; rank j gets the reduction of
// everyone's segment j in `out` (counts[rank] elements).
template <class T, std::integral C>
task<result<void>> reduce_scatter(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                                  std::span<const C> counts, reduction<std::type_identity_t<T>> op,
                                  collective_options opts = {}) {
  return erased::reduce_scatter(c, std::as_bytes(in), std::as_writable_bytes(out), checked_counts(counts), op.erased(), opts);
}

// All-to-all personalized (Karp et al. 4.1, the staggered schedule): `in` is p blocks of
// in.size() / p elements, block j for rank j; afterwards block j of `out` holds what
// rank j sent this rank. out.size() == in.size(); they may overlap. opts.blocks splits
// every block into that many items (default 1). Under LogP with g >= o it takes
// L + 2o + g (k (p - 1) - 1), the lower bound.
template <class T>
  requires std::is_trivially_copyable_v<T>
task<result<void>> alltoall(communicator& c, std::span<const std::type_identity_t<T>> in, std::span<T> out,
                            collective_options opts = {}) {
  return erased::alltoall(c, std::as_bytes(in), std::as_writable_bytes(out), sizeof(T), opts);
}

// Optimal summation (Karp et al., Section 5): n operands X_0 .. X_{n-1} combined into
// X_0 (+) X_1 (+) ... (+) X_{n-1} at `root`, in the least time the LogP model allows
// when one application of `op` takes one time unit. The library distributes the
// operands: each rank reads only its share (summation_share), numbered so that any
// associative operator works, commutative or not (logp.hpp, summation_plan).
//
// L, o and g are in units of one application of the operator: opts.model, else the
// fabric's model (the simulator's), else the communicator's, read in microseconds (an
// application taken as 1 us until calibration says otherwise).
//
// The root's result is the sum; other ranks get a value-initialised T.
template <class T>
  requires std::is_trivially_copyable_v<T> && std::default_initializable<T>
task<result<T>> summation(communicator& c, std::int64_t n, std::function<T(std::int64_t)> operand,
                          reduction<std::type_identity_t<T>> op, int root = 0, collective_options opts = {}) {
  T out{};
  auto load = [&operand](std::int64_t i, std::byte* dst) {
    const T v = operand(i);
    std::memcpy(dst, &v, sizeof(T));
  };
  auto r = co_await erased::summation(c, n, load, std::as_writable_bytes(std::span<T>(&out, 1)), op.erased(), root, opts);
  if (!r) co_return fail(r.error());
  if (c.rank() != root) out = T{};  // it held this rank's partial sum
  co_return out;
}

// The same with all n operands in memory on every rank (each reads only its share).
template <class T>
  requires std::is_trivially_copyable_v<T> && std::default_initializable<T>
task<result<T>> summation(communicator& c, std::span<const T> operands,
                          reduction<std::type_identity_t<T>> op, int root = 0, collective_options opts = {}) {
  return summation<T>(
      c, static_cast<std::int64_t>(operands.size()),
      [operands](std::int64_t i) { return operands[static_cast<std::size_t>(i)]; }, std::move(op), root, opts);
}

// The plan summation() runs for n operands on this communicator, and the operand index
// ranges this rank sums itself (empty if the plan leaves it idle). Throws
// std::invalid_argument for n < 1 or impossible model parameters.
logp::summation_plan summation_plan_for(communicator& c, std::int64_t n, collective_options opts = {});
std::vector<logp::summation_plan::segment> summation_share(communicator& c, std::int64_t n, int root = 0,
                                                          collective_options opts = {});

// Sub-communicators (MPI_Comm_split's semantics). Collective over `parent`: every rank of
// it calls, in the same order as its other collectives, one creation at a time per
// process. Ranks of one `color` (>= 0) get a communicator of their own, ranked by `key`,
// ties by their rank in `parent`; a negative color gets none (nullopt). No new
// rendezvous: the sub-communicator uses its parent's connections, and its calls never
// match the parent's or any other communicator's (seq_layout). It shares its parent's
// fate: a failure on either breaks both (a member's death, the communicators it is in:
// optcast/survive.hpp), and errors name the ranks of the job. Every
// collective and algorithm runs on it. Fails with errc::limit_exceeded when some member
// has seq_layout::ids - 2 sub-communicators alive, with errc::invalid_argument on every
// rank when a rank's arguments are wrong (comm.last_error() says which).
task<result<std::optional<communicator>>> split(communicator& parent, int color, int key = 0);
// The communicator of `ranks` (ranks of `parent`, in their new order) for its members,
// nullopt for the others. Collective over `parent` like split(); every rank must give
// the same list.
task<result<std::optional<communicator>>> subset(communicator& parent, std::vector<int> ranks);
// The rank in the job (the fabric's rank numbering) of rank `r` of `c`.
int job_rank(const communicator& c, int r);

}  // namespace optcast
