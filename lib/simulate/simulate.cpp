// The harness behind optcast::sim::simulate (optcast/simulate.hpp): buffers, the call,
// and the check of every rank's result, per collective.
#include "optcast/simulate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "optcast/choose.hpp"
#include "optcast/collectives.hpp"
#include "optcast/stream.hpp"
#include "blocks.hpp"
#include "core/huge_vector.hpp"
#include "causality.hpp"

namespace optcast::sim {

namespace {

// Where each rank's result lives: the recorded messages' blocks are named from it. Only
// addresses are kept (compared, never read), so it outlives the buffers.
struct layout {
  detail::huge_vector<std::uintptr_t> base;   // per rank; one entry: shared by every rank
  std::vector<std::size_t> part_off;  // the parts' offsets in it, and the end
  std::size_t blocks = 1;             // each part in this many blocks (block_partition)

  template <class F>
  static layout of(const run_request& sp, F&& buffer_of, std::vector<std::size_t> parts) {
    layout l;
    l.base.reserve(static_cast<std::size_t>(sp.verify ? sp.p : 1));
    for (int r = 0; r < (sp.verify ? sp.p : 1); ++r) l.base.push_back(reinterpret_cast<std::uintptr_t>(buffer_of(r)));
    l.part_off.assign(1, 0);
    for (auto c : parts) l.part_off.push_back(l.part_off.back() + c);
    l.blocks = static_cast<std::size_t>(std::max(sp.blocks, 1));
    return l;
  }
  void label(message_record& m) const {
    if (base.empty() || !m.dst_data) return;
    const auto b = base[base.size() == 1 ? 0 : static_cast<std::size_t>(m.dst)];
    if (m.dst_data < b || m.dst_data - b >= part_off.back()) return;
    const std::size_t at = m.dst_data - b;
    const auto j = static_cast<std::size_t>(std::upper_bound(part_off.begin(), part_off.end(), at) - part_off.begin() - 1);
    const std::size_t size = part_off[j + 1] - part_off[j];
    m.part = part_off.size() > 2 ? static_cast<int>(j) : -1;
    m.block = static_cast<int>(block_partition(size, std::min(blocks, size)).index_of(at - part_off[j]));
  }
};

struct run_outcome {
  bool ok = true;
  std::string error;
  bool verified = false;
  std::vector<std::pair<std::string, double>> measured;  // what the run itself reports
  layout where;
  void fail(std::string why) {
    ok = false;
    error = std::move(why);
  }
};

std::uint8_t byte_of(int rank, std::size_t i) {
  return static_cast<std::uint8_t>((static_cast<std::size_t>(rank) * 131 + i * 7 + (i >> 9)) & 0xff);
}

std::string first_failure(const std::vector<result<void>>& res, std::vector<communicator>& comms) {
  for (std::size_t r = 0; r < res.size(); ++r)
    if (!res[r]) {
      std::string d = comms[r].last_error().empty() ? comms[r].failure_detail() : comms[r].last_error();
      return "rank " + std::to_string(r) + ": " + describe(res[r].error(), d);
    }
  return {};
}

// Buffers: one per rank when verifying, else one shared by all (timing only); the ranks'
// in one allocation, each at a 16-byte boundary (a vector per rank cost a tenth of a
// 10^5-rank broadcast's run).
struct buffers {
  std::size_t size, stride;
  detail::huge_vector<std::uint8_t> all;
  explicit buffers(const run_request& sp, std::size_t n)
      : size(n), stride((std::max<std::size_t>(n, 1) + 15) & ~std::size_t{15}),
        all((sp.verify ? static_cast<std::size_t>(sp.p) : 1) * stride) {}
  std::span<std::uint8_t> at(int r) {
    return std::span(all).subspan(all.size() == stride ? 0 : static_cast<std::size_t>(r) * stride, size);
  }
};

collective_options opts_of(const run_request& sp, algorithm alg) { return {.alg = alg, .blocks = sp.blocks}; }

run_outcome run_broadcast(std::vector<communicator>& comms, const run_request& sp, algorithm alg) {
  buffers b(sp, sp.bytes);
  if (sp.verify)
    for (std::size_t i = 0; i < sp.bytes; ++i) b.at(sp.root)[i] = byte_of(sp.root, i);
  auto res = optcast::run_all(comms, [&](communicator& c) { return broadcast(c, std::span(b.at(c.rank())), sp.root, opts_of(sp, alg)); });
  run_outcome o;
  o.where = layout::of(sp, [&](int r) { return b.at(r).data(); }, {sp.bytes});
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    for (int r = 0; r < sp.p && o.ok; ++r)
      if (!std::ranges::equal(b.at(r), b.at(sp.root))) o.fail("rank " + std::to_string(r) + " holds wrong bytes");
    o.verified = o.ok;
  }
  return o;
}

// Scatter (the root's p segments of sp.bytes to every rank) or gather (the reverse).
run_outcome run_scatter_gather(std::vector<communicator>& comms, const run_request& sp, algorithm alg,
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
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
    const bool is_root = c.rank() == sp.root;
    std::span<std::uint8_t> whole = !is_root ? std::span<std::uint8_t>() : sp.verify ? std::span(gather_it ? back : all) : std::span(root_buf);
    if (gather_it) co_return co_await gather(c, std::span<const std::uint8_t>(part.at(c.rank())), whole, sp.root, opts_of(sp, alg));
    co_return co_await scatter(c, std::span<const std::uint8_t>(whole), std::span(part.at(c.rank())), sp.root, opts_of(sp, alg));
  });
  run_outcome o;
  if (gather_it)
    o.where = layout::of(sp, [&](int) { return sp.verify ? back.data() : root_buf.data(); }, std::vector<std::size_t>(P, sp.bytes));
  else
    o.where = layout::of(sp, [&](int r) { return part.at(r).data(); }, {sp.bytes});
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    if (gather_it && back != all) o.fail("the root gathered wrong bytes");
    for (int r = 0; r < sp.p && o.ok && !gather_it; ++r)
      if (!std::equal(part.at(r).begin(), part.at(r).end(), all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * sp.bytes)))
        o.fail("rank " + std::to_string(r) + " got wrong bytes");
    o.verified = o.ok;
  }
  return o;
}

