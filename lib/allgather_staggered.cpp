#include <vector>

#include "algorithms.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

namespace {

// Slot s = (d - 1) k + b: block b of this rank's segment to rank r + d. In every slot
// all ranks send to distinct ranks (r -> r + d is a permutation), so each rank receives
// exactly one message per slot.
task<result<void>> staggered_sends(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                   const segment_layout& lay) {
  const int p = f.size(), r = f.rank();
  for (int d = 1; d < p; ++d)
    for (int b = 0; b < lay.n; ++b) {
      const auto block = lay.block(buf, r, b);
      if (block.empty()) continue;
      if (auto res = co_await f.send((r + d) % p, {seq, static_cast<std::uint32_t>(b)}, block); !res)
        co_return fail(res.error());
    }
  co_return result<void>{};
}

task<result<void>> staggered_receives(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                      const segment_layout& lay) {
  const int p = f.size(), r = f.rank();
  std::vector<operation> ops;
  ops.reserve(static_cast<std::size_t>(p - 1) * static_cast<std::size_t>(lay.n));
  for (int d = 1; d < p; ++d)
    for (int b = 0; b < lay.n; ++b) {
      const int from = (r - d + p) % p;
      const auto block = lay.block(buf, from, b);
      if (!block.empty()) ops.push_back(f.recv(from, {seq, static_cast<std::uint32_t>(b)}, block));
    }
  co_return co_await when_all(std::span<operation>(ops));
}

}  // namespace

// Karp et al., Section 4.1: rank i sends its items to i + 1, ..., i + P - 1 in that
// order, one every g, and receives one every g: L + 2o + g (k (P - 1) - 1) for k items
// per rank, the lower bound.
task<result<void>> allgatherv_staggered(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                        const segment_layout& lay) {
  if (f.size() == 1) co_return result<void>{};
  std::vector<task<result<void>>> both;
  both.push_back(staggered_receives(f, seq, buf, lay));
  both.push_back(staggered_sends(f, seq, buf, lay));
  for (auto& r : co_await when_all_tasks(std::move(both)))
    if (!r) co_return r;
  co_return result<void>{};
}

}  // namespace optcast::algorithms
