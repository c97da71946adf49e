// Träff and Hunold's multi-lane decomposition (lanes.hpp), for the collectives whose data
// divides into one block per rank of a host: broadcast, reduce, allreduce, allgather.
// The node-local phases send every block straight to the rank that needs it (n - 1
// messages each way, through memory); the lanes' phase is the inter-node collective the
// caller gives, on every sub-lane at once.
#include "multi_lane.hpp"

#include <cstring>

#include "lane_phases.hpp"

namespace optcast::algorithms {

using namespace lane_phases;

namespace {

// Each rank of the host sends its block to every other (but to `skip`, a local index, or
// -1), and receives theirs (unless it is `skip`).
task<result<void>> local_allgather(fabric& f, tag t, const lane_shape& s, std::span<std::byte> buf, const pieces& part,
                                   int skip) {
  if (s.per_host == 1) co_return result<void>{};
  lane_view local(f, s.host_group, 0, last_local);
  std::vector<operation> ops;
  ops.reserve(2 * static_cast<std::size_t>(s.per_host));
  for (int l = 0; l < s.per_host; ++l) {
    if (l == s.local) continue;
    if (l != skip) ops.push_back(local.send(l, t, part.of(buf, s.local * s.sub, s.sub)));
    if (s.local != skip) ops.push_back(local.recv(l, t, part.of(buf, l * s.sub, s.sub)));
  }
  co_return co_await all_of(ops);
}

// Rank l of the host ends with block l of the host's sum, in `work`: it receives every
// other rank's block l and combines them in local-rank order.
task<result<void>> local_reduce_scatter(fabric& f, tag t, const lane_shape& s, std::span<std::byte> work, const pieces& part,
                                        const erased_reduction& op) {
  if (s.per_host == 1) co_return result<void>{};
  lane_view local(f, s.host_group, 0, first_local);
  const auto mine = part.of(work, s.local * s.sub, s.sub);
  const auto lease = f.scratch().take(mine.size() * static_cast<std::size_t>(s.per_host));
  const auto from = [&](int l) { return lease.span().subspan(mine.size() * static_cast<std::size_t>(l), mine.size()); };
  std::vector<operation> ops;
  ops.reserve(2 * static_cast<std::size_t>(s.per_host));
  for (int l = 0; l < s.per_host; ++l) {
    if (l == s.local) continue;
    ops.push_back(local.send(l, t, part.of(work, l * s.sub, s.sub)));
    ops.push_back(local.recv(l, t, from(l)));
  }
  if (auto r = co_await all_of(ops); !r) co_return r;
  if (!f.carries_data()) co_return result<void>{};
  // in_0 (+) in_1 (+) ...: the same order on every host's rank l.
  const std::size_t count = mine.size() / op.elem;
  std::memcpy(from(s.local).data(), mine.data(), mine.size());
  std::memcpy(mine.data(), from(0).data(), mine.size());
  for (int l = 1; l < s.per_host; ++l) op(mine.data(), from(l).data(), mine.data(), count);
  co_return result<void>{};
}

// On the root's host: the root hands each rank its block (`scatter`) or takes each rank's
// (gather), in `region`.
task<result<void>> root_blocks(fabric& f, tag t, const lane_shape& s, std::span<std::byte> buf, const pieces& part, int root,
                               int root_local, bool scatter, int region) {
  lane_view local(f, s.host_group, 0, region);
  std::vector<operation> ops;
  if (f.rank() == root) {
    for (int l = 0; l < s.per_host; ++l)
      if (l != root_local) {
        const auto block = part.of(buf, l * s.sub, s.sub);
        ops.push_back(scatter ? local.send(l, t, block) : local.recv(l, t, block));
      }
  } else {
    const auto mine = part.of(buf, s.local * s.sub, s.sub);
    ops.push_back(scatter ? local.recv(root_local, t, mine) : local.send(root_local, t, mine));
  }
  co_return co_await all_of(ops);
}

// A collective of three phases (node-local, the lanes', node-local) over the data in
// chunks: in step t, chunk t's first phase, chunk t - 1's lanes and chunk t - 2's last
// phase at once, so that the rails carry one chunk while the host's ranks exchange the
// others through memory. In one piece, the rails stood idle during both node-local
// phases: a 16 MiB allreduce on 4 x 4 x 1 emulated hosts took 289 ms in one piece and
// 247 ms in 8 chunks (bound 211). Only the allreduce is chunked: the lanes' broadcast and
// reduce trees pay their fill and drain once per chunk (in the simulator, with a host
// link 80 times the rails', 8 chunks cost a 16 MiB reduce on 4 x 2 x 2 12% and a
// broadcast 3%, the allreduce 0.2%). `stage(k, c)`: phase k of chunk c.
struct chunked {
  std::vector<std::span<std::byte>> chunk;
  std::vector<pieces> part;  // each chunk's lane pieces
  chunked(std::span<std::byte> buf, std::size_t elem, const lane_shape& s, bool overlap) {
    // Chunks whose lane pieces stay large enough that a message's overhead is small; none
    // where no host has several ranks (no node-local phase to overlap). A view's tag
    // region is 8 bits: every chunk's sub-lanes need one of their own.
    constexpr std::size_t least = std::size_t{256} << 10;
    const std::size_t most = std::min<std::size_t>(8, std::size_t{240} / static_cast<std::size_t>(s.sub));
    const std::size_t n = !overlap || s.per_host == 1
                              ? 1
                              : std::clamp<std::size_t>(buf.size() / (least * static_cast<std::size_t>(s.lanes())), 1, most);
    const pieces whole(buf.size(), elem, static_cast<int>(n));
    for (int c = 0; c < static_cast<int>(n); ++c) {
      chunk.push_back(whole.of(buf, c));
      part.emplace_back(chunk.back().size(), elem, s.lanes());
    }
  }
  int size() const noexcept { return static_cast<int>(chunk.size()); }
};

// Chunk c as a phase sees it: its bytes, its lane pieces, its node-local tag.
struct chunk_at {
  std::span<std::byte> data;
  const pieces* part;
  tag t;
  int c;
};

template <class Stage>
task<result<void>> pipeline(const chunked& ch, std::uint32_t seq, Stage stage) {
  for (int t = 0; t < ch.size() + 2; ++t) {
    std::vector<task<result<void>>> tasks;
    for (int k = 0; k < 3; ++k)
      if (const int c = t - k; c >= 0 && c < ch.size()) {
        const auto i = static_cast<std::size_t>(c);
        tasks.push_back(stage(k, chunk_at{ch.chunk[i], &ch.part[i], {seq, static_cast<std::uint32_t>(c)}, c}));
      }
    for (auto& r : co_await when_all_tasks(std::move(tasks)))
      if (!r) co_return r;
  }
  co_return result<void>{};
}

inline task<result<void>> nothing() { co_return result<void>{}; }

// The lanes' phase of a chunk: `run(lane, this rank's sub-lane piece)` on every sub-lane,
// in the chunk's own tag regions.
template <class Run>
task<result<void>> lanes_phase(fabric& f, const lane_shape& s, chunk_at at, Run run) {
  if (s.hosts == 1) return nothing();
  return on_every_lane(
      f, s, [&s, at, run](fabric& lane, int j) { return run(lane, at.part->of(at.data, s.local * s.sub + j)); }, lanes_region + at.c * s.sub);
}

}  // namespace

task<result<void>> broadcast_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                        const lane_shape& s, lane_broadcast inner) {
  const chunked ch(buf, 1, s, false);
  const int root_host = s.host_of[static_cast<std::size_t>(root)], root_local = s.local_of[static_cast<std::size_t>(root)];
  co_return co_await pipeline(ch, seq, [&](int k, chunk_at at) -> task<result<void>> {
    if (k == 0)
      return s.host == root_host && s.per_host > 1 ? root_blocks(f, at.t, s, at.data, *at.part, root, root_local, true, first_local)
                                                   : nothing();
    if (k == 1) return lanes_phase(f, s, at, [&inner, root_host](fabric& lane, std::span<std::byte> b) { return inner(lane, b, root_host); });
    // The root has everything: nobody sends it anything.
    return local_allgather(f, at.t, s, at.data, *at.part, s.host == root_host ? root_local : -1);
  });
}

