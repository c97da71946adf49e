#include <functional>
#include <vector>

#include "round_loops.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

namespace {

// What slot (d, b) carries: item b for rank r + d (sent), or from rank r - d (received).
using item_of = std::function<std::span<std::byte>(int peer, int b)>;

// Slot s = (d - 1) k + b: item b to rank r + d. In every slot all ranks send to distinct
// ranks (r -> r + d is a permutation), so each rank receives exactly one message per slot.
task<result<void>> staggered_sends(fabric& f, std::uint32_t seq, int k, item_of out) {
  const int p = f.size(), r = f.rank();
  for (int d = 1; d < p; ++d)
    for (int b = 0; b < k; ++b) {
      const int to = (r + d) % p;
      const auto item = out(to, b);
      if (item.empty()) continue;
      if (auto res = co_await f.send(to, {seq, static_cast<std::uint32_t>(b)}, item); !res)
        co_return fail(res.error());
    }
  co_return result<void>{};
}

task<result<void>> staggered_receives(fabric& f, std::uint32_t seq, int k, item_of in) {
  const int p = f.size(), r = f.rank();
  std::vector<operation> ops;
  ops.reserve(static_cast<std::size_t>(p - 1) * static_cast<std::size_t>(k));
  for (int d = 1; d < p; ++d)
    for (int b = 0; b < k; ++b) {
      const int from = (r - d + p) % p;
      const auto item = in(from, b);
      if (!item.empty()) ops.push_back(f.recv(from, {seq, static_cast<std::uint32_t>(b)}, item));
    }
  co_return co_await when_all(std::span<operation>(ops));
}

// Receives all posted at once, sends one after the other, both under way together.
task<result<void>> staggered(fabric& f, std::uint32_t seq, int k, item_of out, item_of in) {
  if (f.size() == 1) co_return result<void>{};
  std::vector<task<result<void>>> both;
  both.push_back(staggered_receives(f, seq, k, std::move(in)));
  both.push_back(staggered_sends(f, seq, k, std::move(out)));
  for (auto& r : co_await when_all_tasks(std::move(both)))
    if (!r) co_return r;
  co_return result<void>{};
}

}  // namespace

// Karp et al., Section 4.1: rank i sends its items to i + 1, ..., i + P - 1 in that
// order, one every g, and receives one every g: L + 2o + g (k (P - 1) - 1) for k items
// per rank, the lower bound.
task<result<void>> allgatherv_staggered(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                        const segment_layout& lay) {
  const int r = f.rank();
  return staggered(
      f, seq, lay.n, [&lay, buf, r](int, int b) { return lay.block(buf, r, b); },
      [&lay, buf](int from, int b) { return lay.block(buf, from, b); });
}

// The same schedule, "optimal for all-to-all personalized communication" (4.1): the
// item for rank r + d is this rank's segment r + d of `in`.
task<result<void>> alltoall_staggered(fabric& f, std::uint32_t seq, std::span<std::byte> in,
                                      std::span<std::byte> out, const segment_layout& lay) {
  return staggered(
      f, seq, lay.n, [&lay, in](int to, int b) { return lay.block(in, to, b); },
      [&lay, out](int from, int b) { return lay.block(out, from, b); });
}

}  // namespace optcast::algorithms
