// Entry points of scatter(v) and gather(v) (Alexandrov et al., Section 4): argument
// checks, the virtual order the algorithms work in, the split table, the deadline.
#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "round_loops.hpp"
#include "collective_common.hpp"
#include "optcast/collectives.hpp"

namespace optcast::detail {

namespace {

struct scatter_setup {
  std::vector<std::size_t> table;  // scatterv, gatherv: virtual processor v's bytes [table[v], table[v+1])
  segment_offsets offset;          // the table, or equal parts
  std::size_t total = 0;
  const entry* row = nullptr;
  loggp_params model{};
};

// Checks what scatter(v) and gather(v) share; `many` is the root's whole buffer, `one`
// this rank's part, `given` the counts (none: every rank's part is `one`, as long as
// its own). False after a refusal.
bool prepare(call_start& call, std::size_t many, std::size_t one, const std::optional<std::vector<std::int64_t>>& given,
             std::size_t elem, int root, scatter_setup& s) {
  communicator& c = call.comm;
  const int p = c.size();
  call.sig.elem = static_cast<std::uint32_t>(elem);
  if (!call.check_root(root)) return false;
  std::vector<std::size_t> counts;
  if (given) {
    counts = call.counts(*given);
    if (!call.ok()) return false;
  } else {
    call.equal_counts(one / elem);
  }
  // Equal counts given are equal parts, so that scatterv with them runs what scatter
  // runs; the multi-lane rows take equal parts only.
  const bool irregular = given && std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) != counts.end();
  call_traits traits = call.traits();
  if (!call.equal_parts_only(counts, traits) || !call.accepts(traits)) return false;
  // Where the topology has lanes, the multi-lane row's prediction is weighed: it needs the
  // model and the parts' size.
  loggp_params lanes_model{};
  if (traits.lanes) {
    const auto m = call.model();
    if (!m) return false;
    lanes_model = *m;
  }
  const std::size_t part = irregular ? 0 : (given ? (counts.empty() ? 0 : counts[0] * elem) : one);
  s.row = call.resolve(traits, lanes_model, {part * static_cast<std::size_t>(p), part, part}).row;
  s.offset.p = static_cast<std::size_t>(p);
  if (irregular) {
    const rooted ranks{p, root};
    s.table.assign(static_cast<std::size_t>(p) + 1, 0);
    for (int v = 0; v < p; ++v)
      s.table[static_cast<std::size_t>(v) + 1] =
          s.table[static_cast<std::size_t>(v)] + counts[static_cast<std::size_t>(ranks.real(v))] * elem;
    s.offset.table = s.table;
    const auto mine = counts[static_cast<std::size_t>(c.rank())] * elem;
    if (one != mine)
      return call.refuse("rank " + std::to_string(c.rank()) + "'s part has " + std::to_string(one / elem) +
                         " elements, counts say " + std::to_string(mine / elem));
  } else {
    if (given && one != part)
      return call.refuse("rank " + std::to_string(c.rank()) + "'s part has " + std::to_string(one / elem) +
                         " elements, counts say " + std::to_string(part / elem));
    s.offset.each = part;
  }
  s.total = s.offset.back();
  if (c.rank() == root && many != s.total)
    return call.refuse("the root's buffer has " + std::to_string(many / elem) + " elements, the counts add up to " +
                       std::to_string(s.total / elem));
  if (s.row->uses_model) {
    const auto m = call.model();
    if (!m) return false;
    s.model = *m;
  }
  return true;
}

// Rank order (ranks 0..root-1, then root..p-1) to virtual order (root..p-1, then
// 0..root-1), or back: `head` bytes belong to ranks root..p-1.
void rotate(std::span<const std::byte> from, std::span<std::byte> to, const scatter_setup& s, int p, int root, bool to_virtual) {
  const std::size_t head = s.offset[static_cast<std::size_t>(p - root)], lead = s.total - head;
  const std::size_t head_at = to_virtual ? lead : 0, head_to = to_virtual ? 0 : lead;
  const std::size_t lead_at = to_virtual ? 0 : head, lead_to = to_virtual ? head : 0;
  if (head) std::memcpy(to.data() + head_to, from.data() + head_at, head);
  if (lead) std::memcpy(to.data() + lead_to, from.data() + lead_at, lead);
}

bool overlap(std::span<const std::byte> a, std::span<const std::byte> b) {
  return !a.empty() && !b.empty() && a.data() < b.data() + b.size() && b.data() < a.data() + a.size();
}

task<result<void>> scatter_any(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                               std::optional<std::vector<std::int64_t>> counts, std::size_t elem, int root,
                               collective_options opts) {
  call_start call(c, collective::scatter, opts);
  scatter_setup s;
  if (!call.ok() || !prepare(call, in.size(), out.size(), counts, elem, root, s)) co_return call.early;
  // The algorithms read the root's segments in virtual order (root first): rotate a
  // copy unless the root is rank 0. `in` and `out` may overlap at the root.
  scratch_pool::lease rotated;
  std::span<const std::byte> all = in;
  if (c.rank() == root && (root != 0 || overlap(in, out))) {
    rotated = c.get_fabric().scratch().take(s.total);
    rotate(in, rotated.span(), s, c.size(), root, true);
    all = rotated.span();
  }
  co_return co_await call.run(s.row->runner_for<scatter_call>()(
      {&c.get_fabric(), call.seq, all, out, root, s.offset, elem, s.model, opts.split_sets}));
}

task<result<void>> gather_any(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                              std::optional<std::vector<std::int64_t>> counts, std::size_t elem, int root,
                              collective_options opts) {
  call_start call(c, collective::gather, opts);
  scatter_setup s;
  if (!call.ok() || !prepare(call, out.size(), in.size(), counts, elem, root, s)) co_return call.early;
  // Gathered in virtual order, straight into `out` when the root is rank 0 and `in` is
  // not inside it; rotated into place afterwards otherwise.
  scratch_pool::lease rotated;
  std::span<std::byte> all = out;
  if (c.rank() == root && (root != 0 || overlap(in, out))) {
    rotated = c.get_fabric().scratch().take(s.total);
    all = rotated.span();
  }
  auto r = co_await call.run(
      s.row->runner_for<scatter_call>()({&c.get_fabric(), call.seq, in, all, root, s.offset, elem, s.model, false}));
  if (r && c.rank() == root && rotated.size() > 0) rotate(rotated.span(), out, s, c.size(), root, false);
  co_return r;
}

}  // namespace

}  // namespace optcast::detail

namespace optcast::erased {

using detail::gather_any;
using detail::scatter_any;

task<result<void>> scatterv(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                  std::vector<std::int64_t> counts, std::size_t elem, int root, collective_options opts) {
  return scatter_any(c, in, out, std::move(counts), elem, root, opts);
}

task<result<void>> scatter(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, std::size_t elem,
                                 int root, collective_options opts) {
  return scatter_any(c, in, out, std::nullopt, elem, root, opts);
}

task<result<void>> gatherv(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                 std::vector<std::int64_t> counts, std::size_t elem, int root, collective_options opts) {
  return gather_any(c, in, out, std::move(counts), elem, root, opts);
}

task<result<void>> gather(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, std::size_t elem,
                                int root, collective_options opts) {
  return gather_any(c, in, out, std::nullopt, elem, root, opts);
}

}  // namespace optcast::erased
