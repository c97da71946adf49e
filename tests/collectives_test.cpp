// The circulant family's results, element by element, on the in-process and TCP
// fabrics (and libfabric's tcp provider where present): p up to 17, several roots, block counts, counts (irregular, zero, one rank
// contributing everything), element types and operators, including non-commutative ones
// on the rank-ordered path. Bad input: collectives_refusal_test.cpp.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "optcast/collectives.hpp"
#include "fault_fabric.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

// A 2x2 matrix of integers mod 2^32: associative and not commutative.
struct mat {
  std::uint32_t a, b, c, d;
  friend bool operator==(const mat&, const mat&) = default;
};
mat mul(const mat& x, const mat& y) {
  return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
}

template <class T>
T val(int rank, std::size_t i, int salt) {
  const auto h = static_cast<std::uint64_t>(rank + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull +
                 static_cast<std::uint64_t>(salt) * 0x94D049BB133111EBull;
  const auto x = h ^ (h >> 29);
  if constexpr (std::is_same_v<T, mat>)
    return mat{static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(x >> 32), static_cast<std::uint32_t>(x >> 7),
               static_cast<std::uint32_t>(x >> 21)};
  else if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(static_cast<double>(x % 2000001) / 1e6 - 1.0);
  else
    return static_cast<T>(x % 1000);
}

// The bracketing of the rank-ordered binomial tree (reduction.hpp) for p values.
template <class T, class F>
T ordered(const std::vector<T>& a, F f) {
  const int p = static_cast<int>(a.size());
  auto range = [&](auto& self, int v, int m) -> T {
    if (m == 1) return a[static_cast<std::size_t>(v)];
    const T left = self(self, v, m / 2);
    if (v + m / 2 >= p) return left;
    return f(left, self(self, v + m / 2, m / 2));
  };
  int m = 1;
  while (m < p) m *= 2;
  return range(range, 0, m);
}

template <class V>
std::string diff(const V& got, const V& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i])) return "first difference at element " + std::to_string(i);
  return {};
}

using steps = std::vector<std::pair<std::string, result<void>>>;

std::vector<testing::world_case> world_cases() { return testing::world_cases({1, 2, 3, 5, 8, 13, 17}, {2, 3, 7, 17}); }

}  // namespace

