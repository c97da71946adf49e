// optcast simulate: run one collective on P simulated ranks under a cost model and
// print what the simulator measured. Every algorithm optcast has is in the registry
// below, with the paper it comes from; later algorithms join it.
#include "simulate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "optcast/collectives.hpp"
#include "optcast/choose.hpp"
#include "optcast/fibonacci.hpp"
#include "optcast/multiport.hpp"
#include "optcast/scatter.hpp"
#include "optcast/logp.hpp"
#include "optcast/net/sim.hpp"
#include "optcast/schedule.hpp"
#include "optcast/stream.hpp"

namespace optcast::tools {

namespace {

struct sim_params {
  int p = 0;
  std::uint64_t bytes = 0;
  int blocks = 0;
  int root = 0;
  std::string counts = "even";  // allgatherv / reduce_scatter: even, skewed, one
  algorithm alg = algorithm::automatic;
  bool verify = true;  // buffers per rank and results checked; off: timing only
};

struct run_outcome {
  bool ok = true;
  std::string error;
  bool verified = false;
  std::vector<std::pair<std::string, double>> measured;  // what the run itself reports
};

using runner = std::function<run_outcome(sim::world&, std::vector<communicator>&, const sim_params&)>;

// The time the paper proves for a run, named, where it has one for the model given.
struct figure {
  std::string name;
  double value;
};
using figure_fn = std::function<std::optional<figure>(const sim::model&, const sim_params&)>;

struct entry {
  const char* collective;
  const char* algorithm;
  optcast::algorithm alg;
  const char* source;
  runner run;
  figure_fn paper = nullptr;
};

bool logp_like(const sim::model& m) { return m.kind == sim::model_kind::logp || m.kind == sim::model_kind::postal; }

// Karp et al. 4.1: L + 2o + g (k (P - 1) - 1), with g read as max(g, o).
std::optional<figure> staggered_figure(const sim::model& m, const sim_params& sp) {
  if (!logp_like(m) || sp.p < 2) return std::nullopt;
  return figure{"L + 2o + g(n(P-1)-1)", m.L + 2 * m.o + std::max(m.g, m.o) * (sp.blocks * (sp.p - 1) - 1)};
}

std::uint8_t byte_of(int rank, std::size_t i) {
  return static_cast<std::uint8_t>((static_cast<std::size_t>(rank) * 131 + i * 7 + (i >> 9)) & 0xff);
}

// Per-rank element counts for the irregular collectives, adding up to `total`.
std::vector<std::size_t> distribute(std::uint64_t total, int p, const std::string& how) {
  std::vector<std::size_t> c(static_cast<std::size_t>(p));
  if (how == "one") {
    c.back() = total;
  } else if (how == "skewed") {  // rank j's share grows with j mod 4 (0 for every fourth)
    std::size_t weight = 0;
    for (int j = 0; j < p; ++j) weight += static_cast<std::size_t>(j % 4);
    std::size_t given = 0;
    for (int j = 0; j < p && weight; ++j) {
      c[static_cast<std::size_t>(j)] = total * static_cast<std::size_t>(j % 4) / weight;
      given += c[static_cast<std::size_t>(j)];
    }
    for (int j = p - 1; given < total; --j)
      if (j % 4) {
        ++c[static_cast<std::size_t>(j)];
        ++given;
      }
    if (!weight) c.back() = total;
  } else {
    for (int j = 0; j < p; ++j)
      c[static_cast<std::size_t>(j)] = total / static_cast<std::size_t>(p) + (static_cast<std::size_t>(j) < total % static_cast<std::size_t>(p) ? 1 : 0);
  }
  return c;
}

std::string first_failure(const std::vector<result<void>>& res, std::vector<communicator>& comms) {
  for (std::size_t r = 0; r < res.size(); ++r)
    if (!res[r]) {
      std::string d = comms[r].last_error().empty() ? comms[r].failure_detail() : comms[r].last_error();
      return "rank " + std::to_string(r) + ": " + describe(res[r].error(), d);
    }
  return {};
}

// Buffers: one per rank when verifying, else one shared by all (timing only).
struct buffers {
  std::vector<std::vector<std::uint8_t>> per;
  explicit buffers(const sim_params& sp, std::size_t size) : per(sp.verify ? static_cast<std::size_t>(sp.p) : 1, std::vector<std::uint8_t>(size)) {}
  std::vector<std::uint8_t>& at(int r) { return per.size() == 1 ? per[0] : per[static_cast<std::size_t>(r)]; }
};

collective_options opts_of(const sim_params& sp, algorithm alg) { return {.alg = alg, .blocks = sp.blocks}; }

run_outcome run_broadcast(sim::world& w, std::vector<communicator>& comms, const sim_params& sp, algorithm alg) {
  buffers b(sp, sp.bytes);
  if (sp.verify)
    for (std::size_t i = 0; i < sp.bytes; ++i) b.at(sp.root)[i] = byte_of(sp.root, i);
  auto res = w.run_all(comms, [&](communicator& c) { return broadcast(c, std::span(b.at(c.rank())), sp.root, opts_of(sp, alg)); });
  run_outcome o;
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    for (int r = 0; r < sp.p && o.ok; ++r)
      if (b.at(r) != b.at(sp.root)) o = {false, "rank " + std::to_string(r) + " holds wrong bytes"};
    o.verified = o.ok;
  }
  return o;
}

// Scatter (the root's p segments of sp.bytes to every rank) or gather (the reverse).
run_outcome run_scatter_gather(sim::world& w, std::vector<communicator>& comms, const sim_params& sp, algorithm alg,
                               bool gather_it) {
  const auto P = static_cast<std::size_t>(sp.p);
  std::vector<std::uint8_t> all(sp.verify ? P * sp.bytes : 0), back(sp.verify ? P * sp.bytes : 0);
  for (std::size_t r = 0; r < all.size() / std::max<std::uint64_t>(sp.bytes, 1); ++r)
    for (std::size_t i = 0; i < sp.bytes; ++i) all[r * sp.bytes + i] = byte_of(static_cast<int>(r), i);
  buffers part(sp, sp.bytes);
  if (gather_it && sp.verify)
    for (int r = 0; r < sp.p; ++r) std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * sp.bytes), sp.bytes, part.at(r).begin());
  // Without verification the root still needs a buffer of the right size.
  std::vector<std::uint8_t> root_buf(sp.verify ? 0 : P * sp.bytes);
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    const bool is_root = c.rank() == sp.root;
    std::span<std::uint8_t> whole = !is_root ? std::span<std::uint8_t>() : sp.verify ? std::span(gather_it ? back : all) : std::span(root_buf);
    if (gather_it) co_return co_await gather(c, std::span<const std::uint8_t>(part.at(c.rank())), whole, sp.root, opts_of(sp, alg));
    co_return co_await scatter(c, std::span<const std::uint8_t>(whole), std::span(part.at(c.rank())), sp.root, opts_of(sp, alg));
  });
  run_outcome o;
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    if (gather_it && back != all) o = {false, "the root gathered wrong bytes"};
    for (int r = 0; r < sp.p && o.ok && !gather_it; ++r)
      if (!std::equal(part.at(r).begin(), part.at(r).end(), all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * sp.bytes)))
        o = {false, "rank " + std::to_string(r) + " got wrong bytes"};
    o.verified = o.ok;
  }
  return o;
}

