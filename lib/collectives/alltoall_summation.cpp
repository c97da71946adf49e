// Entry points of Karp et al.'s LogP algorithms beyond the single-item broadcast:
// argument checks, working buffers, the deadline. Round loops in their own files.
#include <cstring>
#include <string>
#include <vector>

#include "round_loops.hpp"
#include "collective_common.hpp"
#include "optcast/collectives.hpp"

namespace optcast::erased {

using namespace detail;  // the entry path (call_start) and its helpers

task<result<void>> alltoall(communicator& c, std::span<const std::byte> in, std::span<std::byte> out, std::size_t elem,
                            collective_options opts) {
  call_start call(c, collective::alltoall, opts);
  if (!call.ok()) co_return call.early;
  const auto p = static_cast<std::size_t>(c.size());
  if (!call.accepts(call.traits())) co_return call.early;
  if (in.size() % (p * elem) != 0 &&
      !call.refuse("in has " + std::to_string(in.size() / elem) + " elements, not a multiple of " + std::to_string(p) + " ranks"))
    co_return call.early;
  if (out.size() != in.size() &&
      !call.refuse("out has " + std::to_string(out.size() / elem) + " elements, in has " + std::to_string(in.size() / elem)))
    co_return call.early;
  const std::size_t count = in.size() / elem / p;
  // k items per rank pair: the caller's block count, else one message per pair (under
  // LogP more items only add overheads).
  const std::vector<std::size_t> counts(p, count);
  const auto [row, n] = call.resolve(call.traits(), {}, {in.size()});
  const algorithms::segment_layout lay(elem, n, counts);

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
  co_return co_await call.run(row->runner_for<segments_call>()({&c.get_fabric(), call.seq, from, out, &lay, nullptr}));
}

}  // namespace optcast::erased

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
  const auto v = static_cast<std::size_t>(detail::rooted{c.size(), root}.virt(c.rank()));
  std::vector<logp::summation_plan::segment> out;
  if (v < plan.nodes.size())
    for (const auto& s : plan.nodes[v].local)
      if (s.count) out.push_back(s);
  return out;
}

namespace erased {

using namespace detail;

task<result<void>> summation(communicator& c, std::int64_t n, operand_loader load, std::span<std::byte> out,
                             erased_reduction op, int root, collective_options opts) {
  call_start call(c, collective::summation, opts);
  if (!call.ok() || !call.check_root(root)) co_return call.early;
  if (n < 1 && !call.refuse("n is " + std::to_string(n) + "; there must be at least one operand")) co_return call.early;
  if (!load && !call.refuse("no operands (an empty generator)")) co_return call.early;
  if (!call.accepts(call.traits(&op))) co_return call.early;
  std::string why;
  const auto m = summation_model(c, opts, why);
  if (!why.empty()) co_return refuse(c, why);
  const auto [row, blocks] = call.resolve(call.traits(&op), {}, {});
  call.sig.bytes = static_cast<std::uint64_t>(n) * op.elem;  // the operands' bytes
  co_return co_await call.run(row->runner_for<summation_call>()({&c.get_fabric(), call.seq, out, root, n, m, &op, &load}));
}

}  // namespace erased

}  // namespace optcast
