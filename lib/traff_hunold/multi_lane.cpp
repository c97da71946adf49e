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
task<result<void>> local_allgather(fabric& f, std::uint32_t seq, const lane_shape& s, std::span<std::byte> buf,
                                   const pieces& part, int skip) {
  if (s.per_host == 1) co_return result<void>{};
  lane_view local(f, s.host_group, 0, last_local);
  std::vector<operation> ops;
  ops.reserve(2 * static_cast<std::size_t>(s.per_host));
  for (int l = 0; l < s.per_host; ++l) {
    if (l == s.local) continue;
    if (l != skip) ops.push_back(local.send(l, {seq, 0}, part.of(buf, s.local * s.sub, s.sub)));
    if (s.local != skip) ops.push_back(local.recv(l, {seq, 0}, part.of(buf, l * s.sub, s.sub)));
  }
  co_return co_await all_of(ops);
}

// Rank l of the host ends with block l of the host's sum, in `work`: it receives every
// other rank's block l and combines them in local-rank order.
task<result<void>> local_reduce_scatter(fabric& f, std::uint32_t seq, const lane_shape& s, std::span<std::byte> work,
                                        const pieces& part, const detail::erased_reduction& op) {
  if (s.per_host == 1) co_return result<void>{};
  lane_view local(f, s.host_group, 0, first_local);
  const auto mine = part.of(work, s.local * s.sub, s.sub);
  const auto lease = f.scratch().take(mine.size() * static_cast<std::size_t>(s.per_host));
  const auto from = [&](int l) { return lease.span().subspan(mine.size() * static_cast<std::size_t>(l), mine.size()); };
  std::vector<operation> ops;
  ops.reserve(2 * static_cast<std::size_t>(s.per_host));
  for (int l = 0; l < s.per_host; ++l) {
    if (l == s.local) continue;
    ops.push_back(local.send(l, {seq, 0}, part.of(work, l * s.sub, s.sub)));
    ops.push_back(local.recv(l, {seq, 0}, from(l)));
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
task<result<void>> root_blocks(fabric& f, std::uint32_t seq, const lane_shape& s, std::span<std::byte> buf,
                               const pieces& part, int root, int root_local, bool scatter, int region) {
  lane_view local(f, s.host_group, 0, region);
  std::vector<operation> ops;
  if (f.rank() == root) {
    for (int l = 0; l < s.per_host; ++l)
      if (l != root_local) {
        const auto block = part.of(buf, l * s.sub, s.sub);
        ops.push_back(scatter ? local.send(l, {seq, 0}, block) : local.recv(l, {seq, 0}, block));
      }
  } else {
    const auto mine = part.of(buf, s.local * s.sub, s.sub);
    ops.push_back(scatter ? local.recv(root_local, {seq, 0}, mine) : local.send(root_local, {seq, 0}, mine));
  }
  co_return co_await all_of(ops);
}

}  // namespace

task<result<void>> broadcast_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                        const lane_shape& s, lane_broadcast inner) {
  const pieces part(buf.size(), 1, s.lanes());
  const int root_host = s.host_of[static_cast<std::size_t>(root)], root_local = s.local_of[static_cast<std::size_t>(root)];
  if (s.host == root_host && s.per_host > 1)
    if (auto r = co_await root_blocks(f, seq, s, buf, part, root, root_local, true, first_local); !r) co_return r;
  if (s.hosts > 1)
    if (auto r = co_await on_every_lane(f, s, [&](fabric& lane, int j) { return inner(lane, part.of(buf, s.local * s.sub + j), root_host); }); !r)
      co_return r;
  // The root has everything: nobody sends it anything.
  co_return co_await local_allgather(f, seq, s, buf, part, s.host == root_host ? root_local : -1);
}

task<result<void>> reduce_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> work, int root,
                                     const detail::erased_reduction& op, const lane_shape& s, lane_reduce inner) {
  const pieces part(work.size(), op.elem, s.lanes());
  const int root_host = s.host_of[static_cast<std::size_t>(root)], root_local = s.local_of[static_cast<std::size_t>(root)];
  if (auto r = co_await local_reduce_scatter(f, seq, s, work, part, op); !r) co_return r;
  if (s.hosts > 1)
    if (auto r = co_await on_every_lane(f, s, [&](fabric& lane, int j) { return inner(lane, part.of(work, s.local * s.sub + j), root_host); }); !r)
      co_return r;
  if (s.host != root_host || s.per_host == 1) co_return result<void>{};
  co_return co_await root_blocks(f, seq, s, work, part, root, root_local, false, last_local);
}

task<result<void>> allreduce_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> work,
                                        const detail::erased_reduction& op, const lane_shape& s, lane_allreduce inner) {
  const pieces part(work.size(), op.elem, s.lanes());
  if (auto r = co_await local_reduce_scatter(f, seq, s, work, part, op); !r) co_return r;
  if (s.hosts > 1)
    if (auto r = co_await on_every_lane(f, s, [&](fabric& lane, int j) { return inner(lane, part.of(work, s.local * s.sub + j)); }); !r)
      co_return r;
  co_return co_await local_allgather(f, seq, s, work, part, -1);
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