// Alexandrov et al.'s times for a scatter of k = bytes items per rank: the recurrences
// under any LogGP model; Table 2's closed forms in the simplified one (o = 0, G = 1).
std::optional<figure> scatter_figure(const sim::model& m, const sim_params& sp, algorithm alg) {
  if (m.kind == sim::model_kind::rounds) return std::nullopt;
  const auto k = static_cast<int>(sp.bytes);
  if (alg == algorithm::split_tree || alg == algorithm::binomial)
    return figure{alg == algorithm::split_tree ? "t^k(P), the A_t^k recurrence" : "the Binomial Tree recurrence (Lemma 2)",
                  loggp::split_table(sp.p, {m.L, m.o, m.g, m.G}, static_cast<double>(sp.bytes), alg == algorithm::binomial).t(sp.p)};
  if (m.o != 0 || m.G != 1) return std::nullopt;
  if (alg == algorithm::long_message) return figure{"(P-2)g + (P-1)(k-1) + L (Table 2)", loggp::long_message_time(sp.p, k, m.L, m.g)};
  return figure{"((P-1)k - 1)g + L (Table 2)", loggp::short_message_time(sp.p, k, m.L, m.g)};
}

// A stream of sp.blocks items of sp.bytes: every rank checks each item; the delay of
// item i is when the last rank has it minus the step the root sent it.
run_outcome run_stream(sim::world& w, std::vector<communicator>& comms, const sim_params& sp) {
  const auto k = static_cast<std::size_t>(sp.blocks);
  std::vector<std::vector<double>> when(static_cast<std::size_t>(sp.p));
  std::vector<std::int64_t> push(k);
  std::int64_t bound = 0, stated = 0;
  bool cyclic = false, bad = false;
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    auto s = broadcast_stream::open(c, sp.root, sp.bytes, {});
    if (!s) co_return fail(s.error());
    std::vector<std::byte> item(sp.bytes);
    if (c.rank() == sp.root) {
      bound = (*s)->bound_steps();
      stated = (*s)->delay_steps();
      cyclic = (*s)->block_cyclic();
      for (std::size_t i = 0; i < k; ++i) {
        push[i] = (*s)->push_step(static_cast<std::int64_t>(i));
        for (std::size_t b = 0; b < item.size(); ++b) item[b] = static_cast<std::byte>(byte_of(static_cast<int>(i), b));
        if (auto r = co_await (*s)->push(item); !r) co_return r;
      }
      co_return co_await (*s)->close();
    }
    for (std::size_t i = 0;; ++i) {
      auto more = co_await (*s)->next(item);
      if (!more) co_return fail(more.error());
      if (!*more) break;
      when[static_cast<std::size_t>(c.rank())].push_back(c.get_fabric().model_time().value_or(0));
      for (std::size_t b = 0; b < item.size() && sp.verify; ++b)
        if (item[b] != static_cast<std::byte>(byte_of(static_cast<int>(i), b))) bad = true;
    }
    co_return result<void>{};
  });
  run_outcome o;
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (!o.ok) return o;
  double worst = 0, best = 1e300;
  for (std::size_t i = 0; i < k && sp.p > 1; ++i) {
    double last = 0;
    for (int r = 0; r < sp.p; ++r)
      if (r != sp.root) {
        const auto& v = when[static_cast<std::size_t>(r)];
        if (v.size() != k) return {false, "rank " + std::to_string(r) + " got " + std::to_string(v.size()) + " items"};
        last = std::max(last, v[i]);
      }
    worst = std::max(worst, last - static_cast<double>(push[i]));
    best = std::min(best, last - static_cast<double>(push[i]));
  }
  if (bad) return {false, "an item arrived with wrong bytes"};
  o.verified = sp.verify;
  o.measured = {{"block-cyclic words", cyclic ? 1 : 0},
                {"delay per item, most", worst},
                {"delay per item, least", sp.p > 1 ? best : 0},
                {"delay the stream states", static_cast<double>(stated)},
                {"steps per item pushed", k ? static_cast<double>(push[k - 1] + 1) / static_cast<double>(k) : 0},
                {"lower bound L + B(P-1)", static_cast<double>(bound)}};
  return o;
}