task<result<void>> reduce_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> work, int root,
                                     const erased_reduction& op, const lane_shape& s, lane_reduce inner) {
  const chunked ch(work, op.elem, s, false);
  const int root_host = s.host_of[static_cast<std::size_t>(root)], root_local = s.local_of[static_cast<std::size_t>(root)];
  co_return co_await pipeline(ch, seq, [&](int k, chunk_at at) -> task<result<void>> {
    if (k == 0) return local_reduce_scatter(f, at.t, s, at.data, *at.part, op);
    if (k == 1) return lanes_phase(f, s, at, [&inner, root_host](fabric& lane, std::span<std::byte> b) { return inner(lane, b, root_host); });
    return s.host == root_host && s.per_host > 1 ? root_blocks(f, at.t, s, at.data, *at.part, root, root_local, false, last_local)
                                                 : nothing();
  });
}

task<result<void>> allreduce_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                        const erased_reduction& op, const lane_shape& s, lane_allreduce inner) {
  const chunked ch(work, op.elem, s, true);
  co_return co_await pipeline(ch, seq, [&](int k, chunk_at at) -> task<result<void>> {
    if (k == 0) return local_reduce_scatter(f, at.t, s, at.data, *at.part, op);
    if (k == 1) return lanes_phase(f, s, at, [&inner](fabric& lane, std::span<std::byte> b) { return inner(lane, b); });
    return local_allgather(f, at.t, s, at.data, *at.part, -1);
  });
}

