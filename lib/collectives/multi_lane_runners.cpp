#include "multi_lane_runners.hpp"

#include <algorithm>
#include <cstring>

#include "collective_common.hpp"
#include "optcast/choose.hpp"
#include "traff_hunold/multi_lane.hpp"

namespace optcast::detail {

namespace {

// The lane's collective is a call of its own on H ranks of one port, the operator's
// properties the call's, never multi-lane again (a lane has no topology).
resolved lane_choice(collective coll, int p, const loggp_params& m, const call_shape& shape,
                     const erased_reduction* op = nullptr) {
  const call_traits t{1, op ? op->commutative : true, op ? op->order_free : true, false};
  return resolve_for(p, 1, communicator_options{}, coll, {}, t, m, shape);
}

task<result<void>> lane_broadcast(fabric& lane, std::uint32_t seq, std::span<std::byte> buf, int root, loggp_params m) {
  const auto pick = choose_broadcast(lane.size(), buf.size(), m, 1, communicator_options{}.min_block_bytes);
  const auto* row = find_entry(collective::broadcast, pick.alg);
  co_return co_await row->runner_for<broadcast_call>()({&lane, seq, buf, root, pick.blocks, 1, m});
}

task<result<void>> lane_reduction(collective coll, fabric& lane, std::uint32_t seq, std::span<std::byte> work, int root,
                                  const erased_reduction* op, loggp_params m) {
  const auto [row, n] = lane_choice(coll, lane.size(), m, {work.size(), 0, 0, op->commutative, op->order_free}, op);
  co_return co_await row->runner_for<reduction_call>()({&lane, seq, work, root, n, op, m});
}

task<result<void>> lane_allgather(fabric& lane, std::uint32_t seq, std::span<std::byte> buf, std::vector<std::size_t> at,
                                  std::size_t each, loggp_params m) {
  const auto p = static_cast<std::size_t>(lane.size());
  const auto [row, n] = lane_choice(collective::allgather, lane.size(), m, {p * each, each, each});
  algorithms::segment_layout lay(1, n, std::vector<std::size_t>(p, each));
  lay.place(at);
  co_return co_await row->runner_for<segments_call>()({&lane, seq, buf, buf, &lay, nullptr, m});
}

// The lane's scatter or gather, chosen for its H ranks and pieces as a call of its own.
task<result<void>> lane_rooted(collective coll, fabric& lane, std::uint32_t seq, std::span<const std::byte> from,
                               std::span<std::byte> to, int root, std::size_t each, std::size_t elem, loggp_params m) {
  const auto H = static_cast<std::size_t>(lane.size());
  const auto [row, n] = lane_choice(coll, lane.size(), m, {H * each, each, each});
  co_return co_await row->runner_for<scatter_call>()({&lane, seq, from, to, root, segment_offsets{{}, each, H}, elem, m, false});
}

// The lane's reduce-scatter of H pieces in place, chosen as a call of its own.
task<result<void>> lane_reduce_scatter(fabric& lane, std::uint32_t seq, std::span<std::byte> buf, std::size_t each,
                                       const erased_reduction* op, loggp_params m) {
  const auto H = static_cast<std::size_t>(lane.size());
  const auto [row, n] = lane_choice(collective::reduce_scatter_block, lane.size(), m, {H * each, each, each, op->commutative, op->order_free}, op);
  const algorithms::segment_layout lay(op->elem, n, std::vector<std::size_t>(H, each / op->elem));
  co_return co_await row->runner_for<segments_call>()({&lane, seq, buf, buf, &lay, op, m});
}

result<lane_shape> shape_of(const fabric& f) {
  auto s = lane_shape::of(f.layout(), f.rank());
  if (!s) return fail(errc::invalid_argument);  // refusal() keeps such calls away
  return *s;
}

}  // namespace

task<result<void>> run_broadcast_multi_lane(broadcast_call c) {
  const auto s = shape_of(*c.f);
  if (!s) co_return fail(s.error());
  const loggp_params m = c.model;
  const std::uint32_t seq = c.seq;
  co_return co_await algorithms::broadcast_multi_lane(*c.f, c.seq, c.data, c.root, *s, [seq, m](fabric& lane, std::span<std::byte> buf, int root) {
    return lane_broadcast(lane, seq, buf, root, m);
  });
}

task<result<void>> run_reduce_multi_lane(reduction_call c) {
  const auto s = shape_of(*c.f);
  if (!s) co_return fail(s.error());
  const loggp_params m = c.model;
  const std::uint32_t seq = c.seq;
  const erased_reduction* op = c.op;
  co_return co_await algorithms::reduce_multi_lane(*c.f, c.seq, c.work, c.root, *c.op, *s, [seq, m, op](fabric& lane, std::span<std::byte> work, int root) {
    return lane_reduction(collective::reduce, lane, seq, work, root, op, m);
  });
}

task<result<void>> run_allreduce_multi_lane(reduction_call c) {
  const auto s = shape_of(*c.f);
  if (!s) co_return fail(s.error());
  if (!c.in.empty() && c.in.data() != c.work.data()) std::memmove(c.work.data(), c.in.data(), c.in.size());
  const loggp_params m = c.model;
  const std::uint32_t seq = c.seq;
  const erased_reduction* op = c.op;
  co_return co_await algorithms::allreduce_multi_lane(*c.f, c.seq, c.work, *c.op, *s, [seq, m, op](fabric& lane, std::span<std::byte> work) {
    return lane_reduction(collective::allreduce, lane, seq, work, 0, op, m);
  });
}

task<result<void>> run_allgather_multi_lane(segments_call c) {
  const auto s = shape_of(*c.f);
  if (!s) co_return fail(s.error());
  const std::size_t each = (c.lay->offset.size() > 1 ? c.lay->offset[1] - c.lay->offset[0] : 0) * c.lay->elem;
  const loggp_params m = c.model;
  const std::uint32_t seq = c.seq;
  co_return co_await algorithms::allgather_multi_lane(
      *c.f, c.seq, c.out, each, *s, [seq, m](fabric& lane, std::span<std::byte> buf, std::vector<std::size_t> at, std::size_t e) {
        return lane_allgather(lane, seq, buf, std::move(at), e, m);
      });
}

task<result<void>> run_reduce_scatter_multi_lane(segments_call c) {
  const auto s = shape_of(*c.f);
  if (!s) co_return fail(s.error());
  // Equal parts only: the entry point keeps irregular counts away (equal_parts_only).
  if (!c.lay->equal_in_order()) co_return fail(errc::invalid_argument);
  const std::size_t each = (c.lay->offset.size() > 1 ? c.lay->offset[1] - c.lay->offset[0] : 0) * c.lay->elem;
  const loggp_params m = c.model;
  const std::uint32_t seq = c.seq;
  const erased_reduction* op = c.op;
  co_return co_await algorithms::reduce_scatter_multi_lane(*c.f, c.seq, c.out, each, *c.op, *s, [seq, m, op](fabric& lane, std::span<std::byte> buf, std::size_t e) {
    return lane_reduce_scatter(lane, seq, buf, e, op, m);
  });
}

template <bool Gather>
task<result<void>> run_rooted_multi_lane(scatter_call c) {
  const auto s = shape_of(*c.f);
  if (!s) co_return fail(s.error());
  // Equal parts only: the entry point keeps scatterv and gatherv away (rooted_lanes_refusal).
  if (!c.offset.table.empty()) co_return fail(errc::invalid_argument);
  const loggp_params m = c.model;
  const std::uint32_t seq = c.seq;
  const std::size_t elem = c.elem;
  const auto inner = [seq, m, elem](fabric& lane, std::span<const std::byte> from, std::span<std::byte> to, int root, std::size_t each) {
    return lane_rooted(Gather ? collective::gather : collective::scatter, lane, seq, from, to, root, each, elem, m);
  };
  if (Gather) co_return co_await algorithms::gather_multi_lane(*c.f, c.seq, c.from, c.to, c.root, c.offset.each, c.elem, *s, inner);
  co_return co_await algorithms::scatter_multi_lane(*c.f, c.seq, c.from, c.to, c.root, c.offset.each, c.elem, *s, inner);
}
template task<result<void>> run_rooted_multi_lane<false>(scatter_call);
template task<result<void>> run_rooted_multi_lane<true>(scatter_call);

loggp_params shared_rail(const loggp_params& m, const lane_shape& s) {
  loggp_params out = m;
  out.G *= s.per_host;
  return out;
}

namespace {

// A node-local phase: every rank sends a block of `bytes` to each of n - 1 others (one
// after another from its CPU) and receives theirs, over the host link. It is a round with
// every rank at once, so it takes at least the calibrated round: where ranks outnumber
// the cores, each waits for the others' turns on them whatever the link's latency (4
// emulated hosts x 4 ranks on 2 cores: the host link's LogGP said under a microsecond,
// the phase took a round of ~100 us, and multi_lane was taken for 8-byte calls that
// recursive doubling ran in 0.7 times its time).
double local_exchange(int n, double bytes, const loggp_params& h) {
  if (n <= 1) return 0;
  return std::max(h.round, (n - 1) * std::max(h.g, h.o + std::max(bytes - 1, 0.0) * h.G) + h.L + h.o);
}

}  // namespace

double predict_multi_lane(collective coll, const lane_shape& s, const call_shape& shape, const loggp_params& m,
                          const call_traits& t) {
  const int lanes = s.lanes();
  loggp_params lane = m;
  lane.G *= std::max(1.0, static_cast<double>(lanes) / s.rails);
  // A rank's sub-lanes run at once on its one CPU: each message's overhead is paid once
  // per sub-lane (small messages gain nothing from being split).
  lane.o *= s.sub;
  lane.g *= s.sub;
  // The node-local phases: a rank's block (its sub-lanes' pieces) to or from each other
  // rank of the host, twice (broadcast, reduce, allreduce); allgather: each host's segment
  // in a round of its own.
  const loggp_params host = m.within_host();
  const double block = static_cast<double>(shape.bytes) / lanes * s.sub;
  const double local = coll == collective::allgather
                           ? s.hosts * local_exchange(s.per_host, static_cast<double>(shape.largest), host)
                           : 2 * local_exchange(s.per_host, block, host);
  const call_traits inner{1, t.commutative, t.order_free, false};
  if (coll == collective::scatter || coll == collective::gather) {
    // The root hands each rank of its host its lane's H blocks; each lane's root sends
    // H - 1 pieces on its share of the rails (the split trees do no worse than that).
    const double each = static_cast<double>(shape.largest), piece = each / s.sub;
    const double root_local = s.per_host > 1 ? (s.per_host - 1) * (host.o + s.hosts * each * host.G) + host.L + host.o : 0;
    const auto one_lane = [&](const loggp_params& l) {
      return (s.hosts - 1) * std::max(l.g, l.o + std::max(piece - 1, 0.0) * l.G) + l.L + l.o;
    };
    // Direct pieces pass through the root's host while the lanes carry them: the two
    // overlap; packs go first.
    const auto with_root = [&](double carried) {
      return piece >= static_cast<double>(algorithms::direct_piece_bytes) ? std::max(root_local, carried) : root_local + carried;
    };
    // Gather's lanes that share a rail take turns (gather_multi_lane), each with the rail
    // to itself, a turn passed on by a message between hosts.
    if (coll == collective::gather && s.sub == 1 && s.per_host > s.rails) {
      const int turns = (s.per_host + s.rails - 1) / s.rails;
      loggp_params alone = lane;
      alone.G = m.G;
      return with_root(turns * one_lane(alone) + (turns - 1) * (m.L + 2 * m.o));
    }
    return with_root(one_lane(lane));
  }
  if (coll == collective::broadcast) {
    const auto b = shape.bytes / static_cast<std::size_t>(lanes);
    return local + choose_broadcast(s.hosts, b, lane, 1, communicator_options{}.min_block_bytes).predicted;
  }
  if (coll == collective::reduce_scatter || coll == collective::reduce_scatter_block) {
    // Each rank gets its lane's H blocks from every other rank of its host and combines
    // them; each sub-lane reduce-scatters H pieces between the hosts.
    const double each = static_cast<double>(shape.largest), piece = each / s.sub;
    const auto p = static_cast<std::size_t>(piece);
    double predicted = INFINITY;
    resolve_for(s.hosts, 1, communicator_options{}, collective::reduce_scatter_block, {}, inner, lane,
                {p * static_cast<std::size_t>(s.hosts), p, p, t.commutative, t.order_free}, nullptr, &predicted);
    return local_exchange(s.per_host, s.hosts * each, host) + m.gamma * s.hosts * each * (s.per_host - 1) + predicted;
  }
  call_shape per_lane = shape;
  if (coll == collective::allgather) {  // each lane: H segments of one sub-lane's piece of a segment
    const std::size_t each = shape.largest / static_cast<std::size_t>(s.sub);
    per_lane = {each * static_cast<std::size_t>(s.hosts), each, each, t.commutative, t.order_free};
  } else {
    per_lane.bytes = shape.bytes / static_cast<std::size_t>(lanes);
  }
  double predicted = INFINITY;
  resolve_for(s.hosts, 1, communicator_options{}, coll, {}, inner, lane, per_lane, nullptr, &predicted);
  const double combine = coll == collective::allgather ? 0 : m.gamma * static_cast<double>(shape.bytes) * (s.per_host - 1) / s.per_host;
  return local + combine + predicted;
}

}  // namespace optcast::detail