run_outcome run_allgatherv(sim::world& w, std::vector<communicator>& comms, const sim_params& sp, bool regular) {
  const auto counts = regular ? std::vector<std::size_t>(static_cast<std::size_t>(sp.p), sp.bytes)
                              : distribute(sp.bytes, sp.p, sp.counts);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::vector<std::size_t> off(counts.size() + 1);
  for (std::size_t j = 0; j < counts.size(); ++j) off[j + 1] = off[j] + counts[j];
  buffers out(sp, total);
  std::vector<std::vector<std::uint8_t>> in(static_cast<std::size_t>(sp.verify ? sp.p : 1));
  for (int r = 0; r < sp.p; ++r) {
    if (!sp.verify && r > 0) break;
    auto& v = in[static_cast<std::size_t>(r)];
    v.resize(counts[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = byte_of(r, i);
  }
  auto res = w.run_all(comms, [&](communicator& c) {
    const auto R = static_cast<std::size_t>(c.rank());
    // Timing only: each rank's part of the one shared buffer is its input (in place).
    std::span<const std::uint8_t> mine = sp.verify ? std::span<const std::uint8_t>(in[R])
                                                   : std::span<const std::uint8_t>(out.at(0)).subspan(off[R], counts[R]);
    if (regular) return allgather(c, mine, std::span(out.at(c.rank())), opts_of(sp, sp.alg));
    return allgatherv(c, mine, std::span(out.at(c.rank())), std::span<const std::size_t>(counts), opts_of(sp, sp.alg));
  });
  run_outcome o;
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    for (int r = 0; r < sp.p && o.ok; ++r)
      for (int j = 0; j < sp.p && o.ok; ++j)
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(j)]; ++i)
          if (out.at(r)[off[static_cast<std::size_t>(j)] + i] != byte_of(j, i)) {
            o = {false, "rank " + std::to_string(r) + " holds a wrong byte of rank " + std::to_string(j) + "'s part"};
            break;
          }
    o.verified = o.ok;
  }
  return o;
}

// --bytes per rank pair: rank r's block j, for rank j, holds byte_of(r * p + j, i).
run_outcome run_alltoall(sim::world& w, std::vector<communicator>& comms, const sim_params& sp) {
  const auto P = static_cast<std::size_t>(sp.p);
  const std::size_t m = sp.bytes;
  buffers in(sp, P * m), out(sp, P * m);
  if (sp.verify)
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t j = 0; j < P; ++j)
        for (std::size_t i = 0; i < m; ++i) in.at(static_cast<int>(r))[j * m + i] = byte_of(static_cast<int>(r * P + j), i);
  auto res = w.run_all(comms, [&](communicator& c) {
    return alltoall(c, std::span<const std::uint8_t>(in.at(c.rank())), std::span(out.at(c.rank())), opts_of(sp, sp.alg));
  });
  run_outcome o;
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    for (std::size_t r = 0; r < P && o.ok; ++r)
      for (std::size_t j = 0; j < P && o.ok; ++j)
        for (std::size_t i = 0; i < m; ++i)
          if (out.at(static_cast<int>(r))[j * m + i] != byte_of(static_cast<int>(j * P + r), i)) {
            o = {false, "rank " + std::to_string(r) + " holds a wrong byte from rank " + std::to_string(j)};
            break;
          }
    o.verified = o.ok;
  }
  return o;
}

// --bytes is n, the operand count: operand i is byte_of(0, i), summed mod 256 in order.
run_outcome run_summation(sim::world& w, std::vector<communicator>& comms, const sim_params& sp) {
  std::vector<std::uint8_t> got(static_cast<std::size_t>(sp.p));
  const auto n = static_cast<std::int64_t>(sp.bytes);
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    auto r = co_await summation<std::uint8_t>(
        c, n, [](std::int64_t i) { return byte_of(0, static_cast<std::size_t>(i)); }, ops::sum, sp.root);
    if (!r) co_return fail(r.error());
    got[static_cast<std::size_t>(c.rank())] = *r;
    co_return result<void>{};
  });
  run_outcome o;
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok) {
    unsigned want = 0;
    for (std::int64_t i = 0; i < n; ++i) want += byte_of(0, static_cast<std::size_t>(i));
    if (got[static_cast<std::size_t>(sp.root)] != static_cast<std::uint8_t>(want)) o = {false, "the root holds a wrong sum"};
    o.verified = o.ok;
  }
  return o;
}

// Reductions sum bytes (mod 256), so that --bytes is exactly the message size.
std::uint8_t sum_of(int p, std::size_t i) {
  unsigned s = 0;
  for (int r = 0; r < p; ++r) s += byte_of(r, i);
  return static_cast<std::uint8_t>(s);
}

