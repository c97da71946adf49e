// No heap allocation per message in a running collective: the allocations of a
// broadcast must not grow with its number of messages. Constant costs (coroutine frames,
// the deadline entry, threads of the test harness) cancel in the difference between
// a broadcast of 100 blocks and one of 400 blocks.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <algorithm>

#include "worlds.hpp"

#include "counting_new.hpp"

using counting_new::allocations;

using namespace optcast;

namespace {

long allocations_of(testing::test_world& w, std::vector<std::vector<std::byte>>& bufs, int blocks) {
  const long before = allocations.load();
  auto res = w.run_all([&](communicator& c) {
    return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 3, {.blocks = blocks});
  });
  const long used = allocations.load() - before;
  for (auto& r : res) REQUIRE(r);
  return used;
}

}  // namespace

TEST_CASE("a broadcast's allocations do not grow with its messages", "[local][tcp][fabrics][alloc]") {
  const std::string kind = GENERATE(from_range(testing::fabric_kinds()));
  const int p = 8;
  auto w = testing::make_world(kind, p);
  std::vector<std::vector<std::byte>> bufs(p, std::vector<std::byte>(400 * 1024));
  // Each measured after a run of the same shape (connections open, recycled buffers and
  // containers at their working sizes), the least of three runs: a run that happens to
  // buffer more messages at once than any before grows a pool once (over TCP, with a
  // busy machine); a per-message allocation would show in every run.
  auto least_of_three = [&](int n) {
    allocations_of(*w, bufs, n);
    long least = allocations_of(*w, bufs, n);
    for (int i = 0; i < 2; ++i) least = std::min(least, allocations_of(*w, bufs, n));
    return least;
  };
  const long small = least_of_three(100);  // about 8 * 102 messages a run
  const long large = least_of_three(400);  // about 8 * 402 messages a run
  INFO(kind << ": " << small << " allocations with 100 blocks, " << large << " with 400");
  // 2400 more messages; a per-message allocation anywhere would add thousands.
  CHECK(large - small <= 16);
}
