// Continuous broadcast (Karp et al. 3.1-3.3) as a stream: items in push order on every
// rank, each L + B(P - 1) steps after its push where the schedule is block-cyclic, and
// within the stream's stated delay elsewhere; the same bytes on local, TCP and libfabric.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "optcast/collectives.hpp"
#include "karp/plans.hpp"
#include "optcast/net/sim.hpp"
#include "optcast/stream.hpp"
#include "worlds.hpp"

using namespace optcast;

namespace {

std::byte value(std::int64_t item, std::size_t i) { return static_cast<std::byte>((item * 131 + static_cast<std::int64_t>(i) * 7 + 3) & 0xff); }

// Runs a stream of k items of `bytes` from `root` on every rank; records, per rank, the
// items in the order received and (in the simulator) the model time each arrived.
struct outcome {
  std::vector<std::vector<std::vector<std::byte>>> items;
  std::vector<std::vector<double>> when;
  std::vector<std::int64_t> delay, bound, push_step;  // push_step: item -> step (rank 0's view)
  std::vector<char> block_cyclic;
};

// One rank's part: the root pushes k items and closes, the others read to the end.
task<result<void>> stream_rank(communicator& c, int root, std::int64_t k, std::size_t bytes, stream_options o, outcome& out) {
  const auto R = static_cast<std::size_t>(c.rank());
  auto s = broadcast_stream::open(c, root, bytes, o);
  if (!s) co_return fail(s.error());
  out.delay[R] = (*s)->delay_steps();
  out.bound[R] = (*s)->bound_steps();
  out.block_cyclic[R] = (*s)->block_cyclic();
  if (R == 0)
    for (std::int64_t i = 0; i < k; ++i) out.push_step.push_back((*s)->push_step(i));
  std::vector<std::byte> item(bytes);
  if (c.rank() == root) {
    for (std::int64_t i = 0; i < k; ++i) {
      for (std::size_t b = 0; b < bytes; ++b) item[b] = value(i, b);
      if (auto r = co_await (*s)->push(item); !r) co_return r;
    }
    co_return co_await (*s)->close();
  }
  for (;;) {
    auto more = co_await (*s)->next(item);
    if (!more) co_return fail(more.error());
    if (!*more) break;
    out.items[R].push_back(item);
    out.when[R].push_back(c.get_fabric().model_time().value_or(0));
  }
  co_return result<void>{};
}

outcome sized(std::size_t P) {
  outcome out;
  out.items.resize(P);
  out.when.resize(P);
  out.delay.resize(P);
  out.bound.resize(P);
  out.block_cyclic.resize(P);
  return out;
}

void check_items(const outcome& o, int root, std::int64_t k, std::size_t bytes) {
  for (std::size_t r = 0; r < o.items.size(); ++r) {
    if (static_cast<int>(r) == root) continue;
    INFO("rank " << r);
    REQUIRE(o.items[r].size() == static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < k; ++i)
      for (std::size_t b = 0; b < bytes; ++b)
        if (o.items[r][static_cast<std::size_t>(i)][b] != value(i, b)) FAIL("item " << i << " byte " << b);
  }
}

}  // namespace

TEST_CASE("stream in the simulator: every item L + B(P-1) after its push where block-cyclic", "[stream][sim]") {
  // Delay per item = (the model time the last rank has it) - (its push step). With
  // words the stream reaches the lower bound for every item; without, it stays within
  // what it states, and the report says how far that is from the bound.
  for (int L : {1, 2, 3, 5, 8})
    for (int P : {2, 3, 5, 9, 14, 20, 42, 61}) {
      INFO("L " << L << " P " << P);
      sim::world w(P, sim::model::postal(L));
      auto comms = optcast::communicators_of(w);
      const int root = P / 3;
      const std::int64_t k = 60;
      auto o = sized(static_cast<std::size_t>(P));
      auto res = optcast::run_all(comms, [&](communicator& c) { return stream_rank(c, root, k, 5, {}, o); });
      for (auto& r : res) REQUIRE(r);
      check_items(o, root, k, 5);
      std::int64_t worst = 0;
      for (std::int64_t i = 0; i < k; ++i) {
        double last = 0;
        for (int r = 0; r < P; ++r)
          if (r != root) last = std::max(last, o.when[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]);
        const auto d = static_cast<std::int64_t>(last) - o.push_step[static_cast<std::size_t>(i)];
        worst = std::max(worst, d);
        if (o.block_cyclic[0]) CHECK(d == o.bound[0]);
      }
      CHECK(o.bound[0] == L + static_cast<std::int64_t>(logp::B(P - 1, {static_cast<double>(L), 0, 1})));
      CHECK(worst <= o.delay[0]);
      if (o.block_cyclic[0]) CHECK(o.delay[0] == o.bound[0]);
      CHECK(w.take_report().unreceived == 0);
    }
}