run_outcome run_reduction(sim::world& w, std::vector<communicator>& comms, const sim_params& sp, const std::string& which,
                          algorithm alg) {
  std::vector<std::size_t> counts;
  if (which == "reduce_scatter_block") counts.assign(static_cast<std::size_t>(sp.p), sp.bytes / static_cast<std::size_t>(sp.p));
  if (which == "reduce_scatter") counts = distribute(sp.bytes, sp.p, sp.counts);
  const std::size_t m = counts.empty() ? sp.bytes : std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::vector<std::size_t> off(counts.size() + 1);
  for (std::size_t j = 0; j < counts.size(); ++j) off[j + 1] = off[j] + counts[j];
  buffers in(sp, m), out(sp, which == "allreduce" || which == "reduce" ? m : 0);
  if (sp.verify)
    for (int r = 0; r < sp.p; ++r)
      for (std::size_t i = 0; i < m; ++i) in.at(r)[i] = byte_of(r, i);
  std::vector<std::vector<std::uint8_t>> part(counts.empty() ? 0 : static_cast<std::size_t>(sp.p));
  for (std::size_t r = 0; r < part.size(); ++r) part[r].resize(counts[r]);
  const auto o_ = opts_of(sp, alg);
  auto res = w.run_all(comms, [&](communicator& c) -> task<result<void>> {
    const auto R = static_cast<std::size_t>(c.rank());
    std::span<const std::uint8_t> src(in.at(c.rank()));
    if (which == "reduce") co_return co_await reduce(c, src, std::span(out.at(c.rank())), ops::sum, sp.root, o_);
    if (which == "allreduce") co_return co_await allreduce(c, src, std::span(out.at(c.rank())), ops::sum, o_);
    if (which == "reduce_scatter_block") co_return co_await reduce_scatter_block(c, src, std::span(part[R]), ops::sum, o_);
    co_return co_await reduce_scatter(c, src, std::span(part[R]), std::span<const std::size_t>(counts), ops::sum, o_);
  });
  run_outcome o;
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    std::vector<std::uint8_t> want(m);
    for (std::size_t i = 0; i < m; ++i) want[i] = sum_of(sp.p, i);
    auto bad = [&](int r) { o = {false, "rank " + std::to_string(r) + " holds a wrong sum"}; };
    if (which == "reduce") {
      if (out.at(sp.root) != want) bad(sp.root);
    } else if (which == "allreduce") {
      for (int r = 0; r < sp.p && o.ok; ++r)
        if (out.at(r) != want) bad(r);
    } else {
      for (int r = 0; r < sp.p && o.ok; ++r)
        if (!std::equal(part[static_cast<std::size_t>(r)].begin(), part[static_cast<std::size_t>(r)].end(),
                        want.begin() + static_cast<std::ptrdiff_t>(off[static_cast<std::size_t>(r)])))
          bad(r);
    }
    o.verified = o.ok;
  }
  return o;
}

