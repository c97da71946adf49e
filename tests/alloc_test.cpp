// No heap allocation per message in a running collective: the allocations of a
// broadcast must not grow with its number of messages. Constant costs (coroutine frames,
// the deadline entry, threads of the test harness) cancel in the difference between
// a broadcast of 100 blocks and one of 400 blocks.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <malloc.h>
#include <new>
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include <thread>

#include "optcast/asio.hpp"
#include "optcast/net/sim.hpp"
#include "core/frame_arena.hpp"
#include "core/huge_vector.hpp"
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

TEST_CASE("through the completion-token API, on the caller's loops, still no allocation per message", "[tcp][alloc]") {
  // async_broadcast with a plain callback, each rank's io_context run by its own thread:
  // the token's path (async_initiate, the strand, the handler's executor) adds constant
  // costs only.
  const int p = 8;
  testing::process_test_world w("tcp", p, {}, testing::job_options{.caller_loops = true});
  std::vector<std::vector<std::byte>> bufs(p, std::vector<std::byte>(400 * 1024));
  auto allocations_async = [&](int blocks) {
    const long before = allocations.load();
    std::vector<std::thread> ts;
    std::vector<int> ok(p, 0);
    for (int r = 0; r < p; ++r)
      ts.emplace_back([&, r] {
        const auto R = static_cast<std::size_t>(r);
        auto& c = w.comms()[R];
        bool done = false;
        async_broadcast(c, std::span(bufs[R]), 3, collective_options{.blocks = blocks}, [&](std::error_code ec) {
          ok[R] = !ec;
          done = true;
        });
        auto& io = w.io(r);
        io.restart();
        while (!done) io.run_one();
      });
    for (auto& t : ts) t.join();
    const long used = allocations.load() - before;
    for (int r = 0; r < p; ++r) REQUIRE(ok[static_cast<std::size_t>(r)]);
    return used;
  };
  auto least_of_three = [&](int n) {
    allocations_async(n);
    long least = allocations_async(n);
    for (int i = 0; i < 2; ++i) least = std::min(least, allocations_async(n));
    return least;
  };
  const long small = least_of_three(100);
  const long large = least_of_three(400);
  INFO(small << " allocations with 100 blocks, " << large << " with 400");
  CHECK(large - small <= 16);
}

namespace {

// The sanitizer builds give every frame a heap block of its own (frames.cpp).
bool arenas_in_use() {
  auto* a = detail::frame_arena::create();
  if (!a) return false;
  a->release();
  return true;
}

}  // namespace

TEST_CASE("a simulated world's coroutine frames come from its arena, reused call after call", "[sim][alloc]") {
  const int p = 64;
  sim::world w(p, sim::model::logp(6, 2, 4));
  auto comms = communicators_of(w);
  std::vector<std::vector<std::byte>> bufs(p, std::vector<std::byte>(100));
  auto allocations_of_one = [&] {
    const long before = allocations.load();
    auto res = run_all(comms, [&](communicator& c) {
      return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0, {.alg = algorithm::logp_tree});
    });
    const long used = allocations.load() - before;
    for (auto& r : res) REQUIRE(r);
    return used;
  };
  allocations_of_one();  // the arena's chunk, the messages' page, the signature rings
  allocations_of_one();
  const long used = allocations_of_one();
  INFO(used << " allocations for " << p << " ranks");
  // Each rank starts two frames (the call's, the tree's: broadcast's entry point is no
  // coroutine of its own).
  if (arenas_in_use())
    CHECK(used < p);
  else
    CHECK(used >= 2 * p);
}

TEST_CASE("a task made in a simulated world may outlive the world, and die on another thread", "[sim][alloc]") {
  const std::size_t arenas = detail::frame_arena::alive();
  const std::size_t mine = arenas_in_use() ? 1 : 0;
  std::vector<std::byte> buf(10);
  std::vector<task<result<void>>> kept;
  {
    sim::world w(4, sim::model::rounds());
    auto comms = communicators_of(w);
    CHECK(detail::frame_arena::alive() == arenas + mine);
    auto res = run_all(comms, [&](communicator& c) -> task<result<void>> {
      kept.push_back(broadcast(c, std::span(buf), 0, {}));  // made inside the loop, never started
      co_return result<void>{};
    });
    for (auto& r : res) REQUIRE(r);
  }
  // The world is gone; its arena stays while frames of it live.
  CHECK(detail::frame_arena::alive() == arenas + mine);
  std::thread([&] { kept.resize(2); }).join();
  CHECK(detail::frame_arena::alive() == arenas + mine);
  kept.clear();
  CHECK(detail::frame_arena::alive() == arenas);
}

namespace {

// The VmFlags of the mapping that holds p ("hg": advised as huge pages), from
// /proc/self/smaps; empty if none does.
std::string vm_flags_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(' ') > line.find('-')) {
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8);
  }
  return {};
}

bool advised_huge(const void* p) { return (" " + vm_flags_at(p) + " ").find(" hg ") != std::string::npos; }

}  // namespace

// A world of 10^5 ranks fills arrays of tens of MiB at once; at a page fault per 4 KiB
// (about 10 us on a paravirtualised VM) its set-up cost more than its broadcast.
TEST_CASE("a large world's arrays are on huge pages: the allocator's, reserve_huge's, the frame arena's", "[sim][alloc]") {
  SECTION("huge_vector maps large arrays at a 2 MiB boundary, advised, and keeps its elements as it grows") {
    detail::huge_vector<int> v;
    for (int i = 0; i < (3 << 20); ++i) v.push_back(i);  // grows through the threshold and past 2 MiB
    CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % (std::size_t{2} << 20) == 0);
    CHECK(advised_huge(v.data()));
    CHECK(advised_huge(v.data() + v.size() - 1));
    bool in_order = true;
    for (int i = 0; i < static_cast<int>(v.size()); ++i) in_order = in_order && v[static_cast<std::size_t>(i)] == i;
    CHECK(in_order);
    const auto copy = v;
    const bool copied = copy == v;
    CHECK(copied);
    detail::huge_vector<int> small(1000, 7);  // from the heap
    CHECK(small.back() == 7);
  }
  SECTION("reserve_huge advises a std::vector's block, its first and last 2 MiB included where malloc mapped it whole") {
    // malloc's threshold for a mapping of its own rises with what this process freed
    // before: fixed here, so that the block is one.
    ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
    std::vector<std::uint64_t> v;
    detail::reserve_huge(v, 3 << 20);  // 24 MiB
    REQUIRE(v.capacity() >= std::size_t{3} << 20);
    CHECK(advised_huge(v.data() + v.capacity() / 2));
    const auto block = reinterpret_cast<std::uintptr_t>(v.data());
    if (block % (std::size_t{2} << 20) == 2 * sizeof(std::size_t)) {  // a mapping of its own, at a 2 MiB boundary
      CHECK(advised_huge(v.data()));
      CHECK(advised_huge(v.data() + v.capacity() - 1));
    } else {
      WARN("the kernel placed malloc's 26 MiB mapping off a 2 MiB boundary (Linux before 6.7): only its inside is advised");
    }
  }
  SECTION("an arena told of a large world starts with a huge chunk") {
    auto* a = detail::frame_arena::create();
    if (!a) {
      WARN("a sanitizer build: every frame is a heap block of its own, no arena");
      return;
    }
    a->expect(std::size_t{64} << 20);
    void* f = a->allocate(256);
    CHECK(advised_huge(f));
    a->recycle(f, 256);
    a->release();
  }
}
