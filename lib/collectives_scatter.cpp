// Entry points of scatter(v) and gather(v) (Alexandrov et al., Section 4): argument
// checks, the virtual order the algorithms work in, the split table, the deadline.
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "algorithms.hpp"
#include "collective_common.hpp"
#include "optcast/collectives.hpp"

namespace optcast::detail {

namespace {

struct scatter_setup {
  std::vector<std::size_t> offset;  // virtual processor v's bytes: [offset[v], offset[v+1])
  std::size_t total = 0;
  algorithm alg = algorithm::split_tree;
  std::shared_ptr<const loggp::split_table> table;
  loggp::cost cost;
};

// Checks what scatter(v) and gather(v) share; `many` is the root's whole buffer, `one`
// this rank's part. An empty string is fine; otherwise the reason to refuse.
std::string prepare(communicator& c, const char* what, std::size_t many, std::size_t one,
                    const std::vector<std::int64_t>& counts, std::size_t elem, int root, const collective_options& opts,
                    scatter_setup& s) {
  const int p = c.size();
  const std::string w(what);
  if (root < 0 || root >= p)
    return w + ": root " + std::to_string(root) + " is not a rank of this " + std::to_string(p) + "-rank communicator";
  if (static_cast<int>(counts.size()) != p)
    return w + ": " + std::to_string(counts.size()) + " counts for " + std::to_string(p) + " ranks";
  for (std::size_t j = 0; j < counts.size(); ++j)
    if (counts[j] < 0) return w + ": counts[" + std::to_string(j) + "] = " + std::to_string(counts[j]) + " is negative";
  if (opts.blocks < 0) return w + ": blocks must not be negative";
  switch (opts.alg) {
    case algorithm::automatic: s.alg = algorithm::split_tree; break;
    case algorithm::short_message:
    case algorithm::long_message:
    case algorithm::binomial:
    case algorithm::split_tree: s.alg = opts.alg; break;
    default: return w + ": the algorithms are split_tree (A_t^k), binomial, long_message and short_message";
  }
  s.offset.assign(static_cast<std::size_t>(p) + 1, 0);
  for (int v = 0; v < p; ++v)
    s.offset[static_cast<std::size_t>(v) + 1] = s.offset[static_cast<std::size_t>(v)] +
                                                 static_cast<std::size_t>(counts[static_cast<std::size_t>((v + root) % p)]) * elem;
  s.total = s.offset.back();
  const auto mine = static_cast<std::size_t>(counts[static_cast<std::size_t>(c.rank())]) * elem;
  if (one != mine)
    return w + ": rank " + std::to_string(c.rank()) + "'s part has " + std::to_string(one / elem) + " elements, counts say " +
           std::to_string(mine / elem);
  if (c.rank() == root && many != s.total)
    return w + ": the root's buffer has " + std::to_string(many / elem) + " elements, the counts add up to " +
           std::to_string(s.total / elem);
  if (s.alg == algorithm::split_tree || s.alg == algorithm::binomial) {
    std::string why;
    const auto m = model_for(c, opts, what, why);
    if (!m) return why;
    // Item sets of the mean size: the recurrence's optimality (Theorem 1) is for equal
    // ones; with irregular counts the same splits are used.
    const double set = static_cast<double>(s.total) / p;
    s.cost = {m->L, m->o, m->g, m->G};
    s.table = loggp::split_table_for(p, s.cost, set, s.alg == algorithm::binomial);
  }
  return {};
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

}  // namespace

task<result<void>> scatterv_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                  std::vector<std::int64_t> counts, std::size_t elem, int root, collective_options opts) {
  const std::uint32_t seq = c.next_seq();
  if (c.broken()) co_return fail(errc::broken);
  scatter_setup s;
  if (auto why = prepare(c, "scatter", in.size(), out.size(), counts, elem, root, opts, s); !why.empty())
    co_return refuse(c, std::move(why));
  // The algorithms read the root's segments in virtual order (root first): rotate a
  // copy unless the root is rank 0. `in` and `out` may overlap at the root.
  scratch_pool::lease rotated;
  std::span<const std::byte> all = in;
  if (c.rank() == root && (root != 0 || overlap(in, out))) {
    rotated = c.get_fabric().scratch().take(s.total);
    rotate(in, rotated.span(), s, c.size(), root, true);
    all = rotated.span();
  }
  deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  auto& f = c.get_fabric();
  result<void> r;
  if (s.alg == algorithm::short_message || s.alg == algorithm::long_message) {
    r = co_await algorithms::scatter_direct(f, seq, all, out, root, s.offset, s.alg == algorithm::short_message ? elem : 0);
  } else if (opts.split_sets && s.alg == algorithm::split_tree) {
    std::vector<std::size_t> segment(static_cast<std::size_t>(c.size()));
    for (std::size_t v = 0; v < segment.size(); ++v) segment[v] = s.offset[v + 1] - s.offset[v];
    const auto plan = loggp::split_sets_plan_for(*s.table, c.size(), segment, s.cost);
    r = co_await algorithms::scatter_pieces(f, seq, all, out, root, *plan, s.offset);
  } else {
    r = co_await algorithms::scatter_tree(f, seq, all, out, root, *s.table, s.offset);
  }
  co_return finish(c, std::move(r));
}

task<result<void>> gatherv_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                 std::vector<std::int64_t> counts, std::size_t elem, int root, collective_options opts) {
  const std::uint32_t seq = c.next_seq();
  if (c.broken()) co_return fail(errc::broken);
  scatter_setup s;
  if (auto why = prepare(c, "gather", out.size(), in.size(), counts, elem, root, opts, s); !why.empty())
    co_return refuse(c, std::move(why));
  // Gathered in virtual order, straight into `out` when the root is rank 0 and `in` is
  // not inside it; rotated into place afterwards otherwise.
  scratch_pool::lease rotated;
  std::span<std::byte> all = out;
  if (c.rank() == root && (root != 0 || overlap(in, out))) {
    rotated = c.get_fabric().scratch().take(s.total);
    all = rotated.span();
  }
  deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  auto& f = c.get_fabric();
  result<void> r;
  if (s.alg == algorithm::short_message || s.alg == algorithm::long_message)
    r = co_await algorithms::gather_direct(f, seq, in, all, root, s.offset, s.alg == algorithm::short_message ? elem : 0);
  else
    r = co_await algorithms::gather_tree(f, seq, in, all, root, *s.table, s.offset);
  if (r && c.rank() == root && rotated.size() > 0) rotate(rotated.span(), out, s, c.size(), root, false);
  co_return finish(c, std::move(r));
}

}  // namespace optcast::detail