const std::vector<entry>& registry() {
  static const std::vector<entry> r = {
      {"broadcast", "automatic", algorithm::automatic,
       "the automatic choice (optcast/choose.hpp): every algorithm's LogGP prediction with its best block count, "
       "the least wins; --explain prints them",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::automatic); }},
      {"broadcast", "circulant", algorithm::circulant,
       "Träff 2024, Algorithm 1: n blocks in n - 1 + ceil(log2 p) rounds",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::circulant); }},
      {"broadcast", "binomial", algorithm::binomial, "baseline: binomial tree of the whole message, ceil(log2 p) rounds",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::binomial); }},
      {"broadcast", "logp_tree", algorithm::logp_tree,
       "Karp et al. 1993, Theorem 2.1: the universal optimal tree B(P) for the model's L, o, g",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::logp_tree); },
       [](const sim::model& m, const sim_params& sp) -> std::optional<figure> {
         if (!logp_like(m)) return std::nullopt;
         return figure{"B(P; L, o, g)", logp::B(sp.p, {m.L, m.o, m.g})};
       }},
      {"broadcast", "buffered", algorithm::buffered,
       "Karp et al. 1993, Section 3.5: n items single-sending on block-cyclic optimal trees; B(P-1) + L + n - 1 "
       "with choosing receivers (--choose)",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::buffered); },
       [](const sim::model& m, const sim_params& sp) -> std::optional<figure> {
         if (m.kind != sim::model_kind::postal || m.L != std::floor(m.L) || sp.p < 2) return std::nullopt;
         return figure{std::string("B(P-1) + L + n - 1") + (m.choose ? "" : ", with --choose"),
                       logp::B(sp.p - 1, {m.L, 0, 1}) + m.L + sp.blocks - 1};
       }},
      {"broadcast", "single_sending", algorithm::single_sending,
       "Karp et al. 1993, Theorem 3.7: n items single-sending, each received as it arrives; the paper's bound "
       "B(P-1) + 2L + n - 2, the single-sending lower bound B(P-1) + L + n - 1",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::single_sending); },
       [](const sim::model& m, const sim_params& sp) -> std::optional<figure> {
         if (m.kind != sim::model_kind::postal || m.L != std::floor(m.L) || sp.p < 2) return std::nullopt;
         return figure{"B(P-1) + 2L + n - 2", logp::B(sp.p - 1, {m.L, 0, 1}) + 2 * m.L + sp.blocks - 2};
       }},
      {"broadcast", "fibonacci", algorithm::fibonacci,
       "Bruck, Cypher, Ho 1992, Section 4: n packets on d generalized Fibonacci trees (d odd, chosen per p and n), "
       "one port; Lemma 4.8's n + f_d((p-1)/d) + 2d - 2 where p >= d^2 + d + 1, lower bound n + ceil(log2 p) - 1",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::fibonacci); },
       [](const sim::model& m, const sim_params& sp) -> std::optional<figure> {
         if (m.kind != sim::model_kind::rounds) return std::nullopt;
         const auto lay = fibonacci::choose(sp.p, sp.blocks);
         if (lay.d >= 3 && sp.p >= lay.d * lay.d + lay.d + 1)
           return figure{"n + f_d((p-1)/d) + 2d - 2, d = " + std::to_string(lay.d) + " (Lemma 4.8)",
                         static_cast<double>(fibonacci::lemma_4_8(sp.p, sp.blocks, lay.d))};
         return figure{"n + ceil(log2 p) - 1 (Lemma 2.1, a lower bound; p is below the paper's range)",
                       static_cast<double>(sp.blocks + circulant::ceil_log2(sp.p) - 1)};
       }},
      {"broadcast", "ktree", algorithm::ktree,
       "Bar-Noy, Ho 1998, Section 3: k ports (--ports), k spanning trees of height h; ceil(n/k) + h - 1 rounds "
       "(Theorem 6), lower bound ceil(n/k) - 1 + ceil(log_{k+1} p) (Lemma 2)",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::ktree); },
       [](const sim::model& m, const sim_params& sp) -> std::optional<figure> {
         if (m.kind != sim::model_kind::rounds || m.ports < 2) return std::nullopt;
         return figure{"ceil(n/k) + h - 1, h = " + std::to_string(multiport::ktree_height(sp.p, m.ports)) + " (Theorem 6)",
                       static_cast<double>((sp.blocks + m.ports - 1) / m.ports + multiport::ktree_height(sp.p, m.ports) - 1)};
       }},
      {"broadcast", "rotation", algorithm::rotation,
       "Bar-Noy, Ho 1998, Section 4: k ports (--ports), chained broadcasting black boxes; ceil(n/k) + ceil(log_{k+1} p) "
       "rounds (Theorem 10), lower bound Lemma 3",
       [](auto& w, auto& c, auto& sp) { return run_broadcast(w, c, sp, algorithm::rotation); },
       [](const sim::model& m, const sim_params& sp) -> std::optional<figure> {
         if (m.kind != sim::model_kind::rounds || m.ports < 2) return std::nullopt;
         return figure{"ceil(n/k) + ceil(log_{k+1} p) (Theorem 10; Lemma 3's lower bound " +
                           std::to_string(multiport::lemma_3(sp.p, sp.blocks, m.ports)) + ")",
                       static_cast<double>((sp.blocks + m.ports - 1) / m.ports + multiport::ceil_log(m.ports + 1, sp.p))};
       }},
      {"scatter", "split_tree", algorithm::split_tree,
       "Alexandrov et al. 1995, 4.5-4.7: A_t^k, the split tree of least LogGP time (optimal for one item per rank, Theorem 1)",
       [](auto& w, auto& c, auto& sp) { return run_scatter_gather(w, c, sp, algorithm::split_tree, false); },
       [](const sim::model& m, const sim_params& sp) { return scatter_figure(m, sp, algorithm::split_tree); }},
      {"scatter", "binomial", algorithm::binomial,
       "Alexandrov et al. 1995, 4.4: the Binomial Tree, halves at every split (Lemma 2)",
       [](auto& w, auto& c, auto& sp) { return run_scatter_gather(w, c, sp, algorithm::binomial, false); },
       [](const sim::model& m, const sim_params& sp) { return scatter_figure(m, sp, algorithm::binomial); }},
      {"scatter", "long_message", algorithm::long_message,
       "Alexandrov et al. 1995, 4.3: Simple Long-Message, the root sends every rank its segment",
       [](auto& w, auto& c, auto& sp) { return run_scatter_gather(w, c, sp, algorithm::long_message, false); },
       [](const sim::model& m, const sim_params& sp) { return scatter_figure(m, sp, algorithm::long_message); }},
      {"scatter", "short_message", algorithm::short_message,
       "Alexandrov et al. 1995, 4.2: Short-Message, one message per byte",
       [](auto& w, auto& c, auto& sp) { return run_scatter_gather(w, c, sp, algorithm::short_message, false); },
       [](const sim::model& m, const sim_params& sp) { return scatter_figure(m, sp, algorithm::short_message); }},
      {"gather", "split_tree", algorithm::split_tree,
       "Alexandrov et al. 1995, 4.5-4.7: A_t^k, the split tree of least LogGP time (optimal for one item per rank, Theorem 1), reversed",
       [](auto& w, auto& c, auto& sp) { return run_scatter_gather(w, c, sp, algorithm::split_tree, true); }},
      {"gather", "binomial", algorithm::binomial,
       "Alexandrov et al. 1995, 4.4: the Binomial Tree, halves at every split (Lemma 2), reversed",
       [](auto& w, auto& c, auto& sp) { return run_scatter_gather(w, c, sp, algorithm::binomial, true); }},
      {"gather", "long_message", algorithm::long_message,
       "Alexandrov et al. 1995, 4.3: Simple Long-Message, the root sends every rank its segment, reversed",
       [](auto& w, auto& c, auto& sp) { return run_scatter_gather(w, c, sp, algorithm::long_message, true); }},
      {"gather", "short_message", algorithm::short_message,
       "Alexandrov et al. 1995, 4.2: Short-Message, one message per byte, reversed",
       [](auto& w, auto& c, auto& sp) { return run_scatter_gather(w, c, sp, algorithm::short_message, true); }},
      {"stream", "continuous", algorithm::automatic,
       "Karp et al. 1993, Sections 3.1-3.3: continuous broadcast of n items (broadcast_stream); block-cyclic "
       "words give every item the delay L + B(P-1), else windows of the Theorem 3.7 plan",
       [](auto& w, auto& c, auto& sp) { return run_stream(w, c, sp); }},
      {"allgather", "circulant", algorithm::circulant,
       "Träff 2024, Algorithm 7 (Appendix A): all p broadcasts at once, n - 1 + ceil(log2 p) rounds",
       [](auto& w, auto& c, auto& sp) { return run_allgatherv(w, c, sp, true); }},
      {"allgather", "staggered", algorithm::staggered,
       "Karp et al. 1993, Section 4.1: rank i sends to i+1, ..., i+P-1 one every g; L + 2o + g(n(P-1)-1) for n items",
       [](auto& w, auto& c, auto& sp) { return run_allgatherv(w, c, sp, true); }, staggered_figure},
      {"alltoall", "staggered", algorithm::staggered,
       "Karp et al. 1993, Section 4.1: all-to-all personalized on the staggered schedule, L + 2o + g(n(P-1)-1)",
       [](auto& w, auto& c, auto& sp) { return run_alltoall(w, c, sp); }, staggered_figure},
      {"allgatherv", "circulant", algorithm::circulant,
       "Träff 2024, Algorithm 7 with irregular counts (Observation 1.2); empty contributions skipped",
       [](auto& w, auto& c, auto& sp) { return run_allgatherv(w, c, sp, false); }},
      {"reduce", "circulant", algorithm::circulant,
       "Träff 2024, Observation 1.3: Algorithm 1 backwards, commutative operators",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "reduce", algorithm::circulant); }},
      {"reduce", "binomial", algorithm::binomial,
       "rank-ordered binomial tree, any associative operator: ceil(log2 p) rounds (+1 if root != 0)",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "reduce", algorithm::binomial); }},
      {"summation", "logp_tree", algorithm::logp_tree,
       "Karp et al. 1993, Section 5: n operands (--bytes) summed in least time, the broadcast tree for L + 1 reversed; "
       "unit-time additions",
       [](auto& w, auto& c, auto& sp) { return run_summation(w, c, sp); },
       [](const sim::model& m, const sim_params& sp) -> std::optional<figure> {
         if (!logp_like(m) || sp.bytes < 1) return std::nullopt;
         const auto plan = logp::summation_schedule(static_cast<std::int64_t>(sp.bytes), sp.p, {m.L, m.o, m.g});
         return figure{"least t with N(t) >= n (Lemma 5.1)", plan.t};
       }},
      {"reduce_scatter_block", "circulant", algorithm::circulant,
       "Träff 2024, Observation 1.4: Algorithm 7 backwards, n - 1 + ceil(log2 p) rounds",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "reduce_scatter_block", algorithm::circulant); }},
      {"reduce_scatter", "circulant", algorithm::circulant,
       "Träff 2024, Observation 1.4 with irregular counts",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "reduce_scatter", algorithm::circulant); }},
      {"reduce_scatter", "binomial", algorithm::binomial,
       "rank-ordered allreduce (binomial reduce + circulant broadcast), then each rank's part",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "reduce_scatter", algorithm::binomial); }},
      {"allreduce", "automatic", algorithm::automatic,
       "the automatic choice (optcast/choose.hpp): Träff's circulant pair or Karp et al.'s combining broadcast, "
       "whichever the LogGP model predicts sooner (commutative operators)",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "allreduce", algorithm::automatic); }},
      {"allreduce", "circulant", algorithm::circulant,
       "Träff 2024, Observation 1.4: reduce_scatter then allgather, 2 (n - 1 + ceil(log2 p)) rounds",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "allreduce", algorithm::circulant); }},
      {"allreduce", "combining", algorithm::combining,
       "Karp et al. 1993, Section 4.2: combining broadcast, P overlapping reductions; B(P) steps for P = P(T), a "
       "searched chain or a fold otherwise (logp.hpp)",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "allreduce", algorithm::combining); },
       [](const sim::model& m, const sim_params& sp) -> std::optional<figure> {
         if (m.kind != sim::model_kind::postal || m.L != std::floor(m.L) || m.L < 1) return std::nullopt;
         const auto plan = logp::combining_for(sp.p, static_cast<int>(m.L));
         return figure{"T (" + std::string(logp::to_string(plan->how)) + "; B(P) = " +
                           cli::json_number(logp::B(sp.p, {m.L, 0, 1})) + ")",
                       static_cast<double>(plan->T)};
       }},
      {"allreduce", "binomial", algorithm::binomial,
       "rank-ordered binomial reduce to rank 0, then Träff's circulant broadcast",
       [](auto& w, auto& c, auto& sp) { return run_reduction(w, c, sp, "allreduce", algorithm::binomial); }},
  };
  return r;
}

