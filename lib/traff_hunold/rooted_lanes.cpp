// The multi-lane scatter, gather and reduce-scatter (multi_lane.hpp): the root's (or
// every) host's data regrouped by lane, so that each lane's collective carries its
// members' blocks between the hosts and the root's host's rails carry every byte once.
#include <cstring>

#include "lane_phases.hpp"
#include "multi_lane.hpp"

namespace optcast::algorithms {

using namespace lane_phases;

namespace {

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
  bool direct() const noexcept { return piece.part.size(static_cast<std::size_t>(s.sub - 1)) * piece.elem >= direct_piece_bytes; }
  // A message's step for piece (v, j) between the root and another rank of its host.
  std::uint32_t step(int v, int j) const noexcept { return static_cast<std::uint32_t>(v * s.sub + j); }
};

// Sub-lane j when pieces go direct (Alexandrov et al.'s Simple Long-Message on the lane):
// the root sends (scatter) or receives (gather) every other host's piece j of its lane
// straight from or into its buffer `all`; the lanes' members elsewhere receive into or
// send from their own part `mine` (the root's host's other ranks: rooted_direct).
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

// An operation awaited as a task (beside other tasks in when_all_tasks).
task<result<void>> awaited(operation op) {
  auto r = co_await op;
  co_return r ? result<void>{} : fail(r.error());
}

// Lanes that share a rail (more ranks per host than rails) take turns in a gather: every
// lane sends into the root's host, and all of them at once overflowed its link's queue
// (TCP incast: 12 senders of 1 MiB on 4 x 4 lost segments and waited out retransmission
// timeouts, 2.4x the bound). A lane's members elsewhere start when the root's host's
// member of the lane before them on the rail says its part is done.
struct gather_turns {
  const lane_shape& s;
  int root_host;
  int turn;  // lanes l and l + turn share a rail; 0: no turns
  tag t;
  std::byte token{};
  gather_turns(const lane_shape& sh, int root_host_, std::uint32_t seq)
      : s(sh), root_host(root_host_), turn(sh.sub == 1 ? sh.rails : 0),
        t{seq, static_cast<std::uint32_t>(turn_region) << lane_view::step_bits} {}
  task<result<void>> wait(fabric& f) {
    if (!turn || s.local < turn || s.host == root_host) co_return result<void>{};
    co_return co_await awaited(f.recv(s.rank_at(root_host, s.local - turn), t, {&token, 1}));
  }
  task<result<void>> pass(fabric& f) {
    if (!turn || s.local + turn >= s.per_host || s.host != root_host) co_return result<void>{};
    std::vector<operation> ops;
    for (int h = 0; h < s.hosts; ++h)
      if (h != s.host) ops.push_back(f.send(s.rank_at(h, s.local + turn), t, {&token, 1}));
    co_return co_await all_of(ops);
  }
};

// The lanes' tasks, then the turn passed on.
task<result<void>> lanes_then_pass(std::vector<task<result<void>>> lanes, gather_turns& turns, fabric& f) {
  for (auto& r : co_await when_all_tasks(std::move(lanes)))
    if (!r) co_return r;
  co_return co_await turns.pass(f);
}

// A piece received from one peer and, as soon as it is in, sent on to another (on
// another fabric: a lane and the host).
task<result<void>> forward(fabric& in, int from, tag from_tag, fabric& out, int to, tag to_tag, std::span<std::byte> piece) {
  if (auto r = co_await in.recv(from, from_tag, piece); !r) co_return fail(r.error());
  co_return co_await awaited(out.send(to, to_tag, piece));
}

// Scatter and gather with direct pieces: every lane a flat scatter from (gather into) the
// root's host, the root's own lane straight from (into) the root's buffer `all`; the
// root's host's other ranks pass each piece between the root and their lane as soon as it
// is in, and the root sends (receives) each piece where it lies, so that the node-local
// phase overlaps the lanes' and nothing is packed. `mine`: this rank's own part.
// Gather passes the turn on (gather_turns) when this rank's lanes are done.
task<result<void>> rooted_direct(fabric& f, std::uint32_t seq, const lane_packs& packs, std::span<std::byte> all,
                                 std::span<std::byte> mine, bool gather, gather_turns* turns) {
  const lane_shape& s = packs.s;
  const int root_local = s.local_of[static_cast<std::size_t>(packs.root)];
  lane_view local(f, s.host_group, 0, gather ? last_local : first_local);
  std::deque<lane_view> views;
  std::vector<task<result<void>>> lanes;
  scratch_pool::lease held;  // a forwarder's pieces for (from) the other hosts
  const bool forwarder = s.host == packs.root_host && f.rank() != packs.root;
  if (forwarder) held = f.scratch().take(packs.bytes());
  for (int j = 0; j < s.sub; ++j) {
    auto& lane = sub_lane(views, f, s, j, lanes_region);
    if (!forwarder) {
      lanes.push_back(lane_direct(lane, seq, packs, all, mine, j, gather));
      continue;
    }
    const std::size_t size = packs.piece.part.size(static_cast<std::size_t>(j)) * packs.piece.elem;
    if (!size) continue;
    const auto own = packs.piece.of(mine, j);
    const tag own_tag{seq, packs.step(0, j)};
    lanes.push_back(awaited(gather ? local.send(root_local, own_tag, own) : local.recv(root_local, own_tag, own)));
    for (int v = 1; v < s.hosts; ++v) {
      const int host = (packs.root_host + v) % s.hosts;
      const tag at_root{seq, packs.step(v, j)}, on_lane{seq, 0};
      const auto piece = packs.part(held.span(), j).subspan(static_cast<std::size_t>(v) * size, size);
      lanes.push_back(gather ? forward(lane, host, on_lane, local, root_local, at_root, piece)
                             : forward(local, root_local, at_root, lane, host, on_lane, piece));
    }
  }
  std::vector<task<result<void>>> tasks;
  if (turns) tasks.push_back(lanes_then_pass(std::move(lanes), *turns, f));
  else tasks = std::move(lanes);
  std::vector<operation> ops;  // the root's messages with its host's other ranks
  if (f.rank() == packs.root) {
    for (int l = 0; l < s.per_host; ++l)
      if (l != root_local)
        packs.each_piece(all, l, [&](std::span<std::byte> piece, std::size_t, int v, int j) {
          const tag t{seq, packs.step(v, j)};
          ops.push_back(gather ? local.recv(l, t, piece) : local.send(l, t, piece));
        });
    tasks.push_back(all_of(ops));
  }
  for (auto& r : co_await when_all_tasks(std::move(tasks)))
    if (!r) co_return r;
  co_return result<void>{};
}

}  // namespace