TEST_CASE("circulant family: every result checked element by element", "[local][tcp][fabrics][collectives]") {
  const auto wc = GENERATE(from_range(world_cases()));
  const int p = wc.p;
  const auto P = static_cast<std::size_t>(p);
  INFO(wc.kind << " p " << p);
  auto w = testing::make_world(wc.kind, p);

  const std::vector<int> roots = {0, p / 2, p - 1};
  const std::vector<int> blocks = {1, 3, 0};  // 0: the automatic choice

  // Inputs and outputs per rank, filled by the rank's coroutine.
  const std::size_t ag_count = 5;
  std::vector<std::vector<std::int32_t>> ag_out(P);
  std::vector<int> agv_counts(P);
  for (std::size_t r = 0; r < P; ++r) agv_counts[r] = static_cast<int>((r * 37) % 11);  // zeros included
  const auto agv_total = static_cast<std::size_t>(std::accumulate(agv_counts.begin(), agv_counts.end(), 0));
  std::vector<std::vector<double>> agv_out(P);
  std::vector<int> degenerate(P, 0);
  degenerate[P - 1] = 3001;  // one rank contributes everything
  std::vector<std::vector<std::uint16_t>> deg_out(P);
  const std::size_t red_count = 1001;
  std::vector<std::vector<std::vector<std::int64_t>>> red_sum(roots.size() * blocks.size(), std::vector<std::vector<std::int64_t>>(P));
  std::vector<std::vector<float>> red_min(P);
  std::vector<std::vector<std::uint8_t>> red_xor(P);
  std::vector<std::vector<mat>> red_mat(P);
  std::vector<std::vector<std::int32_t>> rsb_max(P);
  std::vector<std::size_t> rs_counts(P);
  for (std::size_t r = 0; r < P; ++r) rs_counts[r] = (r % 3 == 1) ? 0 : 17 * (r + 1);
  const std::size_t rs_total = std::accumulate(rs_counts.begin(), rs_counts.end(), std::size_t{0});
  std::vector<std::vector<std::uint16_t>> rs_or(P);
  std::vector<std::vector<std::uint32_t>> ar_prod(P);
  std::vector<std::vector<double>> ar_sum(P), ar_ordered(P);
  std::vector<std::vector<mat>> ar_mat(P);
  std::vector<std::vector<std::int32_t>> ar_custom(P);
  std::vector<steps> log(P);

  const std::size_t ar_count = 4099;
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    const auto R = static_cast<std::size_t>(r);
    auto& lg = log[R];
    auto note = [&](std::string what, result<void> got) { lg.emplace_back(std::move(what), got); };

    {  // allgather, 5 int32 per rank
      std::vector<std::int32_t> in(ag_count);
      for (std::size_t i = 0; i < ag_count; ++i) in[i] = val<std::int32_t>(r, i, 1);
      ag_out[R].assign(ag_count * P, -1);
      note("allgather", co_await allgather(c, std::span<const std::int32_t>(in), std::span(ag_out[R])));
    }
    {  // allgatherv of doubles, irregular counts with zeros, n = 2
      std::vector<double> in(static_cast<std::size_t>(agv_counts[R]));
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = val<double>(r, i, 2);
      agv_out[R].assign(agv_total, -7.0);
      note("allgatherv", co_await allgatherv(c, std::span<const double>(in), std::span(agv_out[R]),
                                              std::span<const int>(agv_counts), {.blocks = 2}));
    }
    {  // the same with Karp et al.'s staggered all-to-all, 3 items per rank
      std::vector<double> in(static_cast<std::size_t>(agv_counts[R]));
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = val<double>(r, i, 2);
      std::vector<double> out(agv_total, -7.0);
      note("allgatherv staggered", co_await allgatherv(c, std::span<const double>(in), std::span(out),
                                                        std::span<const int>(agv_counts),
                                                        {.alg = algorithm::staggered, .blocks = 3}));
      if (out != agv_out[R]) note("allgatherv staggered result", fail(errc::protocol_violation));
    }
    {  // allgatherv where one rank has everything, in place in its part of out
      deg_out[R].assign(3001, 0);
      const std::span<const std::uint16_t> mine =
          r == p - 1 ? std::span<const std::uint16_t>(deg_out[R]) : std::span<const std::uint16_t>();
      if (r == p - 1)
        for (std::size_t i = 0; i < 3001; ++i) deg_out[R][i] = val<std::uint16_t>(r, i, 3);
      note("allgatherv one contributor", co_await allgatherv(c, mine, std::span(deg_out[R]),
                                                              std::span<const int>(degenerate), {.blocks = 7}));
    }
    for (std::size_t ri = 0; ri < roots.size(); ++ri)
      for (std::size_t bi = 0; bi < blocks.size(); ++bi) {  // reduce, int64 sum, roots x blocks
        std::vector<std::int64_t> in(red_count);
        for (std::size_t i = 0; i < red_count; ++i) in[i] = val<std::int64_t>(r, i, 4);
        auto& out = red_sum[ri * blocks.size() + bi][R];
        if (r == roots[ri]) out.assign(red_count, 0);
        note("reduce sum root " + std::to_string(roots[ri]),
             co_await reduce(c, std::span<const std::int64_t>(in), std::span(out), ops::sum, roots[ri],
                             {.blocks = blocks[bi]}));
      }
    {  // reduce, float min and uint8 bxor, to the last rank
      std::vector<float> in(red_count);
      for (std::size_t i = 0; i < red_count; ++i) in[i] = val<float>(r, i, 5);
      red_min[R].assign(r == p - 1 ? red_count : 0, 0.f);
      note("reduce min", co_await reduce(c, std::span<const float>(in), std::span(red_min[R]), ops::min, p - 1, {.blocks = 4}));
      std::vector<std::uint8_t> bx(red_count);
      for (std::size_t i = 0; i < red_count; ++i) bx[i] = val<std::uint8_t>(r, i, 6);
      red_xor[R].assign(r == p - 1 ? red_count : 0, 0);
      note("reduce bxor", co_await reduce(c, std::span<const std::uint8_t>(bx), std::span(red_xor[R]), ops::bxor, p - 1));
    }
    {  // reduce, non-commutative matrix product, in rank order, to a root other than 0
      std::vector<mat> in(33);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = val<mat>(r, i, 7);
      red_mat[R].assign(r == p / 2 ? in.size() : 0, mat{});
      note("reduce matrices", co_await reduce(c, std::span<const mat>(in), std::span(red_mat[R]),
                                               reduction<mat>::custom(mul, non_commutative), p / 2));
    }
    {  // reduce_scatter_block, int32 max, 9 per rank
      std::vector<std::int32_t> in(9 * P);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = val<std::int32_t>(r, i, 8);
      rsb_max[R].assign(9, 0);
      note("reduce_scatter_block", co_await reduce_scatter_block(c, std::span<const std::int32_t>(in), std::span(rsb_max[R]), ops::max, {.blocks = 3}));
    }
    {  // reduce_scatter, irregular counts with zeros, uint16 bor
      std::vector<std::uint16_t> in(rs_total);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(1u << ((i + R) % 16));
      rs_or[R].assign(rs_counts[R], 0);
      note("reduce_scatter", co_await reduce_scatter(c, std::span<const std::uint16_t>(in), std::span(rs_or[R]),
                                                     std::span<const std::size_t>(rs_counts), ops::bor, {.blocks = 2}));
    }
    {  // allreduce: uint32 product (wraps), double sum, custom commutative op, matrices
      std::vector<std::uint32_t> in(ar_count);
      for (std::size_t i = 0; i < ar_count; ++i) in[i] = val<std::uint32_t>(r, i, 9) | 1u;
      ar_prod[R].assign(ar_count, 0);
      note("allreduce product", co_await allreduce(c, std::span<const std::uint32_t>(in), std::span(ar_prod[R]), ops::product, {.blocks = 5}));
      ar_sum[R].resize(ar_count);
      for (std::size_t i = 0; i < ar_count; ++i) ar_sum[R][i] = val<double>(r, i, 10);
      note("allreduce sum in place", co_await allreduce(c, std::span<const double>(ar_sum[R]), std::span(ar_sum[R]), ops::sum));
      ar_ordered[R].resize(ar_count);
      for (std::size_t i = 0; i < ar_count; ++i) ar_ordered[R][i] = val<double>(r, i, 11);
      auto fsum = reduction<double>::custom([](double a, double b) { return a + b; }, non_commutative);
      note("allreduce ordered sum", co_await allreduce(c, std::span<const double>(ar_ordered[R]), std::span(ar_ordered[R]), fsum));
      std::vector<std::int32_t> ci(100);
      for (std::size_t i = 0; i < ci.size(); ++i) ci[i] = val<std::int32_t>(r, i, 12);
      ar_custom[R].assign(100, 0);
      auto sat = reduction<std::int32_t>::custom([](std::int32_t a, std::int32_t b) { return std::min(a + b, 20000); }, commutative);
      note("allreduce custom", co_await allreduce(c, std::span<const std::int32_t>(ci), std::span(ar_custom[R]), sat));
      std::vector<mat> mi(20);
      for (std::size_t i = 0; i < mi.size(); ++i) mi[i] = val<mat>(r, i, 13);
      ar_mat[R].assign(20, mat{});
      note("allreduce matrices", co_await allreduce(c, std::span<const mat>(mi), std::span(ar_mat[R]),
                                                     reduction<mat>::custom(mul, non_commutative)));
    }
    co_return result<void>{};
  });
  for (std::size_t r = 0; r < P; ++r) {
    REQUIRE(res[r]);
    for (auto& [what, st] : log[r]) {
      INFO("rank " << r << ": " << what << ": " << (st ? "ok" : describe(st.error(), w->comms()[r].failure_detail())));
      CHECK(st);
    }
  }

  // allgather
  std::vector<std::int32_t> ag_want;
  for (int j = 0; j < p; ++j)
    for (std::size_t i = 0; i < ag_count; ++i) ag_want.push_back(val<std::int32_t>(j, i, 1));
  for (auto& v : ag_out) CHECK(diff(v, ag_want) == "");
  // allgatherv
  std::vector<double> agv_want;
  for (int j = 0; j < p; ++j)
    for (int i = 0; i < agv_counts[static_cast<std::size_t>(j)]; ++i) agv_want.push_back(val<double>(j, static_cast<std::size_t>(i), 2));
  for (auto& v : agv_out) CHECK(diff(v, agv_want) == "");
  std::vector<std::uint16_t> deg_want(3001);
  for (std::size_t i = 0; i < 3001; ++i) deg_want[i] = val<std::uint16_t>(p - 1, i, 3);
  for (auto& v : deg_out) CHECK(diff(v, deg_want) == "");
  // reduce
  std::vector<std::int64_t> sum_want(red_count);
  std::vector<float> min_want(red_count, 1e9f);
  std::vector<std::uint8_t> xor_want(red_count);
  for (int j = 0; j < p; ++j)
    for (std::size_t i = 0; i < red_count; ++i) {
      sum_want[i] += val<std::int64_t>(j, i, 4);
      min_want[i] = std::min(min_want[i], val<float>(j, i, 5));
      xor_want[i] ^= val<std::uint8_t>(j, i, 6);
    }
  for (std::size_t ri = 0; ri < roots.size(); ++ri)
    for (std::size_t bi = 0; bi < blocks.size(); ++bi) {
      INFO("reduce root " << roots[ri] << " blocks " << blocks[bi]);
      CHECK(diff(red_sum[ri * blocks.size() + bi][static_cast<std::size_t>(roots[ri])], sum_want) == "");
    }
  CHECK(diff(red_min[P - 1], min_want) == "");
  CHECK(diff(red_xor[P - 1], xor_want) == "");
  std::vector<mat> mat_want(33);
  for (std::size_t i = 0; i < 33; ++i) {
    mat acc = val<mat>(0, i, 7);
    for (int j = 1; j < p; ++j) acc = mul(acc, val<mat>(j, i, 7));  // left to right
    mat_want[i] = acc;
  }
  CHECK(diff(red_mat[P / 2], mat_want) == "");
  // reduce_scatter_block and reduce_scatter
  for (std::size_t r = 0; r < P; ++r) {
    std::vector<std::int32_t> want(9, std::numeric_limits<std::int32_t>::min());
    for (int j = 0; j < p; ++j)
      for (std::size_t i = 0; i < 9; ++i) want[i] = std::max(want[i], val<std::int32_t>(j, r * 9 + i, 8));
    CHECK(diff(rsb_max[r], want) == "");
    const std::size_t off = std::accumulate(rs_counts.begin(), rs_counts.begin() + static_cast<std::ptrdiff_t>(r), std::size_t{0});
    std::vector<std::uint16_t> rw(rs_counts[r]);
    for (std::size_t i = 0; i < rw.size(); ++i)
      for (std::size_t j = 0; j < P; ++j) rw[i] = static_cast<std::uint16_t>(rw[i] | (1u << ((off + i + j) % 16)));
    CHECK(diff(rs_or[r], rw) == "");
  }
  // allreduce
  std::vector<std::uint32_t> prod_want(ar_count, 1);
  std::vector<double> sum_ref(ar_count);
  std::vector<std::int32_t> custom_want(100);
  std::vector<double> ordered_want(ar_count);
  for (std::size_t i = 0; i < ar_count; ++i) {
    std::vector<double> column;
    for (int j = 0; j < p; ++j) {
      prod_want[i] *= val<std::uint32_t>(j, i, 9) | 1u;
      sum_ref[i] += val<double>(j, i, 10);
      column.push_back(val<double>(j, i, 11));
    }
    ordered_want[i] = ordered(column, [](double a, double b) { return a + b; });
  }
  for (std::size_t i = 0; i < 100; ++i) {
    std::int32_t acc = 0;
    for (int j = 0; j < p; ++j) acc = std::min(acc + val<std::int32_t>(j, i, 12), 20000);
    custom_want[i] = acc;
  }
  std::vector<mat> armat_want(20);
  for (std::size_t i = 0; i < 20; ++i) {
    mat acc = val<mat>(0, i, 13);
    for (int j = 1; j < p; ++j) acc = mul(acc, val<mat>(j, i, 13));
    armat_want[i] = acc;
  }
  for (std::size_t r = 0; r < P; ++r) {
    INFO("allreduce at rank " << r);
    CHECK(diff(ar_prod[r], prod_want) == "");
    // The circulant sum's bracketing is its own; every rank has the same bits.
    CHECK(diff(ar_sum[r], ar_sum[0]) == "");
    double worst = 0;
    for (std::size_t i = 0; i < ar_count; ++i) worst = std::max(worst, std::fabs(ar_sum[r][i] - sum_ref[i]));
    CHECK(worst <= 1e-13 * p);
    // Declared non-commutative: the rank-ordered bracketing, reproduced exactly.
    CHECK(diff(ar_ordered[r], ordered_want) == "");
    CHECK(diff(ar_custom[r], custom_want) == "");
    CHECK(diff(ar_mat[r], armat_want) == "");
  }
}

