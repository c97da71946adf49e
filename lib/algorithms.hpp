// The algorithm layer: one coroutine per algorithm, the processor's round loop written
// against the fabric only. The collectives layer (collectives.cpp) validates arguments,
// picks the algorithm and the block count, and owns the deadline; these assume valid input.
#pragma once

#include <cstdint>
#include <span>

#include "optcast/fabric.hpp"
#include "optcast/task.hpp"

namespace optcast::algorithms {

// Träff, Algorithm 1: n blocks from `root` in n - 1 + ceil(log2 p) rounds.
task<result<void>> broadcast_circulant(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                       int root, int n);

// Binomial tree of the whole buffer: ceil(log2 p) rounds at the root.
task<result<void>> broadcast_binomial(fabric& f, std::uint32_t seq, std::span<std::byte> buf,
                                      int root);

}  // namespace optcast::algorithms
