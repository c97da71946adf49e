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