TEST_CASE("ring family: every result checked element by element", "[local][tcp][fabrics][collectives]") {
  const auto wc = GENERATE(from_range(testing::world_cases({1, 2, 3, 6, 9}, {2, 5})));
  const int p = wc.p;
  const auto P = static_cast<std::size_t>(p);
  INFO(wc.kind << " p " << p);
  auto w = testing::make_world(wc.kind, p);
  const std::vector<int> blocks = {1, 3, 8};
  // Integer sums, so that any order of combining gives the same value to compare with.
  const std::size_t count = 1003;
  std::vector<std::int64_t> sum(count, 0);
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < count; ++i) sum[i] += val<std::int64_t>(r, i, 5);
  std::vector<std::size_t> counts(P);
  for (std::size_t r = 0; r < P; ++r) counts[r] = (r % 3 == 1) ? 0 : 7 * (r + 1);  // zeros included
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::vector<std::size_t> offset(P + 1, 0);
  for (std::size_t r = 0; r < P; ++r) offset[r + 1] = offset[r] + counts[r];
  std::vector<std::string> wrong(P);
  std::vector<std::vector<double>> rd_bits(P), rh_bits(P);

  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    const auto R = static_cast<std::size_t>(r);
    auto& bad = wrong[R];
    const auto check = [&](const std::string& what, const result<void>& got, auto&& have, auto&& want) {
      if (!got) bad += what + ": " + got.error().message() + "; ";
      else if (auto d = diff(have, want); !d.empty()) bad += what + ": " + d + "; ";
    };
    for (int n : blocks)
      for (int root : {0, p / 2, p - 1}) {
        const std::string at = " n " + std::to_string(n) + " root " + std::to_string(root);
        std::vector<std::uint32_t> want(count), buf(count, 0);
        for (std::size_t i = 0; i < count; ++i) want[i] = val<std::uint32_t>(root, i, 4);
        if (r == root) buf = want;
        check("broadcast" + at, co_await broadcast(c, std::span(buf), root, {.alg = algorithm::ring, .blocks = n}), buf, want);

        std::vector<std::int64_t> in(count), out(count, -1);
        for (std::size_t i = 0; i < count; ++i) in[i] = val<std::int64_t>(r, i, 5);
        auto got = co_await reduce(c, std::span<const std::int64_t>(in), std::span(out), ops::sum, root,
                                   {.alg = algorithm::ring, .blocks = n});
        if (r == root) check("reduce" + at, got, out, sum);
        else if (!got) bad += "reduce" + at + ": " + got.error().message() + "; ";
      }
    for (int n : blocks) {
      const std::string at = " n " + std::to_string(n);
      const collective_options o{.alg = algorithm::ring, .blocks = n};
      std::vector<std::int64_t> in(count), out(count, -1);
      for (std::size_t i = 0; i < count; ++i) in[i] = val<std::int64_t>(r, i, 5);
      check("allreduce" + at, co_await allreduce(c, std::span<const std::int64_t>(in), std::span(out), ops::sum, o), out, sum);
      std::vector<std::int64_t> own(count);  // the ring reads its operand where it is: left as it was
      for (std::size_t i = 0; i < count; ++i) own[i] = val<std::int64_t>(r, i, 5);
      if (in != own) bad += "allreduce" + at + " changed its input; ";
      // In place, and with in and out overlapping (out one element before in): the same sums.
      std::vector<std::int64_t> io(own);
      check("allreduce in place" + at, co_await allreduce(c, std::span<const std::int64_t>(io), std::span(io), ops::sum, o), io, sum);
      std::vector<std::int64_t> wide(count + 1, -1);
      std::copy(own.begin(), own.end(), wide.begin() + 1);
      auto shifted = co_await allreduce(c, std::span<const std::int64_t>(wide).subspan(1), std::span(wide).first(count), ops::sum, o);
      check("allreduce overlapping" + at, shifted, std::vector<std::int64_t>(wide.begin(), wide.begin() + static_cast<std::ptrdiff_t>(count)), sum);
      std::fill(out.begin(), out.end(), -1);
      check("allreduce recursive_doubling" + at,
            co_await allreduce(c, std::span<const std::int64_t>(in), std::span(out), ops::sum, {.alg = algorithm::recursive_doubling}),
            out, sum);
      // Floating point: every rank the same bits (each pair combines the same operands).
      std::vector<double> x(count), y(count, 0);
      for (std::size_t i = 0; i < count; ++i) x[i] = val<double>(r, i, 8);
      if (auto got = co_await allreduce(c, std::span<const double>(x), std::span(y), ops::sum, {.alg = algorithm::recursive_doubling}); !got)
        bad += "allreduce recursive_doubling of doubles: " + got.error().message() + "; ";
      rd_bits[R] = y;
      std::fill(out.begin(), out.end(), -1);
      check("allreduce recursive_halving" + at,
            co_await allreduce(c, std::span<const std::int64_t>(in), std::span(out), ops::sum, {.alg = algorithm::recursive_halving}),
            out, sum);
      std::vector<double> z(count, 0);
      if (auto got = co_await allreduce(c, std::span<const double>(x), std::span(z), ops::sum, {.alg = algorithm::recursive_halving}); !got)
        bad += "allreduce recursive_halving of doubles: " + got.error().message() + "; ";
      rh_bits[R] = z;
      std::vector<std::int32_t> one(5), every(5 * P, -1), every_want(5 * P);
      for (std::size_t i = 0; i < 5; ++i) one[i] = val<std::int32_t>(r, i, 9);
      for (std::size_t j = 0; j < P; ++j)
        for (std::size_t i = 0; i < 5; ++i) every_want[j * 5 + i] = val<std::int32_t>(static_cast<int>(j), i, 9);
      check("allgather recursive_doubling" + at,
            co_await allgather(c, std::span<const std::int32_t>(one), std::span(every), {.alg = algorithm::recursive_doubling}), every,
            every_want);
      // Fewer elements than the halving's parts (p 9: 8 parts of 2 elements): empty parts.
      std::vector<std::int64_t> few(2, -1);
      check("allreduce recursive_halving of 2 elements" + at,
            co_await allreduce(c, std::span<const std::int64_t>(in).first(2), std::span(few), ops::sum, {.alg = algorithm::recursive_halving}),
            few, std::vector<std::int64_t>(sum.begin(), sum.begin() + 2));

      std::vector<std::int32_t> mine(counts[R]), all(total, -1), want(total);
      for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = val<std::int32_t>(r, i, 6);
      for (std::size_t j = 0; j < P; ++j)
        for (std::size_t i = 0; i < counts[j]; ++i) want[offset[j] + i] = val<std::int32_t>(static_cast<int>(j), i, 6);
      check("allgatherv" + at, co_await allgatherv(c, std::span<const std::int32_t>(mine), std::span(all), std::span<const std::size_t>(counts), o),
            all, want);

      std::vector<std::int32_t> contrib(total), part(counts[R], -1), part_want(counts[R], 0);
      for (std::size_t i = 0; i < total; ++i) contrib[i] = val<std::int32_t>(r, i, 7);
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < counts[R]; ++i) part_want[i] += val<std::int32_t>(q, offset[R] + i, 7);
      check("reduce_scatter" + at,
            co_await reduce_scatter(c, std::span<const std::int32_t>(contrib), std::span(part), std::span<const std::size_t>(counts), ops::sum, o),
            part, part_want);
    }
    co_return result<void>{};
  });
  for (std::size_t r = 0; r < P; ++r) {
    INFO("rank " << r);
    CHECK(res[r]);
    CHECK(wrong[r] == "");
    CHECK(std::memcmp(rd_bits[r].data(), rd_bits[0].data(), rd_bits[0].size() * sizeof(double)) == 0);
    CHECK(std::memcmp(rh_bits[r].data(), rh_bits[0].data(), rh_bits[0].size() * sizeof(double)) == 0);
  }
  double expect = 0;  // element 0 of the double sum, in any order: close to every rank's
  for (int q = 0; q < p; ++q) expect += val<double>(q, 0, 8);
  CHECK(rd_bits[0][0] == Approx(expect).epsilon(1e-12).margin(1e-12));
  CHECK(rh_bits[0][0] == Approx(expect).epsilon(1e-12).margin(1e-12));
}

