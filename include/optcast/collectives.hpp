// Collectives as free functions on a communicator, each an awaitable task:
//   if (auto r = co_await optcast::broadcast(comm, bytes, root); !r) ...
// or blocking, from code that is not a coroutine:
//   auto r = optcast::run(comm, optcast::broadcast(comm, bytes, root));
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>

#include "optcast/communicator.hpp"

namespace optcast {

struct broadcast_options {
  algorithm alg = algorithm::automatic;  // automatic: the communicator's default
  int blocks = 0;                        // circulant pipelining depth n; 0: from the cost model
  std::optional<std::chrono::milliseconds> timeout;  // default: the communicator's
};

// Every rank passes a buffer of the same size; the root's bytes end up in all of them.
task<result<void>> broadcast(communicator& c, std::span<std::byte> data, int root,
                             broadcast_options opts = {});

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

// Point-to-point messages outside any collective, matched by (peer, user_tag) in order.
// Both ranks must agree on the size, as for the fabric.
task<result<void>> send(communicator& c, int peer, std::uint32_t user_tag,
                        std::span<const std::byte> data,
                        std::optional<std::chrono::milliseconds> timeout = {});
task<result<void>> recv(communicator& c, int peer, std::uint32_t user_tag,
                        std::span<std::byte> data,
                        std::optional<std::chrono::milliseconds> timeout = {});

}  // namespace optcast
