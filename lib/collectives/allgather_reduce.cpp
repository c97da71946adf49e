// Entry points of the circulant family: argument checks, algorithm and block count,
// working buffers, the deadline. The round loops are in lib/traff/all_roots_circulant.cpp
// and reduce_circulant.cpp.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>

#include "round_loops.hpp"
#include "collective_common.hpp"
#include "optcast/choose.hpp"
#include "optcast/collectives.hpp"

namespace optcast::detail {

namespace {

std::string str(std::size_t v) { return std::to_string(v); }

// allgather and allgatherv, told apart by `regular` (the call's signature names which):
// allgather's every rank contributes what this one does (counts_in empty), and its layout
// is the one kept for the shape (algorithms::kept_layout), with nothing allocated a call.
task<result<void>> allgatherv_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                    std::vector<std::int64_t> counts_in, std::size_t elem, bool regular,
                                    collective_options opts) {
  call_start call(c, regular ? collective::allgather : collective::allgatherv, opts);
  call.sig.elem = static_cast<std::uint32_t>(elem);
  if (!call.ok()) co_return call.early;
  const auto p = static_cast<std::size_t>(c.size());
  std::vector<std::size_t> counts;  // allgatherv's
  std::size_t mine = 0, total = 0, most = 0, least = 0;
  if (regular) {
    mine = most = least = in.size() / std::max<std::size_t>(elem, 1);
    total = mine * p;
    call.equal_counts(mine);
  } else {
    counts = call.counts(counts_in);
    if (!call.ok()) co_return call.early;
    mine = counts[static_cast<std::size_t>(c.rank())];
    total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    least = *lo;
    most = *hi;
  }
  if (!call.accepts(call.traits())) co_return call.early;
  if (in.size() != mine * elem && !call.refuse("in has " + str(in.size() / elem) + " elements, this rank's count is " + str(mine)))
    co_return call.early;
  if (out.size() < total * elem &&
      !call.refuse("out has room for " + str(out.size() / elem) + " elements, the counts add up to " + str(total)))
    co_return call.early;
  const auto model = call.model();
  if (!model) co_return call.early;
  const auto [row, n] = call.resolve(call.traits(), *model, {total * elem, most * elem, least * elem});
  std::shared_ptr<const algorithms::segment_layout> kept;
  std::optional<algorithms::segment_layout> made;
  if (regular) kept = algorithms::kept_layout(true, elem, mine, p, n);
  else made.emplace(elem, n, counts);
  const algorithms::segment_layout& lay = regular ? *kept : *made;
  auto own = lay.block(out, c.rank(), 0).data();  // block 0 starts the segment
  if (mine) std::memmove(own, in.data(), in.size());
  // The operand goes to the runner too where it is apart from out (segments_call::own).
  const auto operand = mine && in.data() != own ? in : std::span<const std::byte>(out);
  co_return co_await call.run(row->runner_for<segments_call>()({&c.get_fabric(), call.seq, operand, out, &lay, nullptr, *model}));
}

// reduce_scatter_block and reduce_scatter, told apart the same way.
task<result<void>> reduce_scatter_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                        std::vector<std::int64_t> counts_in, erased_reduction op, bool regular,
                                        collective_options opts);

}  // namespace

}  // namespace optcast::detail

