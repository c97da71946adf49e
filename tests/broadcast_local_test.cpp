// Broadcast on the in-process fabric: every p <= 40, every root, several block counts
// and sizes, each byte checked on every rank.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"

namespace {

// Distinct per byte, per size and per root, so a misplaced block cannot pass.
std::byte pattern(std::size_t i, std::size_t size, int root) {
  return static_cast<std::byte>((i * 131 + size * 7 + static_cast<std::size_t>(root) * 29 + (i >> 8)) & 0xff);
}

bool run_broadcast(int p, int root, int n, std::size_t size, optcast::algorithm alg) {
  optcast::local::world w(p);
  auto comms = optcast::communicators_of(w);
  // The root's bytes are made once and every rank is compared with memcmp: a byte loop
  // per rank (std::equal on std::byte is one) was most of this test's time at p = 40.
  std::vector<std::byte> expect(size);
  for (std::size_t i = 0; i < size; ++i) expect[i] = pattern(i, size, root);
  std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    if (r == root)
      bufs[static_cast<std::size_t>(r)] = expect;
    else
      bufs[static_cast<std::size_t>(r)].assign(size, std::byte{0xEE});
  }
  auto results = optcast::run_all(comms, [&](optcast::communicator& c) {
    return optcast::broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root,
                              {.alg = alg, .blocks = n});
  });
  bool ok = true;
  for (int r = 0; r < p; ++r) {
    INFO("p=" << p << " root=" << root << " n=" << n << " size=" << size << " rank=" << r);
    const auto& res = results[static_cast<std::size_t>(r)];
    if (!res) {
      FAIL_CHECK("rank " << r << ": " << res.error().message());
      ok = false;
      continue;
    }
    const auto& b = bufs[static_cast<std::size_t>(r)];
    if (size != 0 && std::memcmp(b.data(), expect.data(), size) != 0) {
      std::size_t i = 0;
      while (b[i] == expect[i]) ++i;
      FAIL_CHECK("byte " << i << " wrong");
      ok = false;
    }
  }
  return ok;
}

}  // namespace

static void circulant_sweep(int pmax, int n) {
  for (int p = 1; p <= pmax; ++p)
    for (int root = 0; root < p; ++root)
      for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{1000} + 3 /* n does not divide it */,
                               std::size_t{256 << 10} + 3 /* large, and n does not divide it */})
        REQUIRE(run_broadcast(p, root, n, size, optcast::algorithm::circulant));
}

TEST_CASE("circulant broadcast, every p <= 12 and every root", "[local][broadcast]") {
  circulant_sweep(12, GENERATE(1, 2, 3, 7, 16, 100));
}

TEST_CASE("circulant broadcast, every p <= 40 and every root", "[local][broadcast][full]") {
  circulant_sweep(40, GENERATE(1, 2, 3, 7, 16, 100));
}

TEST_CASE("circulant broadcast of large buffers", "[local][broadcast][full]") {
  const int n = GENERATE(1, 2, 3, 7, 16, 100);
  for (int p : {2, 3, 5, 8, 13, 17, 32, 40})
    for (int root : {0, 1, p / 2, p - 1})
      REQUIRE(run_broadcast(p, root, n, (std::size_t{1} << 20) + 77, optcast::algorithm::circulant));
}

TEST_CASE("binomial broadcast, every p <= 40 and every root", "[local][broadcast]") {
  for (int p = 1; p <= 40; ++p)
    for (int root = 0; root < p; ++root)
      for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4099}})
        REQUIRE(run_broadcast(p, root, 1, size, optcast::algorithm::binomial));
}

TEST_CASE("automatic block count", "[local][broadcast]") {
  optcast::communicator_options o;
  CHECK(optcast::automatic_block_count(0, 8, o) == 1);
  CHECK(optcast::automatic_block_count(1 << 20, 2, o) == 1);  // one link: nothing to pipeline
  // n = sqrt((q - 1) beta m / alpha) with q = 3, beta = 1 / 1.5e9 s/B, alpha = 25 us:
  // 64 KiB gives sqrt(3.50) = 1.87, 64 MiB sqrt(3579) = 59.8 (the demo's n = 60).
  CHECK(optcast::automatic_block_count(64 << 10, 8, o) == 2);
  CHECK(optcast::automatic_block_count(64 << 20, 8, o) == 60);
  // Blocks never get smaller than min_block_bytes: with a tiny per-message cost the
  // formula asks for 3.0e5 blocks of 64 MiB, the rule gives 64 MiB / 8 KiB.
  optcast::communicator_options cheap = o;
  cheap.cost.alpha_s = 1e-12;
  CHECK(optcast::automatic_block_count(64 << 20, 8, cheap) == (64 << 20) / 8192);
  // And a broadcast that uses it.
  REQUIRE(run_broadcast(8, 3, 0, (4u << 20) + 1, optcast::algorithm::automatic));
}
