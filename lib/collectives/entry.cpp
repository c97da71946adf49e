#include "optcast/collectives.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "round_loops.hpp"
#include "optcast/choose.hpp"
#include "bruck_cypher_ho/fibonacci.hpp"
#include "optcast/log.hpp"
#include "optcast/trace.hpp"
#include "optcast/when_all.hpp"
#include "bar_noy_ho/multiport.hpp"
#include "collective_common.hpp"
#include "traff/circulant.hpp"
#include "traff_hunold/lanes.hpp"
#include "multi_lane_runners.hpp"
#include "runtime/comm_access.hpp"

namespace optcast {

int automatic_block_count(std::size_t bytes, int p, const communicator_options& o) noexcept {
  const int q = circulant::ceil_log2(std::max(p, 1));
  if (q <= 1 || bytes == 0) return 1;
  const double n = std::sqrt((q - 1) * o.cost.beta_s_per_byte * static_cast<double>(bytes) /
                             o.cost.alpha_s);
  const double most = std::max<double>(1, static_cast<double>(bytes / std::max<std::size_t>(o.min_block_bytes, 1)));
  return static_cast<int>(std::clamp(std::round(n), 1.0, std::min(most, 1e6)));
}


namespace detail {

std::optional<loggp_params> model_for(communicator& c, const collective_options& o, std::string_view what,
                                      std::string& why) {
  if (o.model) {
    const auto& m = *o.model;
    if (!(m.L >= 0 && m.o >= 0 && m.g >= 0 && m.G >= 0 && m.gamma >= 0 && m.sharing >= 0 && m.round >= 0) || m.L + 2 * m.o <= 0 ||
        std::max(m.g, m.o) <= 0) {
      why = std::string(what) + ": model parameters must be >= 0, with L + 2o > 0 and max(g, o) > 0";
      return std::nullopt;
    }
    return m;
  }
  return c.get_fabric().cost_model().value_or(c.options().model);
}

call_start::call_start(communicator& c, collective what, const collective_options& o)
    : comm(c), coll(what), opts(o), seq(detail::comm_access::next_seq(c)) {
  sig.coll = static_cast<std::uint8_t>(static_cast<int>(what) + 1);
  if (c.broken())
    early = fail(errc::broken);
  else if (o.blocks < 0)
    refuse("blocks must not be negative");
}

bool call_start::refuse(const std::string& why) {
  early = detail::refuse(comm, std::string(to_string(coll)) + ": " + why);
  return false;
}

bool call_start::check_root(int root) {
  sig.root = static_cast<std::uint32_t>(root);
  if (root >= 0 && root < comm.size()) return true;
  return refuse("root " + std::to_string(root) + " is not a rank of this " + std::to_string(comm.size()) +
                "-rank communicator");
}

namespace {
// The signature of a call's counts: FNV-1a over them, or, when all are equal, over
// (n, p) with another seed, so that it takes O(1) where the counts are implicit.
std::uint64_t counts_signature(std::uint64_t seed, std::span<const std::int64_t> values) {
  std::uint64_t h = seed;
  for (auto n : values) h = (h ^ static_cast<std::uint64_t>(n)) * 0x100000001b3ull;
  return h ? h : 1;
}
std::uint64_t equal_counts_signature(std::int64_t n, int p) {
  const std::int64_t v[] = {n, p};
  return counts_signature(0x84222325cbf29ce4ull, v);
}
}  // namespace

void call_start::equal_counts(std::size_t n) noexcept {
  sig.counts = equal_counts_signature(static_cast<std::int64_t>(n), comm.size());
}

std::vector<std::size_t> call_start::counts(const std::vector<std::int64_t>& given) {
  if (given.size() != static_cast<std::size_t>(comm.size())) {
    refuse(std::to_string(given.size()) + " counts for " + std::to_string(comm.size()) + " ranks");
    return {};
  }
  std::vector<std::size_t> out;
  out.reserve(given.size());
  const bool equal = std::all_of(given.begin(), given.end(), [&](std::int64_t n) { return n == given.front(); });
  sig.counts = equal ? equal_counts_signature(given.front(), comm.size()) : counts_signature(0xcbf29ce484222325ull, given);
  for (std::size_t j = 0; j < given.size(); ++j) {
    if (given[j] < 0) {
      refuse("counts[" + std::to_string(j) + "] = " + std::to_string(given[j]) + " is negative (or too large)");
      return {};
    }
    out.push_back(static_cast<std::size_t>(given[j]));
  }
  return out;
}

call_traits call_start::traits(const erased_reduction* op) noexcept {
  if (op) {
    sig.op = op->op_code;
    sig.type = op->type_code;
    sig.elem = static_cast<std::uint32_t>(op->elem);
  }
  if (lanes_ < 0) lanes_ = has_lanes(comm) ? 1 : 0;
  return {comm.ports(), op ? op->commutative : true, op ? op->order_free : true, lanes_ == 1};
}

bool call_start::equal_parts_only(const std::vector<std::size_t>& counts, call_traits& t) {
  if (std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end()) return true;
  if (opts.alg == algorithm::multi_lane)
    return refuse("multi_lane takes equal parts only; these counts differ (the automatic choice runs another algorithm)");
  t.lanes = false;
  return true;
}

bool call_start::accepts(const call_traits& t) {
  auto why = refusal(coll, opts.alg, t);
  if (why.empty()) return true;
  early = detail::refuse(comm, std::move(why));
  return false;
}

std::optional<loggp_params> call_start::model() {
  std::string why;
  auto m = model_for(comm, opts, to_string(coll), why);
  if (!m) early = detail::refuse(comm, std::move(why));
  return m;
}

resolved call_start::resolve(const call_traits& t, const loggp_params& m, const call_shape& shape) {
  const auto r = detail::resolve(comm, coll, opts, t, m, shape);
  ran(r.row->info.alg, r.blocks);
  if (shape.bytes) sig.bytes = shape.bytes;
  return r;
}

void call_start::ran(algorithm alg, int blocks) noexcept {
  sig.alg = static_cast<std::uint8_t>(static_cast<int>(alg) + 1);
  sig.blocks = static_cast<std::uint32_t>(blocks);
}

resolved resolve_for(int p, int ports, const communicator_options& opts, collective coll, const collective_options& o,
                     const call_traits& t, const loggp_params& m, const call_shape& shape, const lane_shape* lanes,
                     double* predicted) {
  const std::size_t min_block_bytes = opts.min_block_bytes;
  const auto circ = [&](circulant_collective what) {
    return choose_circulant_blocks(what, p, shape.bytes, shape.largest, shape.smallest, m, min_block_bytes).blocks;
  };
  const auto blocks_of = [&](const entry& row) {
    if (row.blocks == block_rule::one) return 1;
    if (o.blocks) return o.blocks;
    switch (row.blocks) {
      case block_rule::kitem_linear: return automatic_block_count(shape.bytes, p, opts);
      case block_rule::circulant_reduce: return circ(circulant_collective::reduce);
      case block_rule::circulant_all_roots: return circ(circulant_collective::all_roots);
      case block_rule::circulant_allreduce: return circ(circulant_collective::allreduce);
      case block_rule::ring_reduce: return choose_ring_blocks(circulant_collective::reduce, p, shape.bytes, m, min_block_bytes).blocks;
      case block_rule::ring_allreduce: return choose_ring_blocks(circulant_collective::allreduce, p, shape.bytes, m, min_block_bytes).blocks;
      default: return 1;  // given_or_one; broadcast_model: plan_broadcast's candidates
    }
  };
  if (o.alg != algorithm::automatic) {
    const entry* row = find_entry(coll, o.alg);
    return {row, blocks_of(*row)};
  }
  // The candidates that fit the call, in the registry's order: the least prediction among
  // those the model predicts (ties to the earlier row), else the first.
  prediction_shape sh(p, ports);
  sh.largest = shape.largest;
  sh.smallest = shape.smallest;
  // Scatter and gather move every byte through the root's host however they go: their
  // one-lane trees are predicted as on a flat network, not with the host's ranks' sends
  // sharing a rail (each of its ranks sends or receives its own part once).
  const bool rooted_parts = coll == collective::scatter || coll == collective::gather;
  const entry* first = nullptr;
  const entry* best = nullptr;
  int best_n = 1;
  double best_t = INFINITY;
  for (const auto& e : entries()) {
    if (e.info.coll != coll || !e.info.automatic || !refusal(coll, e.info.alg, t).empty()) continue;
    if (e.info.needs.order_free && !t.order_free) continue;  // asked for by name only (algorithm.hpp)
    if (!first) first = &e;
    const int n = blocks_of(e);
    double time = INFINITY;
    if (e.predict_lanes && lanes) time = e.predict_lanes(coll, *lanes, shape, m, t);
    else if (e.predict) time = e.predict(sh, shape.bytes, n, lanes && !rooted_parts ? shared_rail(m, *lanes) : m);
    else continue;
    if (time < best_t || !best) {
      best = &e;
      best_n = n;
      best_t = time;
    }
  }
  if (predicted) *predicted = best ? best_t : INFINITY;
  if (best) return {best, best_n};
  return {first, blocks_of(*first)};
}

namespace {

// The step of OPTCAST_CHECK's message, beyond any schedule's.
constexpr std::uint32_t check_step = 0xfffffff0u;

// Ring neighbours compare signatures: if every rank's equals its predecessor's, all are
// equal; otherwise a rank next to the difference fails, and tells every other.
task<result<void>> compare_calls(communicator& comm, std::uint32_t seq, const call_signature& sig) {
  const int p = comm.size(), r = comm.rank();
  std::array<std::byte, call_signature::wire_bytes> mine{}, theirs{};
  sig.encode(mine.data());
  auto& f = comm.get_fabric();
  const int from = (r + p - 1) % p;
  if (auto x = co_await optcast::exchange(f, (r + 1) % p, std::span<const std::byte>(mine), from, std::span<std::byte>(theirs), tag{seq, check_step}); !x)
    co_return fail(x.error());
  if (theirs == mine) co_return result<void>{};
  const auto other = call_signature::decode(theirs.data());
  const std::string why = called_differently(seq, calls_of(from, other, r, sig) + " (found by OPTCAST_CHECK)");
  f.abort(make_error_code(errc::call_mismatch), why);
  co_return fail(errc::call_mismatch);
}

}  // namespace

namespace {

// The trace's slice for the call (0: not traced). Outside run_call(): a coroutine's frame
// keeps every temporary of its body for as long as the call waits.
std::uint32_t begin_trace(communicator& comm, collective coll, std::uint32_t seq, const call_signature& sig) {
  auto& f = comm.get_fabric();
  trace_log* trace = f.call_trace();
  if (!trace) return 0;
  const bool rooted = sig.root != 0xffffffffu;
  return trace->begin_call(f, {.coll = coll, .alg = sig.alg ? static_cast<algorithm>(sig.alg - 1) : algorithm::automatic,
                               .seq = seq, .bytes = sig.bytes, .root = rooted ? static_cast<int>(sig.root) : -1,
                               .blocks = static_cast<int>(sig.blocks), .ranks = comm.size(), .rank = comm.rank()});
}

// The call's leftovers checked, its trace slice closed, and finish() (the body's end).
result<void> end_call(communicator& comm, std::uint32_t seq, std::uint32_t traced, result<void> r) {
  auto& f = comm.get_fabric();
  if (r)
    if (auto ec = f.leftover(seq)) r = fail(ec);
  if (traced) f.call_trace()->end_call(f, traced, r ? 0 : r.error().value());
  return finish(comm, std::move(r));
}

// What the call's coroutine needs of a call once its checks, its choice and its body
// are done.
struct prepared_call {
  result<void> early;  // unless there is a body: the refusal, returned as it is
  collective coll{};
  std::uint32_t seq = 0;
  call_signature sig;
  std::chrono::milliseconds timeout{};
  std::optional<task<result<void>>> body;
};

prepared_call prepared(const call_start& call, std::optional<task<result<void>>> body) {
  return {call.early, call.coll, call.seq, call.sig, call.opts.timeout.value_or(call.comm.options().timeout), std::move(body)};
}

// A collective call's coroutine. `prepare` (a plain function, run when the task is first
// resumed: tasks stay lazy) makes the call_start, does the checks and the choice and
// makes the body; its temporaries stay on the stack. So an entry point whose checks fit
// in `prepare` need not be a coroutine itself (broadcast: one frame of 376 B fewer on
// each rank of a simulated world, and one resumption fewer per call).
template <class Prepare>
task<result<void>> run_call(communicator& comm, Prepare prepare) {
  auto&& call = prepare();  // call_start::run's lambda hands out its own: no second copy in the frame
  if (!call.body) co_return std::move(call.early);
  const std::uint32_t traced = begin_trace(comm, call.coll, call.seq, call.sig);
  deadline_scope deadline(comm.get_fabric(), call.seq, call.timeout);
  signature_scope signature(comm.get_fabric(), call.seq, call.sig);
  result<void> r;
  if (comm.options().check && comm.size() > 1) r = co_await compare_calls(comm, call.seq, call.sig);
  if (r) r = co_await std::move(*call.body);
  co_return end_call(comm, call.seq, traced, std::move(r));
}

}  // namespace

task<result<void>> call_start::run(task<result<void>> body) {
  return run_call(comm, [call = prepared(*this, std::move(body))]() mutable -> prepared_call& { return call; });
}

}  // namespace detail

namespace {

// plan_broadcast's checks and choice, without copying the cached choice: every rank of a
// world calls this with the same question (see broadcast_body).
struct broadcast_pick {
  std::shared_ptr<const broadcast_choice> all;  // the automatic choice and its candidates
  broadcast_choice::candidate chosen;
};

result<broadcast_pick> pick_broadcast(communicator& c, std::size_t bytes, const broadcast_options& opts, std::string* why) {
  std::string w;
  const auto refused = [&](std::string text) -> result<broadcast_pick> {
    if (why) *why = std::move(text);
    return fail(errc::invalid_argument);
  };
  if (opts.blocks < 0) return refused("broadcast: blocks must not be negative");
  const auto model = detail::model_for(c, opts, "broadcast", w);
  if (!model) return refused(w);
  const algorithm alg = opts.alg == algorithm::automatic ? c.options().broadcast_algorithm : opts.alg;
  if (c.ports() > c.get_fabric().ports())
    return refused("broadcast: the communicator asks for " + std::to_string(c.ports()) + " ports, the " +
                   std::string(c.get_fabric().name()) + " fabric has " + std::to_string(c.get_fabric().ports()));
  if (auto no = refusal(collective::broadcast, alg, {c.ports(), true, true, detail::has_lanes(c)}); !no.empty()) return refused(std::move(no));
  // optcast/choose.hpp: every candidate's LogGP prediction with its best block count.
  // On hosts of several ranks or rails, the one-lane algorithms share a rail per host, and
  // the multi-lane broadcast is a candidate too.
  const detail::lane_shape* lanes = detail::has_lanes(c) ? detail::lane_shape::cached(c.get_fabric().layout(), c.rank()) : nullptr;
  const loggp_params flat = lanes ? detail::shared_rail(*model, *lanes) : *model;
  broadcast_pick out{detail::choose_broadcast_shared(c.size(), bytes, flat, c.ports(), c.options().min_block_bytes, opts.blocks), {}};
  const broadcast_choice& ch = *out.all;
  out.chosen = {ch.alg, ch.blocks, ch.predicted};
  if (alg == algorithm::automatic) {
    if (lanes && !opts.blocks)
      if (const double t = detail::predict_multi_lane(collective::broadcast, *lanes, {bytes}, *model, {c.ports()}); t < ch.predicted)
        out.chosen = {algorithm::multi_lane, 1, t};
    return out;
  }
  // A fixed algorithm: its own best block count (or the caller's) by its row's rule.
  const auto& row = *detail::find_entry(collective::broadcast, alg);
  auto& pick = out.chosen;
  pick.alg = alg;
  pick.predicted = 0;
  if (row.blocks == detail::block_rule::one)
    pick.blocks = 1;
  else if (row.blocks == detail::block_rule::kitem_linear)
    pick.blocks = opts.blocks ? opts.blocks : automatic_block_count(bytes, c.size(), c.options());
  bool candidate = false;
  for (const auto& cand : ch.considered)
    if (cand.alg == alg) {
      pick.blocks = row.blocks == detail::block_rule::one ? 1 : cand.blocks, pick.predicted = cand.predicted;
      candidate = true;
    }
  if (!candidate && row.blocks == detail::block_rule::broadcast_model) {
    // Not a candidate of the automatic choice: its own best count by its prediction.
    pick = opts.blocks ? broadcast_choice::candidate{alg, opts.blocks, predict_broadcast(alg, c.size(), bytes, opts.blocks, *model, c.ports())}
                       : best_broadcast_blocks(alg, c.size(), bytes, *model, c.ports(), c.options().min_block_bytes);
  }
  return out;
}

}  // namespace

result<broadcast_choice> plan_broadcast(communicator& c, std::size_t bytes, const broadcast_options& opts, std::string* why) {
  auto p = pick_broadcast(c, bytes, opts, why);
  if (!p) return fail(p.error());
  broadcast_choice ch = *p->all;
  ch.alg = p->chosen.alg;
  ch.blocks = p->chosen.blocks;
  ch.predicted = p->chosen.predicted;
  return ch;
}

result<collective_plan> plan_collective(communicator& c, collective coll, const call_shape& shape,
                                        const collective_options& opts, std::string* why) {
  const auto refused = [&](std::string text) -> result<collective_plan> {
    if (why) *why = std::move(text);
    return fail(errc::invalid_argument);
  };
  if (coll == collective::broadcast) {
    auto b = plan_broadcast(c, shape.bytes, opts, why);
    if (!b) return fail(b.error());
    return collective_plan{b->alg, b->blocks};
  }
  if (opts.blocks < 0) return refused(std::string(to_string(coll)) + ": blocks must not be negative");
  const call_traits t{c.ports(), shape.commutative, shape.order_free, detail::has_lanes(c)};
  if (auto no = refusal(coll, opts.alg, t); !no.empty()) return refused(std::move(no));
  std::string w;
  const auto m = detail::model_for(c, opts, to_string(coll), w);
  if (!m) return refused(w);
  const auto r = detail::resolve(c, coll, opts, t, *m, shape);
  return collective_plan{r.row->info.alg, r.blocks};
}

namespace {

// The broadcast's checks and plan, in a plain function: a coroutine keeps every local
// and temporary in its frame for as long as the call waits (the plan's candidates, the
// strings of a refusal or a log line: about 450 B on each rank of a simulated world).
// Empty after a refusal, which call.early then holds.
std::optional<task<result<void>>> broadcast_body(detail::call_start& call, communicator& c, std::span<std::byte> data,
                                                 int root, const broadcast_options& opts) {
  if (!call.ok() || !call.check_root(root)) return std::nullopt;
  std::string why;
  const auto picked = pick_broadcast(c, data.size(), opts, &why);
  if (!picked) {
    call.early = detail::refuse(c, why);
    return std::nullopt;
  }
  const auto* chosen = &picked->chosen;
  const auto model = call.model();  // valid: pick_broadcast checked it
  if (log_enabled(log_level::debug) && c.rank() == root && opts.alg == algorithm::automatic &&
      c.options().broadcast_algorithm == algorithm::automatic)
    log(log_level::debug, "broadcast of " + std::to_string(data.size()) + " B on " + std::to_string(c.size()) +
                              " ranks: automatic chose " + picked->all->explain());
  const auto& row = *detail::find_entry(collective::broadcast, chosen->alg);
  call.ran(chosen->alg, chosen->blocks);
  call.sig.bytes = data.size();
  return row.runner_for<detail::broadcast_call>()({&c.get_fabric(), call.seq, data, root, chosen->blocks, c.ports(), *model});
}

}  // namespace

// Not a coroutine: run_call's task does it all when first awaited.
task<result<void>> broadcast(communicator& c, std::span<std::byte> data, int root, broadcast_options opts) {
  return detail::run_call(c, [&c, data, root, opts] {
    detail::call_start call(c, collective::broadcast, opts);
    auto body = broadcast_body(call, c, data, root, opts);
    return detail::prepared(call, std::move(body));
  });
}

namespace {

// Point-to-point messages take a seq of their own per user tag (seq_layout), so they
// never match a collective's.
task<result<void>> p2p(communicator& c, op_kind kind, int peer, std::uint32_t user_tag,
                       std::span<std::byte> data, std::optional<std::chrono::milliseconds> t) {
  if (user_tag > seq_layout::max_user_tag)
    co_return detail::refuse(c, std::string(kind == op_kind::send ? "send" : "recv") + ": tag " + std::to_string(user_tag) +
                                    " is above the largest, " + std::to_string(seq_layout::max_user_tag));
  if (c.broken()) co_return fail(errc::broken);
  auto& f = c.get_fabric();
  const tag tg{detail::comm_access::p2p_seq(c, user_tag), 0};
  detail::deadline_scope deadline(f, tg.seq, t.value_or(c.options().timeout));
  // No co_await inside ?: here or anywhere: GCC 12 has run both arms of one.
  result<std::size_t> r;
  if (kind == op_kind::send)
    r = co_await f.send(peer, tg, data);
  else
    r = co_await f.recv(peer, tg, data);
  if (!r) co_return detail::finish(c, fail(r.error()));
  co_return result<void>{};
}

}  // namespace

task<result<void>> send(communicator& c, int peer, std::uint32_t user_tag,
                        std::span<const std::byte> data,
                        std::optional<std::chrono::milliseconds> timeout) {
  return p2p(c, op_kind::send, peer, user_tag,
             {const_cast<std::byte*>(data.data()), data.size()}, timeout);
}

task<result<void>> recv(communicator& c, int peer, std::uint32_t user_tag,
                        std::span<std::byte> data,
                        std::optional<std::chrono::milliseconds> timeout) {
  return p2p(c, op_kind::recv, peer, user_tag, data, timeout);
}

task<result<int>> recv_any(communicator& c, std::uint32_t user_tag, std::span<std::byte> data,
                           std::optional<std::chrono::milliseconds> timeout) {
  auto& f = c.get_fabric();
  if (!f.receives_from_any())
    co_return fail(detail::refuse(c, "recv_any: the " + std::string(f.name()) + " fabric cannot receive from any peer").error());
  if (user_tag > seq_layout::max_user_tag)
    co_return fail(detail::refuse(c, "recv_any: tag " + std::to_string(user_tag) + " is above the largest, " +
                                         std::to_string(seq_layout::max_user_tag)).error());
  if (c.broken()) co_return fail(errc::broken);
  const tag tg{detail::comm_access::p2p_seq(c, user_tag), 0};
  detail::deadline_scope deadline(f, tg.seq, timeout.value_or(c.options().timeout));
  // Awaited through a span, in place: GCC 12 awaits a copy of an lvalue operation, whose
  // peer the fabric then sets.
  operation op = f.recv(any_peer, tg, data);
  if (auto r = co_await when_all(std::span<operation>(&op, 1)); !r) co_return fail(detail::finish(c, r).error());
  // The fabric names the sender by its rank in the job: this communicator's rank of it.
  for (int r = 0; r < c.size(); ++r)
    if (job_rank(c, r) == op.peer) co_return r;
  co_return fail(detail::finish(c, fail(errc::protocol_violation)).error());
}

}  // namespace optcast