// A stream of sp.blocks items of sp.bytes: every rank checks each item; the delay of
// item i is when the last rank has it minus the step the root sent it.
run_outcome run_stream(std::vector<communicator>& comms, const run_request& sp) {
  const auto k = static_cast<std::size_t>(sp.blocks);
  std::vector<std::vector<double>> when(static_cast<std::size_t>(sp.p));
  std::vector<std::int64_t> push(k);
  std::int64_t bound = 0, stated = 0;
  bool cyclic = false, bad = false;
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
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

run_outcome run_allgatherv(std::vector<communicator>& comms, const run_request& sp, bool regular) {
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
  auto res = optcast::run_all(comms, [&](communicator& c) {
    const auto R = static_cast<std::size_t>(c.rank());
    // Timing only: each rank's part of the one shared buffer is its input (in place).
    std::span<const std::uint8_t> mine = sp.verify ? std::span<const std::uint8_t>(in[R])
                                                   : std::span<const std::uint8_t>(out.at(0)).subspan(off[R], counts[R]);
    if (regular) return allgather(c, mine, std::span(out.at(c.rank())), opts_of(sp, sp.alg));
    return allgatherv(c, mine, std::span(out.at(c.rank())), std::span<const std::size_t>(counts), opts_of(sp, sp.alg));
  });
  run_outcome o;
  o.where = layout::of(sp, [&](int r) { return out.at(r).data(); }, counts);
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    for (int r = 0; r < sp.p && o.ok; ++r)
      for (int j = 0; j < sp.p && o.ok; ++j)
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(j)]; ++i)
          if (out.at(r)[off[static_cast<std::size_t>(j)] + i] != byte_of(j, i)) {
            o.fail("rank " + std::to_string(r) + " holds a wrong byte of rank " + std::to_string(j) + "'s part");
            break;
          }
    o.verified = o.ok;
  }
  return o;
}