TEST_CASE("stream on local, TCP and libfabric: every item in order, any length", "[stream][local][tcp][fabrics]") {
  const auto wc = GENERATE(from_range(testing::world_cases({1, 2, 3, 6, 13}, {2, 3, 7})));
  const int p = wc.p;
  INFO(wc.kind << " p " << p);
  auto w = testing::make_world(wc.kind, p);
  // L = 3 has block-cyclic words for every p here but one; L = 1 runs windows for most.
  for (double L : {3.0, 1.0})
    for (std::int64_t k : {0, 1, 7, 100})
      for (std::size_t bytes : {std::size_t{0}, std::size_t{13}, std::size_t{40000}}) {
        if (bytes == 40000 && k == 100) continue;
        const int root = static_cast<int>(k % p);
        INFO("L " << L << " k " << k << " bytes " << bytes << " root " << root);
        auto o = sized(static_cast<std::size_t>(p));
        auto res = w->run_all([&](communicator& c) {
          return stream_rank(c, root, k, bytes, {.model = loggp_params{L, 0, 1, 0}, .window = 5}, o);
        });
        for (auto& r : res) REQUIRE(r);
        check_items(o, root, k, bytes);
      }
}

TEST_CASE("stream misuse is refused with its reason", "[stream]") {
  sim::world w(4, sim::model::postal(3));
  auto comms = optcast::communicators_of(w);
  // Every rank makes the same refused calls, as with any collective: each takes a
  // sequence number, so the ranks stay in step.
  for (auto& c : comms) {
    CHECK_FALSE(broadcast_stream::open(c, 4, 8));
    CHECK(c.last_error().find("root 4") != std::string::npos);
    CHECK_FALSE(broadcast_stream::open(c, 0, 8, {.window = -1}));
    CHECK(c.last_error().find("window") != std::string::npos);
  }
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
    auto s = broadcast_stream::open(c, 1, 8);
    if (!s) co_return fail(s.error());
    std::vector<std::byte> item(8), small(3);
    if (c.rank() == 1) {
      if (co_await (*s)->next(item) || c.last_error().find("root") == std::string::npos) co_return fail(errc::protocol_violation);
      if (co_await (*s)->push(small) || c.last_error().find("3 bytes") == std::string::npos) co_return fail(errc::protocol_violation);
      if (auto r = co_await (*s)->push(item); !r) co_return r;
      if (auto r = co_await (*s)->close(); !r) co_return r;
      if (co_await (*s)->push(item) || c.last_error().find("closed") == std::string::npos) co_return fail(errc::protocol_violation);
      co_return result<void>{};
    }
    if (co_await (*s)->push(item) || c.last_error().find("only the root") == std::string::npos) co_return fail(errc::protocol_violation);
    if (co_await (*s)->next(small) || c.last_error().find("3 bytes") == std::string::npos) co_return fail(errc::protocol_violation);
    auto a = co_await (*s)->next(item);
    if (!a || !*a) co_return fail(errc::protocol_violation);
    auto b = co_await (*s)->next(item);
    if (!b || *b) co_return fail(errc::protocol_violation);
    co_return result<void>{};
  });
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO("rank " << r << ": " << (res[r] ? std::string("ok") : res[r].error().message()) << " / " << comms[r].last_error());
    CHECK(res[r]);
  }
  CHECK(w.take_report().unreceived == 0);
}