// The block count a run uses when --blocks is not given: what the library chooses on
// these communicators (its LogGP rule, optcast/choose.hpp, under the simulator's model),
// so that the figures printed beside the run use the n that ran. The algorithms the rule
// does not cover take the linear model's choice with the model's own costs (startup
// L + 2o, G per byte); 1 where bytes cost nothing.
int default_blocks(communicator& c, const sim::model& m, const sim_params& sp, const std::string& collective) {
  const loggp_params lm{m.L, m.o, m.g, m.G};
  const std::size_t cut = c.options().min_block_bytes;
  const auto most_least = [](const std::vector<std::size_t>& v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return std::pair{*hi, *lo};
  };
  const bool circ = sp.alg == algorithm::circulant || sp.alg == algorithm::automatic;
  if (collective == "broadcast") {
    const auto plan = plan_broadcast(c, sp.bytes, {.alg = sp.alg});
    if (plan) return plan->blocks;
  } else if (collective == "reduce" && circ) {
    return choose_circulant_blocks(circulant_collective::reduce, sp.p, sp.bytes, 0, 0, lm, cut).blocks;
  } else if (collective == "allreduce" && (circ || sp.alg == algorithm::binomial)) {
    return choose_circulant_blocks(circ ? circulant_collective::allreduce : circulant_collective::reduce, sp.p, sp.bytes, 0, 0, lm, cut)
        .blocks;
  } else if ((collective == "allgather" || collective == "allgatherv") && circ) {
    const auto counts = collective == "allgather" ? std::vector<std::size_t>(static_cast<std::size_t>(sp.p), sp.bytes)
                                                  : distribute(sp.bytes, sp.p, sp.counts);
    const auto [hi, lo] = most_least(counts);
    const auto total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    return choose_circulant_blocks(circulant_collective::all_roots, sp.p, total, hi, lo, lm, cut).blocks;
  } else if ((collective == "reduce_scatter" || collective == "reduce_scatter_block") && (circ || sp.alg == algorithm::binomial)) {
    const auto counts = collective == "reduce_scatter_block"
                            ? std::vector<std::size_t>(static_cast<std::size_t>(sp.p), sp.bytes / static_cast<std::size_t>(sp.p))
                            : distribute(sp.bytes, sp.p, sp.counts);
    const auto [hi, lo] = most_least(counts);
    const auto total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    return choose_circulant_blocks(circ ? circulant_collective::all_roots : circulant_collective::reduce, sp.p, total, hi, lo, lm, cut)
        .blocks;
  }
  if (m.kind == sim::model_kind::rounds || m.G <= 0 || collective == "alltoall") return 1;
  communicator_options o;
  o.cost = {m.L + 2 * m.o, m.G};
  o.min_block_bytes = 1;
  std::uint64_t volume = sp.bytes;
  if (collective == "allgather") volume = sp.bytes * static_cast<std::uint64_t>(sp.p);
  return automatic_block_count(static_cast<std::size_t>(volume), sp.p, o);
}

}  // namespace

