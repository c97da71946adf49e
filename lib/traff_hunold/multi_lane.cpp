// Träff and Hunold's multi-lane decomposition (lanes.hpp), for the collectives whose data
// divides into one block per rank of a host: broadcast, reduce, allreduce, allgather.
// The node-local phases send every block straight to the rank that needs it (n - 1
// messages each way, through memory); the lanes' phase is the inter-node collective the
// caller gives, on every sub-lane at once.
#include "multi_lane.hpp"

#include <cstring>
#include <deque>

#include "../blocks.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

namespace {

using detail::lane_shape;
using detail::lane_view;

constexpr int first_local = 1, last_local = 2, turn_region = 3, lanes_region = 16;

// `bytes` in `count` pieces of whole elements; pieces [first, first + k) as one span.
struct pieces {
  block_partition part;
  std::size_t elem;
  pieces(std::size_t bytes, std::size_t element, int count)
      : part(bytes / element, static_cast<std::size_t>(count)), elem(element) {}
  std::span<std::byte> of(std::span<std::byte> buf, int first, int k = 1) const noexcept {
    const std::size_t a = part.offset(static_cast<std::size_t>(first)) * elem;
    const std::size_t b = part.offset(static_cast<std::size_t>(first + k)) * elem;
    return buf.subspan(a, b - a);
  }
};

task<result<void>> all_of(std::vector<operation>& ops) {
  if (ops.empty()) co_return result<void>{};
  co_return co_await when_all(std::span<operation>(ops));
}

// The sub-lanes' collectives at once: `run(view, j)` on lane (local * sub + j).
template <class Run>
task<result<void>> on_every_lane(fabric& f, const lane_shape& s, Run run) {
  std::deque<lane_view> views;
  std::vector<task<result<void>>> tasks;
  for (int j = 0; j < s.sub; ++j) {
    views.emplace_back(f, s.lane_group, s.local * s.sub + j, lanes_region + j);
    tasks.push_back(run(views.back(), j));
  }
  for (auto& r : co_await when_all_tasks(std::move(tasks)))
    if (!r) co_return r;
  co_return result<void>{};
}

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

// Scatter's and gather's blocks as lanes carry them: lane (local l) packs, for each of its
// sub-lanes j, piece j of the block of its member on every host in the lane's virtual
// order (root host first), so that each sub-lane's H pieces lie together.
struct lane_packs {
  const lane_shape& s;
  pieces piece;  // a block's sub-lane pieces
  std::size_t each;
  int root, root_host;
  lane_packs(const lane_shape& sh, std::size_t each_, std::size_t elem, int root_)
      : s(sh), piece(each_, elem, sh.sub), each(each_), root(root_), root_host(sh.host_of[static_cast<std::size_t>(root_)]) {}
  std::size_t bytes() const noexcept { return each * static_cast<std::size_t>(s.hosts); }
  // Sub-lane j's pieces within a pack.
  std::size_t part_at(int j) const noexcept {
    return static_cast<std::size_t>(s.hosts) * piece.part.offset(static_cast<std::size_t>(j)) * piece.elem;
  }
  std::span<std::byte> part(std::span<std::byte> pack, int j) const noexcept {
    return pack.subspan(part_at(j), static_cast<std::size_t>(s.hosts) * piece.part.size(static_cast<std::size_t>(j)) * piece.elem);
  }
  // fn(piece of the block in the root's virtual-order `buf`, its offset in lane l's pack,
  // the block's host in the lane's virtual order, the sub-lane) for every nonempty piece
  // of lane l's blocks.
  template <class Fn>
  void each_piece(std::span<std::byte> buf, int l, Fn fn) const {
    const int p = static_cast<int>(s.host_of.size());
    for (int r = 0; r < p; ++r) {
      if (s.local_of[static_cast<std::size_t>(r)] != l) continue;
      const int v = (s.host_of[static_cast<std::size_t>(r)] - root_host + s.hosts) % s.hosts;
      const auto block = buf.subspan(static_cast<std::size_t>((r - root + p) % p) * each, each);
      for (int j = 0; j < s.sub; ++j) {
        const auto src = piece.of(block, j);
        const std::size_t at = part_at(j) + static_cast<std::size_t>(v) * src.size();
        if (!src.empty()) fn(src, at, v, j);
      }
    }
  }
  // Between the root's virtual-order buffer and lane l's pack (to_pack: buffer -> pack).
  void copy(std::span<std::byte> buf, std::span<std::byte> pack, int l, bool to_pack) const {
    each_piece(buf, l, [&](std::span<std::byte> src, std::size_t at, int, int) {
      if (to_pack) std::memcpy(pack.data() + at, src.data(), src.size());
      else std::memcpy(src.data(), pack.data() + at, src.size());
    });
  }
  // Pieces this large go straight between the root's buffer and where they are needed,
  // one message each, instead of through packs: copying a root's 128 MiB into packs cost
  // 4-7% of a 16 MiB scatter on 1 Gbit/s rails, while a message per piece costs one
  // overhead per 64 KiB or more.
  bool direct() const noexcept { return piece.part.size(static_cast<std::size_t>(s.sub - 1)) * piece.elem >= (std::size_t{64} << 10); }
  // A message's step for piece (v, j) between the root and another rank of its host.
  std::uint32_t step(int v, int j) const noexcept { return static_cast<std::uint32_t>(v * s.sub + j); }
};

// The root's lane when pieces go direct (Alexandrov et al.'s Simple Long-Message on the
// lane): its member on the root's host sends (scatter) or receives (gather) every other
// host's piece j straight from or into the root's buffer `all`; the others receive into
// or send from their own part `mine`.
task<result<void>> lane_direct(fabric& lane, std::uint32_t seq, const lane_packs& packs, std::span<std::byte> all,
                               std::span<std::byte> mine, int j, bool gather) {
  std::vector<operation> ops;
  if (lane.rank() != packs.root_host) {
    const auto at = packs.piece.of(mine, j);
    if (at.empty()) co_return result<void>{};
    ops.push_back(gather ? lane.send(packs.root_host, {seq, 0}, at) : lane.recv(packs.root_host, {seq, 0}, at));
    co_return co_await all_of(ops);
  }
  const int root_local = packs.s.local_of[static_cast<std::size_t>(packs.root)];
  packs.each_piece(all, root_local, [&](std::span<std::byte> piece, std::size_t, int v, int jj) {
    if (jj != j) return;
    if (v == 0) {  // the root's own part
      const auto own = packs.piece.of(mine, j);
      if (gather) std::memcpy(piece.data(), own.data(), own.size());
      else std::memcpy(own.data(), piece.data(), own.size());
      return;
    }
    const int host = (packs.root_host + v) % packs.s.hosts;
    ops.push_back(gather ? lane.recv(host, {seq, 0}, piece) : lane.send(host, {seq, 0}, piece));
  });
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

task<result<void>> scatter_multi_lane(fabric& f, std::uint32_t seq, std::span<const std::byte> from, std::span<std::byte> to,
                                      int root, std::size_t each, std::size_t elem, const lane_shape& s, lane_scatter inner) {
  const lane_packs packs(s, each, elem, root);
  const int root_local = s.local_of[static_cast<std::size_t>(root)];
  const bool direct = packs.direct();
  const auto all = std::span(const_cast<std::byte*>(from.data()), from.size());
  scratch_pool::lease mine;
  if (s.host == packs.root_host) {
    if (!direct || s.local != root_local) mine = f.scratch().take(packs.bytes());  // the root's lane needs no pack then
    lane_view local(f, s.host_group, 0, first_local);
    std::vector<operation> ops;
    std::vector<scratch_pool::lease> theirs;
    if (f.rank() == root) {
      // Every other rank's lane: its pieces one by one (direct), or its pack in one message.
      theirs.reserve(static_cast<std::size_t>(s.per_host));
      for (int l = 0; l < s.per_host; ++l) {
        if (direct) {
          if (l != root_local)
            packs.each_piece(all, l, [&](std::span<std::byte> piece, std::size_t, int v, int j) {
              ops.push_back(local.send(l, {seq, packs.step(v, j)}, piece));
            });
          continue;
        }
        auto pack = l == root_local ? mine.span() : (theirs.push_back(f.scratch().take(packs.bytes())), theirs.back().span());
        packs.copy(all, pack, l, true);
        if (l != root_local) ops.push_back(local.send(l, {seq, 0}, pack));
      }
    } else if (direct) {
      // The pieces land where the pack has them.
      for (int j = 0; j < s.sub; ++j) {
        const std::size_t size = packs.piece.part.size(static_cast<std::size_t>(j)) * elem;
        if (!size) continue;
        for (int v = 0; v < s.hosts; ++v)
          ops.push_back(local.recv(root_local, {seq, packs.step(v, j)}, packs.part(mine.span(), j).subspan(static_cast<std::size_t>(v) * size, size)));
      }
    } else {
      ops.push_back(local.recv(root_local, {seq, 0}, mine.span()));
    }
    if (auto r = co_await all_of(ops); !r) co_return r;
  }
  co_return co_await on_every_lane(f, s, [&](fabric& lane, int j) {
    if (direct && s.local == root_local) return lane_direct(lane, seq, packs, all, to, j, false);
    const auto at = packs.piece.of(to, j);
    return inner(lane, mine.size() ? packs.part(mine.span(), j) : std::span<std::byte>{}, at, packs.root_host, at.size());
  });
}

task<result<void>> gather_multi_lane(fabric& f, std::uint32_t seq, std::span<const std::byte> from, std::span<std::byte> to,
                                     int root, std::size_t each, std::size_t elem, const lane_shape& s, lane_scatter inner) {
  const lane_packs packs(s, each, elem, root);
  const int root_local = s.local_of[static_cast<std::size_t>(root)];
  scratch_pool::lease mine;
  if (s.host == packs.root_host) mine = f.scratch().take(packs.bytes());
  const auto own = std::span(const_cast<std::byte*>(from.data()), from.size());
  // Lanes that share a rail (more ranks per host than rails) take turns: every lane sends
  // into the root's host, and all of them at once overflowed its link's queue (TCP
  // incast: 12 senders of 1 MiB on 4 x 4 lost segments and waited out retransmission
  // timeouts, 2.4x the bound). A lane's members elsewhere start when the root's host's
  // member of the lane before them on the rail says its gather is done.
  const int turn = s.sub == 1 ? s.rails : 0;  // lanes l and l + turn share a rail
  const tag turn_tag{seq, static_cast<std::uint32_t>(turn_region) << lane_view::step_bits};
  std::byte token{};
  if (turn && s.local >= turn && s.host != packs.root_host)
    if (auto r = co_await f.recv(s.rank_at(packs.root_host, s.local - turn), turn_tag, {&token, 1}); !r) co_return fail(r.error());
  if (auto r = co_await on_every_lane(f, s, [&](fabric& lane, int j) {
        const auto at = packs.piece.of(own, j);
        return inner(lane, at, mine.size() ? packs.part(mine.span(), j) : std::span<std::byte>{}, packs.root_host, at.size());
      });
      !r)
    co_return r;
  if (turn && s.local + turn < s.per_host && s.host == packs.root_host) {
    std::vector<operation> ops;
    for (int h = 0; h < s.hosts; ++h)
      if (h != s.host) ops.push_back(f.send(s.rank_at(h, s.local + turn), turn_tag, {&token, 1}));
    if (auto r = co_await all_of(ops); !r) co_return r;
  }
  if (s.host != packs.root_host) co_return result<void>{};
  lane_view local(f, s.host_group, 0, last_local);
  if (f.rank() != root) {
    auto r = co_await local.send(root_local, {seq, 0}, mine.span());
    co_return r ? result<void>{} : fail(r.error());
  }
  std::vector<scratch_pool::lease> theirs;
  std::vector<operation> ops;
  for (int l = 0; l < s.per_host; ++l)
    if (l != root_local) {
      theirs.push_back(f.scratch().take(packs.bytes()));
      ops.push_back(local.recv(l, {seq, 0}, theirs.back().span()));
    }
  if (auto r = co_await all_of(ops); !r) co_return r;
  for (int l = 0, i = 0; l < s.per_host; ++l)
    packs.copy(to, l == root_local ? mine.span() : theirs[static_cast<std::size_t>(i++)].span(), l, false);
  co_return result<void>{};
}

task<result<void>> reduce_scatter_multi_lane(fabric& f, std::uint32_t seq, std::span<std::byte> work, std::size_t each,
                                             const detail::erased_reduction& op, const lane_shape& s, lane_reduce_scatter inner) {
  const lane_packs packs(s, each, op.elem, 0);  // root 0: the packs in rank order
  const auto take = [&] { return f.scratch().take(packs.bytes()); };
  // in[l]: local rank l's blocks of this rank's lane (this rank's own in place of its own).
  std::vector<scratch_pool::lease> in, out;
  in.reserve(static_cast<std::size_t>(s.per_host));
  out.reserve(static_cast<std::size_t>(s.per_host));
  std::vector<operation> ops;
  lane_view local(f, s.host_group, 0, first_local);
  for (int l = 0; l < s.per_host; ++l) {
    in.push_back(take());
    if (l == s.local) {
      packs.copy(work, in.back().span(), l, true);
      continue;
    }
    out.push_back(take());
    packs.copy(work, out.back().span(), l, true);
    ops.push_back(local.send(l, {seq, 0}, out.back().span()));
    ops.push_back(local.recv(l, {seq, 0}, in.back().span()));
  }
  if (auto r = co_await all_of(ops); !r) co_return r;
  const auto sum = in[0].span();
  if (f.carries_data())  // in_0 (+) in_1 (+) ...: the same order on every host
    for (int l = 1; l < s.per_host; ++l) op(sum.data(), in[static_cast<std::size_t>(l)].data(), sum.data(), sum.size() / op.elem);
  if (auto r = co_await on_every_lane(f, s, [&](fabric& lane, int j) {
        return inner(lane, packs.part(sum, j), packs.piece.part.size(static_cast<std::size_t>(j)) * packs.piece.elem);
      });
      !r)
    co_return r;
  // This host's pieces of the lane's result are this rank's part.
  const auto mine = work.subspan(static_cast<std::size_t>(f.rank()) * each, each);
  for (int j = 0; j < s.sub; ++j) {
    const auto at = packs.piece.of(mine, j);
    if (!at.empty() && f.carries_data())
      std::memcpy(at.data(), packs.part(sum, j).data() + static_cast<std::size_t>(s.host) * at.size(), at.size());
  }
  co_return result<void>{};
}

}  // namespace optcast::algorithms
