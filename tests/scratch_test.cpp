// The scratch pool (optcast/scratch.hpp) and the collectives' use of it: a repeated
// collective takes its packing and partial-result buffers from the pool instead of
// allocating (and faulting in) fresh ones every call.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

#include "optcast/net/local.hpp"
#include "optcast/optcast.hpp"

#include "common/buffer_pool.hpp"
#include "counting_new.hpp"

using counting_new::large_allocations;

using namespace optcast;

TEST_CASE("scratch pool: lends kept buffers again, distinct ones to leases held together", "[scratch]") {
  scratch_pool pool;
  std::byte* first = nullptr;
  {
    auto a = pool.take(1000);
    CHECK(a.size() == 1000);
    first = a.data();
    a.span()[999] = std::byte{7};
  }
  CHECK(pool.kept() == 1000);
  {
    auto a = pool.take(500);  // the kept buffer fits
    CHECK(a.data() == first);
    CHECK(a.size() == 500);
    CHECK(pool.kept() == 0);
    auto b = pool.take(500);  // held together: another buffer
    CHECK(b.data() != first);
    auto moved = std::move(b);
    CHECK(moved.size() == 500);
    CHECK(b.data() == nullptr);
  }
  CHECK(pool.kept() == 1500);
  {
    auto big = pool.take(5000);  // none fits: a new one, the small ones stay
    CHECK(big.data() != first);
    CHECK(pool.kept() == 1500);
  }
  CHECK(pool.kept() == 6500);
  // The limit: the smallest go first; a buffer over the limit is not kept.
  pool.set_limit(5500);
  CHECK(pool.kept() == 5000);
  { auto huge = pool.take(10000); }
  CHECK(pool.kept() == 5000);
  pool.release();
  CHECK(pool.kept() == 0);
  pool.set_limit(0);
  { auto a = pool.take(10); }
  CHECK(pool.kept() == 0);
  auto empty = pool.take(0);
  CHECK(empty.size() == 0);
}

TEST_CASE("message buffer pool: small messages leave the large buffer for the large ones", "[scratch]") {
  // Unexpected messages of mixed sizes (a ring's megabyte blocks, a barrier's 8 bytes)
  // pass through one pool; a large one must find its buffer again, not allocate.
  optcast::detail::buffer_pool pool(std::size_t{8} << 20);
  auto big = pool.take(2 << 20);
  auto small = pool.take(8);
  const std::byte* big_at = big.data();
  pool.give_back(std::move(small));
  pool.give_back(std::move(big));  // the most recently returned: a last-in pick would lend it to the 8 bytes
  const long before = large_allocations.load();
  auto s2 = pool.take(8);
  auto b2 = pool.take(2 << 20);
  CHECK(b2.data() == big_at);
  CHECK(s2.capacity() < (64u << 10));
  CHECK(large_allocations.load() == before);
  // Beyond the budget a returned buffer is freed, not kept.
  pool.give_back(std::move(b2));
  auto huge = pool.take(16 << 20);
  pool.give_back(std::move(huge));
  auto again = pool.take(16 << 20);
  CHECK(large_allocations.load() == before + 2);
}

TEST_CASE("collectives reuse scratch: a repeated call makes no large allocation", "[scratch]") {
  const int p = 4;
  const std::size_t bytes = 1 << 20;
  local::world w(p);
  auto comms = optcast::communicators_of(w);
  std::vector<std::vector<std::int32_t>> in(p, std::vector<std::int32_t>(bytes / 4, 3)), out(p, std::vector<std::int32_t>(bytes / 4));
  for (int n : {1, 4}) {
    const collective_options o{.alg = algorithm::circulant, .blocks = n};
    const auto each = [&](auto&& call) {
      auto res = optcast::run_all(comms, call);
      for (auto& r : res) REQUIRE(r);
    };
    const std::function<void()> calls[] = {
        [&] {
          each([&](communicator& c) {
            const auto R = static_cast<std::size_t>(c.rank());
            return allreduce(c, std::span<const std::int32_t>(in[R]), std::span(out[R]), ops::sum, o);
          });
          CHECK(out[0][12345] == 3 * p);
        },
        [&] {
          each([&](communicator& c) {
            const auto R = static_cast<std::size_t>(c.rank());
            return reduce_scatter_block(c, std::span<const std::int32_t>(in[R]), std::span(out[R]).first(bytes / 4 / p), ops::sum, o);
          });
          CHECK(out[1][7] == 3 * p);
        },
        [&] {
          each([&](communicator& c) {
            const auto R = static_cast<std::size_t>(c.rank());
            return reduce(c, std::span<const std::int32_t>(in[R]), std::span(out[R]), ops::sum, 2, o);
          });
          CHECK(out[2][100] == 3 * p);
        },
        [&] {
          each([&](communicator& c) {
            const auto R = static_cast<std::size_t>(c.rank());
            return allgather(c, std::span<const std::int32_t>(in[R]).first(bytes / 4 / p), std::span(out[R]), o);
          });
          CHECK(out[3].back() == 3);
        },
        [&] {  // the root's rotated copy, and the inner nodes' groups
          each([&](communicator& c) {
            const auto R = static_cast<std::size_t>(c.rank());
            return scatter(c, std::span<const std::int32_t>(in[R]), std::span(out[R]).first(bytes / 4 / p), 2);
          });
          CHECK(out[1][0] == 3);
        },
        [&] {
          each([&](communicator& c) {
            const auto R = static_cast<std::size_t>(c.rank());
            return gather(c, std::span<const std::int32_t>(in[R]).first(bytes / 4 / p), std::span(out[R]), 1);
          });
          CHECK(out[1].back() == 3);
        },
    };
    for (const auto& call : calls) {
      call();  // fills the pools
      const long before = large_allocations.load();
      call();
      CHECK(large_allocations.load() - before == 0);
    }
  }
  // The pools hold what the largest call needed, no more than their limit.
  for (int r = 0; r < p; ++r) CHECK(comms[static_cast<std::size_t>(r)].get_fabric().scratch().kept() <= (std::size_t{256} << 20));
  CHECK(comms[0].get_fabric().scratch().kept() >= bytes / p);
  // Pools that keep nothing: every call allocates its buffers again (the count above
  // does see them).
  for (auto& c : comms) c.get_fabric().scratch().set_limit(0);
  const long before = large_allocations.load();
  auto res = optcast::run_all(comms, [&](communicator& c) {
    const auto R = static_cast<std::size_t>(c.rank());
    return allreduce(c, std::span<const std::int32_t>(in[R]), std::span(out[R]), ops::sum, {.alg = algorithm::circulant, .blocks = 1});
  });
  for (auto& r : res) REQUIRE(r);
  CHECK(large_allocations.load() - before >= p);
}