int cmd_simulate(int argc, char** argv) {
  cli::parser args("optcast simulate",
                   "Runs a collective on P simulated ranks (one process, virtual time) under a cost model and prints\n"
                   "what happened: finish time, rounds, messages, bytes, the longest chain of messages, per-rank\n"
                   "finish times. Every rank's result is checked unless the buffers would not fit in memory.");
  args.option("collective", "C", "broadcast, allgather, allgatherv, alltoall, reduce, reduce_scatter_block, reduce_scatter, allreduce, summation")
      .option("algorithm", "A", "an algorithm of that collective (see --list)", "automatic")
      .option("p", "P", "number of ranks")
      .option("bytes", "M", "message size (allgather: per rank; alltoall: per pair of ranks; allgatherv, reduce_scatter(_block): in total; summation: the operand count n)", "1")
      .option("blocks", "n", "pipelining depth (default: from the model, 1 under rounds)")
      .option("root", "r", "root rank of broadcast and reduce", "0")
      .option("counts", "HOW", "allgatherv / reduce_scatter counts: even, skewed (every 4th rank 0), one (all on the last rank)", "even")
      .option("model", "MODEL", "rounds, postal:L, logp:L,o,g or loggp:L,o,g,G", "rounds")
      .option("ports", "k", "ports per rank (k-port model)", "1")
      .flag("choose", "receivers choose among arrived messages, receives posted first first (Karp et al. 3.5)")
      .flag("explain", "broadcast, allreduce: print what the automatic choice predicts for every algorithm, and what it picks (allreduce always prints it)")
      .flag("json", "one JSON object instead of text")
      .flag("list", "list every collective and algorithm with its source, and exit")
      .flag("no-verify", "do not check results (and share one buffer among all ranks)");
  args.note("Units: model time units (rounds, or the cycles of L, o, g, G); G is per byte.\n"
            "Example: optcast simulate --collective allgather --p 1000 --bytes 64 --blocks 4 --model loggp:5,1,2,0.01");
  args.parse(argc, argv, 2);
  if (args.get_flag("list")) {
    for (const auto& e : registry()) std::printf("%-21s %-10s %s\n", e.collective, e.algorithm, e.source);
    return 0;
  }
  if (!args.has("collective")) args.die("--collective is required (see --list)");
  if (!args.has("p")) args.die("--p is required");
  sim_params sp;
  sp.p = static_cast<int>(args.get_int("p", 1, 1 << 24));
  sp.bytes = args.get_size("bytes");
  sp.root = static_cast<int>(args.get_int("root", 0, sp.p - 1));
  sp.counts = args.get("counts");
  if (sp.counts != "even" && sp.counts != "skewed" && sp.counts != "one") args.die("--counts: even, skewed or one");
  const int ports = static_cast<int>(args.get_int("ports", 1, 1024));
  std::string why;
  auto model = sim::model::parse(args.get("model"), ports, &why);
  if (!model) args.die("--model: " + why);
  if (args.get_flag("choose")) {
    if (model->kind == sim::model_kind::rounds) args.die("--choose: not under the rounds model (postal, logp or loggp)");
    model->choose = true;
  }
  const std::string coll = args.get("collective"), alg_name = args.get("algorithm");
  auto alg = parse_algorithm(alg_name);
  if (!alg) {
    std::string names = "automatic";
    for (const auto& e : registry())
      if (names.find(e.algorithm) == std::string::npos) names += std::string(", ") + e.algorithm;
    args.die("--algorithm '" + alg_name + "': one of " + names + " (see --list)");
  }
  // automatic: the first entry of the collective (circulant where there is one).
  const entry* chosen = nullptr;
  bool known = false;
  for (const auto& e : registry()) {
    if (coll != e.collective) continue;
    known = true;
    if (*alg == algorithm::automatic || *alg == e.alg) {
      chosen = &e;
      break;
    }
  }
  if (!known) args.die("--collective '" + coll + "' is not one optcast has (see --list)");
  if (!chosen) args.die("--algorithm '" + alg_name + "' is not available for " + coll + " (see --list)");
  sp.alg = chosen->alg;
  if (args.has("blocks")) sp.blocks = static_cast<int>(args.get_int("blocks", 1, 1 << 24));
  if (args.get_flag("explain") && coll != "broadcast" && coll != "allreduce")
    args.die("--explain: for --collective broadcast or allreduce");
  if (coll == "reduce_scatter_block" && sp.bytes % static_cast<std::uint64_t>(sp.p))
    args.die("--bytes: reduce_scatter_block needs a multiple of p (" + std::to_string(sp.p) + ")");

  // Memory: every rank's buffers, when verifying.
  std::uint64_t per_rank = sp.bytes * 2;
  if (coll == "allgather") per_rank = sp.bytes * static_cast<std::uint64_t>(sp.p) + sp.bytes;
  if (coll == "alltoall") per_rank = sp.bytes * static_cast<std::uint64_t>(sp.p) * 2;
  const std::uint64_t budget = std::uint64_t{2} << 30;
  sp.verify = !args.get_flag("no-verify") && per_rank * static_cast<std::uint64_t>(sp.p) <= budget;
  const bool json = args.get_flag("json");
  if (!sp.verify && !args.get_flag("no-verify") && !json)
    std::fprintf(stderr, "simulate: %s of buffers would not fit; timing only (results not checked)\n",
                 cli::format_size(per_rank * static_cast<std::uint64_t>(sp.p)).c_str());

  sim::world w(sp.p, *model, {.move_payload = sp.verify});
  auto comms = w.communicators();
  for (auto& c : comms) c.options().min_block_bytes = 1;  // simulated bytes are cheap to cut
  std::string explained;
  if (coll == "broadcast") {
    // What broadcast() itself will run (the automatic choice resolved).
    std::string refused;
    const auto plan = plan_broadcast(comms[0], sp.bytes, {.alg = sp.alg, .blocks = sp.blocks}, &refused);
    if (!plan) args.die(refused);
    if (args.get_flag("explain")) explained = plan->explain();
    if (!sp.blocks) sp.blocks = plan->blocks;
  }
  if (!sp.blocks) sp.blocks = default_blocks(comms[0], *model, sp, coll);
  if (coll == "allreduce" && sp.alg == algorithm::automatic) {
    const auto ch = choose_allreduce(sp.p, sp.bytes, {model->L, model->o, model->g, model->G}, 1, sp.blocks);
    char b[200];
    std::snprintf(b, sizeof b, "%s (predicted circulant %.4g with n = %d, combining %.4g)",
                  std::string(to_string(ch.alg)).c_str(), ch.circulant, sp.blocks, ch.combining);
    explained = b;
  }
  const auto started = std::chrono::steady_clock::now();
  const run_outcome out = chosen->run(w, comms, sp);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const auto rep = w.take_report();
  const int q = circulant::ceil_log2(sp.p);
  const auto paper = chosen->paper ? chosen->paper(*model, sp) : std::nullopt;

  if (json) {
    std::string j = rep.json();
    j.pop_back();
    j += ",\"collective\":\"" + coll + "\",\"algorithm\":\"" + chosen->algorithm + "\",\"p\":" + std::to_string(sp.p) +
         ",\"bytes\":" + std::to_string(sp.bytes) + ",\"blocks\":" + std::to_string(sp.blocks) +
         ",\"root\":" + std::to_string(sp.root) + ",\"ok\":" + (out.ok ? "true" : "false") +
         ",\"verified\":" + (out.verified ? "true" : "false") + ",\"wall_seconds\":" + std::to_string(wall);
    if (paper) j += ",\"paper_figure\":{\"name\":\"" + paper->name + "\",\"value\":" + cli::json_number(paper->value) + "}";
    if (!explained.empty()) j += ",\"explain\":\"" + explained + "\"";
    if (!out.measured.empty()) {
      j += ",\"measured\":{";
      for (std::size_t i = 0; i < out.measured.size(); ++i)
        j += (i ? ",\"" : "\"") + out.measured[i].first + "\":" + cli::json_number(out.measured[i].second);
      j += "}";
    }
    j += "}";
    std::puts(j.c_str());
  } else {
    std::printf("%s, %s, p = %d, %s, n = %s, model %s\n", coll.c_str(), chosen->algorithm, sp.p,
                cli::format_size(sp.bytes).c_str(), std::to_string(sp.blocks).c_str(), rep.model.c_str());
    std::printf("  source          %s\n", chosen->source);
    if (!explained.empty())
      std::printf("  automatic       %s\n", explained.c_str());
    const bool by_comm = coll == "scatter" || coll == "gather";  // Alexandrov et al. time by footnote 4
    std::printf("  finish time     %g", rep.finish_time);
    if (paper && !by_comm) std::printf("   (paper: %s = %g)", paper->name.c_str(), paper->value);
    std::printf("\n");
    if (model->kind != sim::model_kind::rounds) {
      std::printf("  comm. finish    %g", rep.comm_finish_time);
      if (paper && by_comm) std::printf("   (paper: %s = %g)", paper->name.c_str(), paper->value);
      std::printf("   (every rank free to communicate again)\n");
    }
    std::printf("  rounds          %llu", static_cast<unsigned long long>(rep.rounds));
    if (model->kind == sim::model_kind::rounds && std::string(chosen->algorithm) == "circulant")
      std::printf("   (n - 1 + ceil(log2 p) = %d%s)", sp.blocks - 1 + q, coll == "allreduce" ? ", twice for allreduce" : "");
    for (const auto& [name, v] : out.measured) std::printf("\n  %-24s %g", name.c_str(), v);
    std::printf("\n  messages        %llu\n  bytes           %llu\n  longest chain   %u messages\n",
                static_cast<unsigned long long>(rep.messages), static_cast<unsigned long long>(rep.bytes), rep.longest_chain);
    if (!rep.ranks.empty()) {
      auto [lo, hi] = std::minmax_element(rep.ranks.begin(), rep.ranks.end(),
                                          [](const auto& a, const auto& b) { return a.finish < b.finish; });
      std::printf("  rank finish     %g (rank %td) .. %g (rank %td)\n", lo->finish, lo - rep.ranks.begin(), hi->finish,
                  hi - rep.ranks.begin());
    }
    if (rep.unreceived) std::printf("  unreceived      %llu messages\n", static_cast<unsigned long long>(rep.unreceived));
    std::printf("  result          %s\n", !out.ok ? ("FAILED: " + out.error).c_str()
                                          : out.verified ? "verified on every rank" : "not checked (timing only)");
    std::printf("  simulated in    %.3f s\n", wall);
  }
  return out.ok ? 0 : 1;
}

}  // namespace optcast::tools