// --bytes per rank pair: rank r's block j, for rank j, holds byte_of(r * p + j, i).
run_outcome run_alltoall(std::vector<communicator>& comms, const run_request& sp) {
  const auto P = static_cast<std::size_t>(sp.p);
  const std::size_t m = sp.bytes;
  buffers in(sp, P * m), out(sp, P * m);
  if (sp.verify)
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t j = 0; j < P; ++j)
        for (std::size_t i = 0; i < m; ++i) in.at(static_cast<int>(r))[j * m + i] = byte_of(static_cast<int>(r * P + j), i);
  auto res = optcast::run_all(comms, [&](communicator& c) {
    return alltoall(c, std::span<const std::uint8_t>(in.at(c.rank())), std::span(out.at(c.rank())), opts_of(sp, sp.alg));
  });
  run_outcome o;
  o.where = layout::of(sp, [&](int r) { return out.at(r).data(); }, std::vector<std::size_t>(P, m));
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    for (std::size_t r = 0; r < P && o.ok; ++r)
      for (std::size_t j = 0; j < P && o.ok; ++j)
        for (std::size_t i = 0; i < m; ++i)
          if (out.at(static_cast<int>(r))[j * m + i] != byte_of(static_cast<int>(j * P + r), i)) {
            o.fail("rank " + std::to_string(r) + " holds a wrong byte from rank " + std::to_string(j));
            break;
          }
    o.verified = o.ok;
  }
  return o;
}

// The barrier moves nothing; what it must do is checked on the recorded messages
// (heard_from_all, once the run is over).
run_outcome run_barrier(std::vector<communicator>& comms, const run_request& sp) {
  auto res = optcast::run_all(comms, [&](communicator& c) { return barrier(c, opts_of(sp, sp.alg)); });
  run_outcome o;
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  return o;
}