TEST_CASE("allgather: a rank's own segment goes out from its operand, never from out's copy", "[local][collectives]") {
  struct shape {
    algorithm alg;
    int p, blocks;
  };
  // Recursive doubling's first step sends the own segment on powers of two (elsewhere a
  // fold comes first); the ring's first n sends are the own segment's n blocks.
  const auto s = GENERATE(shape{algorithm::recursive_doubling, 2, 1}, shape{algorithm::recursive_doubling, 4, 1},
                          shape{algorithm::ring, 2, 1}, shape{algorithm::ring, 3, 4}, shape{algorithm::ring, 5, 2});
  INFO("p " << s.p << " blocks " << s.blocks);
  const auto P = static_cast<std::size_t>(s.p);
  const std::size_t count = 301;
  local::world w(s.p);
  std::vector<std::vector<std::int32_t>> in(P, std::vector<std::int32_t>(count)), out(P, std::vector<std::int32_t>(count * P));
  std::vector<std::vector<std::pair<const std::byte*, std::size_t>>> sends(P);
  std::vector<communicator> comms;
  for (std::size_t r = 0; r < P; ++r) {
    for (std::size_t i = 0; i < count; ++i) in[r][i] = val<std::int32_t>(static_cast<int>(r), i, 9);
    comms.emplace_back(std::make_shared<testing::fault_fabric>(w.fabric(static_cast<int>(r)), -1, [] {}, [&sends, r](const operation& op) {
      if (op.kind == op_kind::send) sends[r].emplace_back(op.data, op.size);
    }));
  }
  const auto before = in;
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
    const auto r = static_cast<std::size_t>(c.rank());
    co_return co_await allgather(c, std::span<const std::int32_t>(in[r]), std::span(out[r]), {.alg = s.alg, .blocks = s.blocks});
  });
  for (std::size_t r = 0; r < P; ++r) {
    INFO("rank " << r);
    REQUIRE(res[r]);
    CHECK(in[r] == before[r]);
    for (std::size_t q = 0; q < P; ++q)
      CHECK(std::equal(in[q].begin(), in[q].end(), out[r].begin() + static_cast<std::ptrdiff_t>(q * count)));
    const auto* lo = reinterpret_cast<const std::byte*>(in[r].data());
    const auto first = static_cast<std::size_t>(s.alg == algorithm::ring ? s.blocks : 1);
    REQUIRE(sends[r].size() >= first);
    std::size_t carried = 0;
    for (std::size_t k = 0; k < first; ++k) {
      CHECK(sends[r][k].first >= lo);
      CHECK(sends[r][k].first + sends[r][k].second <= lo + count * sizeof(std::int32_t));
      carried += sends[r][k].second;
    }
    CHECK(carried == count * sizeof(std::int32_t));
  }
}