task<result<void>> allgather_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> buf, std::size_t each,
                                        const lane_shape& s, lane_allgather inner) {
  // Everything in place: a lane's segments lie strided in `buf` (rank r's at r * each),
  // and the lane's collective works on them where they are.
  const pieces seg(each, 1, s.sub);  // a segment's sub-lane pieces
  const auto H = static_cast<std::size_t>(s.hosts);
  const auto segment = [&](int l, std::size_t h) {
    return buf.subspan(static_cast<std::size_t>(s.rank_at(static_cast<int>(h), l)) * each, each);
  };
  if (s.hosts > 1)
    if (auto r = co_await on_every_lane(f, s, [&](fabric& lane, int j) {
          std::vector<std::size_t> at(H);
          for (std::size_t h = 0; h < H; ++h) at[h] = static_cast<std::size_t>(seg.of(segment(s.local, h), j).data() - buf.data());
          return inner(lane, buf, std::move(at), seg.part.size(static_cast<std::size_t>(j)));
        });
        !r)
      co_return r;
  if (s.per_host == 1) co_return result<void>{};
  // Every rank of the host sends the others its lane's segments where they lie: host h's
  // in round h, so that a rank has one message in flight per local peer.
  lane_view local(f, s.host_group, 0, last_local);
  std::vector<operation> ops;
  for (std::size_t h = 0; h < H; ++h) {
    ops.clear();
    ops.reserve(2 * static_cast<std::size_t>(s.per_host));
    for (int l = 0; l < s.per_host; ++l) {
      if (l == s.local) continue;
      ops.push_back(local.send(l, {seq, static_cast<std::uint32_t>(h)}, segment(s.local, h)));
      ops.push_back(local.recv(l, {seq, static_cast<std::uint32_t>(h)}, segment(l, h)));
    }
    if (auto r = co_await all_of(ops); !r) co_return r;
  }
  co_return result<void>{};
}

}  // namespace optcast::algorithms