// --bytes is n, the operand count: operand i is byte_of(0, i), summed mod 256 in order.
run_outcome run_summation(std::vector<communicator>& comms, const run_request& sp) {
  std::vector<std::uint8_t> got(static_cast<std::size_t>(sp.p));
  const auto n = static_cast<std::int64_t>(sp.bytes);
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
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
    if (got[static_cast<std::size_t>(sp.root)] != static_cast<std::uint8_t>(want)) o.fail("the root holds a wrong sum");
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

run_outcome run_reduction(std::vector<communicator>& comms, const run_request& sp, const std::string& which,
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
  auto res = optcast::run_all(comms, [&](communicator& c) -> task<result<void>> {
    const auto R = static_cast<std::size_t>(c.rank());
    std::span<const std::uint8_t> src(in.at(c.rank()));
    if (which == "reduce") co_return co_await reduce(c, src, std::span(out.at(c.rank())), ops::sum, sp.root, o_);
    if (which == "allreduce") co_return co_await allreduce(c, src, std::span(out.at(c.rank())), ops::sum, o_);
    if (which == "reduce_scatter_block") co_return co_await reduce_scatter_block(c, src, std::span(part[R]), ops::sum, o_);
    co_return co_await reduce_scatter(c, src, std::span(part[R]), std::span<const std::size_t>(counts), ops::sum, o_);
  });
  run_outcome o;
  if (which == "reduce" || which == "allreduce")
    o.where = layout::of(sp, [&](int r) { return out.at(r).data(); }, {m});
  o.error = first_failure(res, comms);
  o.ok = o.error.empty();
  if (o.ok && sp.verify) {
    std::vector<std::uint8_t> want(m);
    for (std::size_t i = 0; i < m; ++i) want[i] = sum_of(sp.p, i);
    auto bad = [&](int r) { o.fail("rank " + std::to_string(r) + " holds a wrong sum"); };
    if (which == "reduce") {
      if (!std::ranges::equal(out.at(sp.root), want)) bad(sp.root);
    } else if (which == "allreduce") {
      for (int r = 0; r < sp.p && o.ok; ++r)
        if (!std::ranges::equal(out.at(r), want)) bad(r);
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

// The harness of each collective: buffers, the call, the check of every rank's result.
run_outcome run_collective(collective coll, std::vector<communicator>& c, const run_request& sp) {
  switch (coll) {
    case collective::broadcast: return run_broadcast(c, sp, sp.alg);
    case collective::scatter: return run_scatter_gather(c, sp, sp.alg, false);
    case collective::gather: return run_scatter_gather(c, sp, sp.alg, true);
    case collective::allgather: return run_allgatherv(c, sp, true);
    case collective::allgatherv: return run_allgatherv(c, sp, false);
    case collective::alltoall: return run_alltoall(c, sp);
    case collective::reduce:
    case collective::allreduce:
    case collective::reduce_scatter_block:
    case collective::reduce_scatter: return run_reduction(c, sp, std::string(to_string(coll)), sp.alg);
    case collective::summation: return run_summation(c, sp);
    case collective::stream: return run_stream(c, sp);
    case collective::barrier: return run_barrier(c, sp);
  }
  return {false, "no harness for " + std::string(to_string(coll))};
}

// What the run moves, as plan_collective reads it (the sums are of bytes: order-free).
call_shape shape_of(collective coll, const run_request& sp) {
  const auto parts = [&](const std::vector<std::size_t>& counts) {
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    return call_shape{std::accumulate(counts.begin(), counts.end(), std::size_t{0}), *hi, *lo};
  };
  const auto p = static_cast<std::size_t>(sp.p);
  switch (coll) {
    case collective::allgather:
    case collective::scatter:
    case collective::gather: return parts(std::vector<std::size_t>(p, sp.bytes));
    case collective::allgatherv:
    case collective::reduce_scatter: return parts(distribute(sp.bytes, sp.p, sp.counts));
    case collective::reduce_scatter_block: return parts(std::vector<std::size_t>(p, sp.bytes / p));
    case collective::alltoall: return {sp.bytes * p};
    default: return {sp.bytes};
  }
}

}  // namespace



result<run_result> simulate(run_request sp, std::string* why) {
  const auto refused = [&](std::string text) -> result<run_result> {
    if (why) *why = std::move(text);
    return fail(errc::invalid_argument);
  };
  if (sp.p < 1) return refused("simulate: p must be at least 1");
  if (sp.root < 0 || sp.root >= sp.p) return refused("simulate: root " + std::to_string(sp.root) + " is not a rank of " + std::to_string(sp.p));
  if (sp.counts != "even" && sp.counts != "skewed" && sp.counts != "one")
    return refused("simulate: counts are even, skewed or one, not '" + sp.counts + "'");
  if (sp.coll == collective::reduce_scatter_block && sp.bytes % static_cast<std::uint64_t>(sp.p))
    return refused("simulate: reduce_scatter_block needs bytes a multiple of p (" + std::to_string(sp.p) + ")");
  if (sp.coll == collective::stream && sp.alg != algorithm::automatic && sp.alg != algorithm::continuous)
    return refused("stream: " + std::string(to_string(sp.alg)) + " is not an algorithm of stream; the algorithms are " +
                   algorithm_names(collective::stream));
  // Memory: every rank's buffers, when verifying.
  std::uint64_t per_rank = sp.bytes * 2;
  if (sp.coll == collective::allgather) per_rank = sp.bytes * static_cast<std::uint64_t>(sp.p) + sp.bytes;
  if (sp.coll == collective::alltoall) per_rank = sp.bytes * static_cast<std::uint64_t>(sp.p) * 2;
  sp.verify = sp.verify && per_rank * static_cast<std::uint64_t>(sp.p) <= (std::uint64_t{2} << 30);

  std::optional<topology> layout;
  if (sp.per_host < 1 || sp.rails < 1 || sp.p % sp.per_host != 0)
    return refused("simulate: " + std::to_string(sp.per_host) + " ranks per host and " + std::to_string(sp.rails) +
                   " rails for p = " + std::to_string(sp.p) + ": both at least 1, and p a multiple of the ranks per host");
  if (sp.per_host > 1 || sp.rails > 1) {
    layout.emplace();
    layout->rails = sp.rails;
    for (int r = 0; r < sp.p; ++r) layout->host_of.push_back(r / sp.per_host);
  }
  // A barrier is checked on its recorded messages (up to a size the check's p^2 bits allow).
  const bool check_barrier = sp.coll == collective::barrier && sp.verify && sp.p <= 4096;
  world w(sp.p, sp.model, {.move_payload = sp.verify, .record = sp.record || check_barrier, .progress = sp.progress, .layout = layout});
  auto comms = optcast::communicators_of(w);
  for (auto& c : comms) c.options().min_block_bytes = 1;  // simulated bytes are cheap to cut
  // What the library itself will run (the automatic choice resolved), with the n it
  // chooses unless the request gives one.
  run_result out{};
  const int given_blocks = sp.blocks;
  if (sp.coll == collective::stream) {
    out.alg = algorithm::continuous;
    if (!sp.blocks) sp.blocks = 1;
  } else {
    std::string no;
    const auto plan = plan_collective(comms[0], sp.coll, shape_of(sp.coll, sp), {.alg = sp.alg, .blocks = sp.blocks}, &no);
    if (!plan) return refused(no);
    out.alg = plan->alg;
    if (!sp.blocks) sp.blocks = plan->blocks;
  }
  // Run what was planned: the automatic choice asked again with the planned block count
  // fixed could answer differently (a broadcast given n = 1 never considers multi_lane).
  const bool automatic = sp.alg == algorithm::automatic;
  if (sp.coll != collective::stream) sp.alg = out.alg;
  out.blocks = sp.blocks;
  if (sp.explain && sp.coll == collective::broadcast)
    out.explained = plan_broadcast(comms[0], sp.bytes, {.alg = automatic ? algorithm::automatic : sp.alg, .blocks = given_blocks})->explain();
  if (sp.coll == collective::allreduce && automatic && out.alg == algorithm::multi_lane) {
    out.explained = "multi_lane (hosts of several ranks or rails: the lanes' prediction is the least)";
  } else if (sp.coll == collective::allreduce && automatic) {
    const auto ch = choose_allreduce(sp.p, sp.bytes, {sp.model.L, sp.model.o, sp.model.g, sp.model.G}, 1, sp.blocks);
    char b[200];
    std::snprintf(b, sizeof b, "%s (predicted circulant %.4g with n = %d, combining %.4g)",
                  std::string(to_string(ch.alg)).c_str(), ch.circulant, sp.blocks, ch.combining);
    out.explained = b;
  }
  const auto started = std::chrono::steady_clock::now();
  auto o = run_collective(sp.coll, comms, sp);
  out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  out.ok = o.ok;
  out.error = std::move(o.error);
  out.verified = o.verified;
  out.measured = std::move(o.measured);
  out.rep = w.take_report();
  if (check_barrier && out.ok) {
    out.verified = heard_from_all(out.rep, sp.p, out.error);
    out.ok = out.verified;
    if (!sp.record) out.rep.log.clear(), out.rep.local.clear();
  }
  for (auto& m : out.rep.log) o.where.label(m);
  out.paper = proven(sp.coll, out.alg, sp.model, {sp.p, sp.bytes, sp.blocks, sp.root, sp.per_host, sp.rails});
  out.hosts = hosts_bound(sp.coll, sp.model, {sp.p, sp.bytes, sp.blocks, sp.root, sp.per_host, sp.rails});
  if (out.paper) out.paper_met = out.paper->met_by(out.paper->measure(out.rep.finish_time, out.rep.comm_finish_time));
  return out;
}

}  // namespace optcast::sim
