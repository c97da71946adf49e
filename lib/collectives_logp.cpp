// Entry points of Karp et al.'s LogP algorithms beyond the single-item broadcast:
// argument checks, working buffers, the deadline. Round loops in their own files.
#include <cstring>
#include <string>
#include <vector>

#include "algorithms.hpp"
#include "collective_common.hpp"
#include "optcast/collectives.hpp"

namespace optcast::detail {

task<result<void>> alltoall_bytes(communicator& c, std::span<const std::byte> in, std::span<std::byte> out,
                                  std::size_t elem, collective_options opts) {
  const std::uint32_t seq = c.next_seq();
  if (c.broken()) co_return fail(errc::broken);
  const auto p = static_cast<std::size_t>(c.size());
  if (opts.blocks < 0) co_return refuse(c, "alltoall: blocks must not be negative");
  if (opts.alg != algorithm::automatic && opts.alg != algorithm::staggered)
    co_return refuse(c, "alltoall: the algorithm is staggered (Karp et al. 4.1)");
  if (in.size() % (p * elem) != 0)
    co_return refuse(c, "alltoall: in has " + std::to_string(in.size() / elem) + " elements, not a multiple of " +
                            std::to_string(p) + " ranks");
  if (out.size() != in.size())
    co_return refuse(c, "alltoall: out has " + std::to_string(out.size() / elem) + " elements, in has " +
                            std::to_string(in.size() / elem));
  const std::size_t count = in.size() / elem / p;
  // k items per rank pair: the caller's block count, else one message per pair (under
  // LogP more items only add overheads).
  const int k = opts.blocks ? opts.blocks : 1;
  const std::vector<std::size_t> counts(p, count);
  const algorithms::segment_layout lay(elem, k, counts);

  // Sends read `in` while receives write `out`: if they share memory, send from a copy.
  std::vector<std::byte> copy;
  std::span<std::byte> from(const_cast<std::byte*>(in.data()), in.size());
  const bool overlap = !in.empty() && in.data() < out.data() + out.size() && out.data() < in.data() + in.size();
  if (overlap) {
    copy.assign(in.begin(), in.end());
    from = copy;
  }
  const auto mine = static_cast<std::size_t>(c.rank()) * count * elem;
  if (count) std::memmove(out.data() + mine, from.data() + mine, count * elem);
  deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  auto r = co_await algorithms::alltoall_staggered(c.get_fabric(), seq, from, out, lay);
  co_return finish(c, std::move(r));
}

}  // namespace optcast::detail

namespace optcast {

namespace {

// The summation's model: in operator applications (see collectives.hpp).
logp::params summation_model(communicator& c, const collective_options& opts, std::string& why) {
  if (opts.model || c.get_fabric().cost_model()) {
    const auto m = detail::model_for(c, opts, "summation", why);
    if (!m) return {};
    return {m->L, m->o, m->g};
  }
  const auto& m = c.options().model;
  return {m.L * 1e6, m.o * 1e6, m.g * 1e6};
}

}  // namespace

logp::summation_plan summation_plan_for(communicator& c, std::int64_t n, collective_options opts) {
  std::string why;
  const auto m = summation_model(c, opts, why);
  if (!why.empty()) throw std::invalid_argument(why);
  return logp::summation_schedule(n, c.size(), m);
}

std::vector<logp::summation_plan::segment> summation_share(communicator& c, std::int64_t n, int root,
                                                          collective_options opts) {
  if (root < 0 || root >= c.size()) throw std::invalid_argument("summation_share: root is not a rank of the communicator");
  const auto plan = summation_plan_for(c, n, opts);
  const auto v = static_cast<std::size_t>((c.rank() - root + c.size()) % c.size());
  std::vector<logp::summation_plan::segment> out;
  if (v < plan.nodes.size())
    for (const auto& s : plan.nodes[v].local)
      if (s.count) out.push_back(s);
  return out;
}

namespace detail {

task<result<void>> summation_bytes(communicator& c, std::int64_t n, operand_loader load, std::span<std::byte> out,
                                   erased_reduction op, int root, collective_options opts) {
  const std::uint32_t seq = c.next_seq();
  if (c.broken()) co_return fail(errc::broken);
  if (root < 0 || root >= c.size())
    co_return refuse(c, "summation: root " + std::to_string(root) + " is not a rank of this " +
                            std::to_string(c.size()) + "-rank communicator");
  if (n < 1) co_return refuse(c, "summation: n is " + std::to_string(n) + "; there must be at least one operand");
  if (!load) co_return refuse(c, "summation: no operands (an empty generator)");
  if (opts.alg != algorithm::automatic && opts.alg != algorithm::logp_tree)
    co_return refuse(c, "summation: the algorithm is logp_tree (Karp et al. 5, the reversed broadcast tree)");
  std::string why;
  const auto m = summation_model(c, opts, why);
  if (!why.empty()) co_return refuse(c, why);
  // Summation plans differ with n, so they are not cached; O(P log n) to build.
  const auto plan = logp::summation_schedule(n, c.size(), m);
  deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  auto r = co_await algorithms::summation_tree(c.get_fabric(), seq, plan, root, out, op, load);
  co_return finish(c, std::move(r));
}

}  // namespace detail

}  // namespace optcast