namespace optcast::erased {

using namespace detail;  // the entry path (call_start) and its helpers

task<result<void>> reduce(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                erased_reduction op, int root, collective_options opts) {
  call_start call(c, collective::reduce, opts);
  if (!call.ok() || !call.check_root(root)) co_return call.early;
  if (c.rank() == root && out.size() != in.size() &&
      !call.refuse("out has " + str(out.size() / op.elem) + " elements at the root, in has " + str(in.size() / op.elem)))
    co_return call.early;
  if (!call.accepts(call.traits(&op))) co_return call.early;
  const auto model = call.model();
  if (!model) co_return call.early;
  const auto [row, n] = call.resolve(call.traits(&op), *model, {in.size()});

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
  co_return co_await call.run(row->runner_for<reduction_call>()(
      {&c.get_fabric(), call.seq, work, root, n, &op, *model}));
}

task<result<void>> allreduce(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                   erased_reduction op, collective_options opts) {
  call_start call(c, collective::allreduce, opts);
  if (!call.ok()) co_return call.early;
  if (out.size() != in.size() &&
      !call.refuse("out has " + str(out.size() / op.elem) + " elements, in has " + str(in.size() / op.elem)))
    co_return call.early;
  if (!call.accepts(call.traits(&op))) co_return call.early;
  const auto model = call.model();
  if (!model) co_return call.early;
  const auto [row, n] = call.resolve(call.traits(&op), *model, {in.size()});
  // The runner takes the operand from `in` (reduction_call::in), unless in and out
  // overlap without being the same: then out holds it, moved there first.
  std::span<const std::byte> operand = in;
  const auto at = [](const std::byte* q) { return reinterpret_cast<std::uintptr_t>(q); };
  if (!in.empty() && in.data() != out.data() && at(in.data()) < at(out.data()) + out.size() &&
      at(out.data()) < at(in.data()) + in.size()) {
    std::memmove(out.data(), in.data(), in.size());
    operand = out;
  }
  co_return co_await call.run(row->runner_for<reduction_call>()({&c.get_fabric(), call.seq, out, 0, n, &op, *model, operand}));
}

task<result<void>> allgather(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, std::size_t elem,
                             collective_options opts) {
  return detail::allgatherv_bytes(c, in, out, {}, elem, true, opts);
}

task<result<void>> allgatherv(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                              std::vector<std::int64_t> counts, std::size_t elem, collective_options opts) {
  return detail::allgatherv_bytes(c, in, out, std::move(counts), elem, false, opts);
}

task<result<void>> reduce_scatter_block(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                        erased_reduction op, collective_options opts) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(c.size()), static_cast<std::int64_t>(out.size() / std::max<std::size_t>(op.elem, 1)));
  return detail::reduce_scatter_bytes(c, in, out, std::move(counts), std::move(op), true, opts);
}

task<result<void>> reduce_scatter(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                  std::vector<std::int64_t> counts, erased_reduction op, collective_options opts) {
  return detail::reduce_scatter_bytes(c, in, out, std::move(counts), std::move(op), false, opts);
}

}  // namespace optcast::erased

namespace optcast::detail {

namespace {

task<result<void>> reduce_scatter_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                        std::vector<std::int64_t> counts_in, erased_reduction op, bool regular,
                                        collective_options opts) {
  call_start call(c, regular ? collective::reduce_scatter_block : collective::reduce_scatter, opts);
  if (!call.ok()) co_return call.early;
  const auto counts = call.counts(counts_in);
  if (!call.ok()) co_return call.early;
  const std::size_t mine = counts[static_cast<std::size_t>(c.rank())];
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  if (in.size() != total * op.elem &&
      !call.refuse("in has " + str(in.size() / op.elem) + " elements, the counts add up to " + str(total)))
    co_return call.early;
  if (out.size() != mine * op.elem &&
      !call.refuse("out has " + str(out.size() / op.elem) + " elements, this rank's count is " + str(mine)))
    co_return call.early;
  call_traits traits = call.traits(&op);
  if (!call.equal_parts_only(counts, traits) || !call.accepts(traits)) co_return call.early;
  const auto model = call.model();
  if (!model) co_return call.early;

  const auto [least, most] = std::minmax_element(counts.begin(), counts.end());
  const auto [row, n] = call.resolve(traits, *model, {in.size(), *most * op.elem, *least * op.elem, op.commutative, op.order_free});
  auto scratch = c.get_fabric().scratch().take(in.size());
  const std::span<std::byte> work = scratch.span();
  if (!in.empty()) std::memcpy(work.data(), in.data(), in.size());
  const algorithms::segment_layout lay(op.elem, n, counts);
  auto r = co_await call.run(row->runner_for<segments_call>()({&c.get_fabric(), call.seq, work, work, &lay, &op, *model}));
  if (r && mine) {
    auto seg = work.subspan(lay.offset[static_cast<std::size_t>(c.rank())] * op.elem, out.size());
    std::memcpy(out.data(), seg.data(), out.size());
  }
  co_return r;
}

}  // namespace

}  // namespace optcast::detail