task<result<void>> scatter_multi_lane(fabric& f, std::uint32_t seq, std::span<const std::byte> from, std::span<std::byte> to,
                                      int root, std::size_t each, std::size_t elem, const lane_shape& s, lane_scatter inner) {
  const lane_packs packs(s, each, elem, root);
  const auto all = std::span(const_cast<std::byte*>(from.data()), from.size());
  if (packs.direct()) co_return co_await rooted_direct(f, seq, packs, all, to, false, nullptr);
  const int root_local = s.local_of[static_cast<std::size_t>(root)];
  scratch_pool::lease mine;
  if (s.host == packs.root_host) {
    mine = f.scratch().take(packs.bytes());
    lane_view local(f, s.host_group, 0, first_local);
    std::vector<operation> ops;
    std::vector<scratch_pool::lease> theirs;
    if (f.rank() == root) {
      // Every other rank's lane: its pack in one message.
      theirs.reserve(static_cast<std::size_t>(s.per_host));
      for (int l = 0; l < s.per_host; ++l) {
        auto pack = l == root_local ? mine.span() : (theirs.push_back(f.scratch().take(packs.bytes())), theirs.back().span());
        packs.copy(all, pack, l, true);
        if (l != root_local) ops.push_back(local.send(l, {seq, 0}, pack));
      }
    } else {
      ops.push_back(local.recv(root_local, {seq, 0}, mine.span()));
    }
    if (auto r = co_await all_of(ops); !r) co_return r;
  }
  co_return co_await on_every_lane(f, s, [&](fabric& lane, int j) {
    const auto at = packs.piece.of(to, j);
    return inner(lane, mine.size() ? packs.part(mine.span(), j) : std::span<std::byte>{}, at, packs.root_host, at.size());
  });
}

task<result<void>> gather_multi_lane(fabric& f, std::uint32_t seq, std::span<const std::byte> from, std::span<std::byte> to,
                                     int root, std::size_t each, std::size_t elem, const lane_shape& s, lane_scatter inner) {
  const lane_packs packs(s, each, elem, root);
  const int root_local = s.local_of[static_cast<std::size_t>(root)];
  const auto own = std::span(const_cast<std::byte*>(from.data()), from.size());
  gather_turns turns(s, packs.root_host, seq);
  if (auto r = co_await turns.wait(f); !r) co_return r;
  if (packs.direct()) co_return co_await rooted_direct(f, seq, packs, to, own, true, &turns);
  scratch_pool::lease mine;
  if (s.host == packs.root_host) mine = f.scratch().take(packs.bytes());
  if (auto r = co_await on_every_lane(f, s, [&](fabric& lane, int j) {
        const auto at = packs.piece.of(own, j);
        return inner(lane, at, mine.size() ? packs.part(mine.span(), j) : std::span<std::byte>{}, packs.root_host, at.size());
      });
      !r)
    co_return r;
  if (auto r = co_await turns.pass(f); !r) co_return r;
  if (s.host != packs.root_host) co_return result<void>{};
  lane_view local(f, s.host_group, 0, last_local);
  if (f.rank() != root) {
    co_return co_await awaited(local.send(root_local, {seq, 0}, mine.span()));
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
                                             const erased_reduction& op, const lane_shape& s, lane_reduce_scatter inner) {
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
