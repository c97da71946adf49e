// Alexandrov et al., Section 4: scatter, and gather as its reverse. Every algorithm here
// works on virtual processors (the root is 0, v = rank - root mod p) whose segments lie
// in virtual order in `all`; the entry points (lib/collectives/scatter_gather.cpp) arrange that.
#include <cstring>
#include <memory>
#include <vector>

#include "round_loops.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

namespace {

// This rank's place in a split tree: its node, and where its group's bytes start and
// how many there are.
struct place {
  int v;
  loggp::tree_node node;
  std::size_t base, group;
  place(const fabric& f, int root, const loggp::split_table& table, detail::segment_offsets offset)
      : v(detail::rooted{f.size(), root}.virt(f.rank())), node(loggp::node_of(table, f.size(), v)),
        base(offset[static_cast<std::size_t>(v)]), group(offset[static_cast<std::size_t>(v + node.size)] - base) {}
};

// A segment in messages of `item` bytes (Short-Message), or whole (item = 0).
struct message_cut {
  std::size_t item;
  std::size_t count(std::size_t bytes) const noexcept { return item ? (bytes + item - 1) / item : (bytes ? 1 : 0); }
  std::pair<std::size_t, std::size_t> at(std::size_t bytes, std::size_t i) const noexcept {
    return item ? std::pair{i * item, std::min(item, bytes - i * item)} : std::pair{std::size_t{0}, bytes};
  }
};

}  // namespace

task<result<void>> scatter_tree(fabric& f, std::uint32_t seq, std::span<const std::byte> all, std::span<std::byte> out,
                                 int root, const loggp::split_table& table, detail::segment_offsets offset) {
  const place me(f, root, table, offset);
  const int v = me.v;
  const auto& node = me.node;
  const std::size_t base = me.base, group = me.group;
  scratch_pool::lease held_lease;
  std::span<std::byte> held;  // the group's bytes, on a processor that passes some on
  std::span<const std::byte> data = all;
  if (v != 0) {
    // A leaf receives straight into `out`; an inner node keeps its group until sent on.
    std::span<std::byte> into = out;
    if (node.size > 1) {
      held_lease = f.scratch().take(group);
      held = held_lease.span();
      into = held;
    }
    if (group)
      if (auto r = co_await f.recv(detail::rooted{f.size(), root}.real(node.parent), {seq, 0}, into); !r) co_return fail(r.error());
    data = held;
  }
  // One child after another, the largest group first, as the recurrence times them.
  for (const auto& ch : node.children) {
    const std::size_t from = offset[static_cast<std::size_t>(ch.first)] - base;
    const std::size_t bytes = offset[static_cast<std::size_t>(ch.first + ch.size)] - base - from;
    if (bytes)
      if (auto r = co_await f.send(detail::rooted{f.size(), root}.real(ch.first), {seq, 0}, data.subspan(from, bytes)); !r) co_return fail(r.error());
  }
  if (node.size > 1 || v == 0) {
    const std::size_t mine = offset[static_cast<std::size_t>(v) + 1] - base;
    if (mine && data.data() != out.data()) std::memcpy(out.data(), data.data(), mine);
  }
  co_return result<void>{};
}

task<result<void>> gather_tree(fabric& f, std::uint32_t seq, std::span<const std::byte> in, std::span<std::byte> all,
                               int root, const loggp::split_table& table, detail::segment_offsets offset) {
  const place me(f, root, table, offset);
  const int v = me.v;
  const auto& node = me.node;
  const std::size_t base = me.base, group = me.group;
  if (v != 0 && node.children.empty()) {  // a leaf sends its own bytes up as they are
    if (!in.empty())
      if (auto r = co_await f.send(detail::rooted{f.size(), root}.real(node.parent), {seq, 0}, in); !r) co_return fail(r.error());
    co_return result<void>{};
  }
  scratch_pool::lease held;
  std::span<std::byte> data = all;  // the root gathers into `all`
  if (v != 0) {
    held = f.scratch().take(group);
    data = held.span();
  }
  if (!in.empty() && in.data() != data.data()) std::memcpy(data.data(), in.data(), in.size());
  // The scatter's messages backwards: every child's group at once, then the whole group up.
  std::vector<operation> recvs;
  for (const auto& ch : node.children) {
    const std::size_t from = offset[static_cast<std::size_t>(ch.first)] - base;
    const std::size_t bytes = offset[static_cast<std::size_t>(ch.first + ch.size)] - base - from;
    if (bytes) recvs.push_back(f.recv(detail::rooted{f.size(), root}.real(ch.first), {seq, 0}, data.subspan(from, bytes)));
  }
  if (auto r = co_await op_span_awaiter(recvs); !r) co_return r;
  if (v != 0 && group)
    if (auto r = co_await f.send(detail::rooted{f.size(), root}.real(node.parent), {seq, 0}, data); !r) co_return fail(r.error());
  co_return result<void>{};
}

task<result<void>> scatter_pieces(fabric& f, std::uint32_t seq, std::span<const std::byte> all, std::span<std::byte> out,
                                  int root, const loggp::scatter_plan& plan, detail::segment_offsets offset) {
  const int P = f.size();
  const int v = detail::rooted{P, root}.virt(f.rank());
  // Every message to this processor, received into its own buffer, all posted at once.
  std::vector<const loggp::scatter_message*> in;
  std::vector<int> from;
  for (int u = 0; u < P; ++u)
    for (const auto& m : plan.sends[static_cast<std::size_t>(u)])
      if (m.to == v) {
        in.push_back(&m);
        from.push_back(u);
      }
  std::vector<std::vector<std::byte>> got(in.size());
  const auto posted = std::make_unique<posted_op[]>(in.size());
  const std::span<posted_op> all_posted(posted.get(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    got[i].resize(in[i]->bytes());
    posted[i].start(f.recv(detail::rooted{f.size(), root}.real(from[i]), {seq, 0}, got[i]));
  }
  std::vector<char> arrived(in.size(), 0);
  const auto wait = [&](std::size_t i) -> task<result<void>> {
    if (!arrived[i]) {
      if (auto r = co_await posted[i].finished(); !r) co_return fail(r.error());
      arrived[i] = 1;
    }
    co_return result<void>{};
  };
  // Where a piece is here: the source's segments, or the message it came in.
  const auto find = [&](const loggp::piece& pc, std::size_t& msg, std::size_t& at) {
    for (std::size_t i = 0; i < in.size(); ++i) {
      std::size_t off = 0;
      for (const auto& q : in[i]->pieces) {
        if (q.dest == pc.dest && q.from == pc.from) {
          msg = i;
          at = off;
          return true;
        }
        off += q.bytes;
      }
    }
    return false;
  };
  std::vector<std::byte> buf;
  for (const auto& m : plan.sends[static_cast<std::size_t>(v)]) {
    buf.resize(m.bytes());
    std::size_t pos = 0;
    for (const auto& pc : m.pieces) {
      if (v == 0) {
        std::memcpy(buf.data() + pos, all.data() + offset[static_cast<std::size_t>(pc.dest)] + pc.from, pc.bytes);
      } else {
        std::size_t msg = 0, at = 0;
        if (!find(pc, msg, at)) co_return co_await settled(all_posted, make_error_code(errc::protocol_violation));
        if (auto r = co_await wait(msg); !r) co_return co_await settled(all_posted, r.error());
        std::memcpy(buf.data() + pos, got[msg].data() + at, pc.bytes);
      }
      pos += pc.bytes;
    }
    if (auto r = co_await f.send(detail::rooted{f.size(), root}.real(m.to), {seq, 0}, buf); !r) co_return co_await settled(all_posted, r.error());
  }
  if (v == 0) {
    if (const std::size_t mine = offset[1]; mine) std::memcpy(out.data(), all.data(), mine);
    co_return result<void>{};
  }
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (auto r = co_await wait(i); !r) co_return co_await settled(all_posted, r.error());
    std::size_t off = 0;
    for (const auto& q : in[i]->pieces) {
      if (q.dest == v) std::memcpy(out.data() + q.from, got[i].data() + off, q.bytes);
      off += q.bytes;
    }
  }
  co_return result<void>{};
}

task<result<void>> scatter_direct(fabric& f, std::uint32_t seq, std::span<const std::byte> all, std::span<std::byte> out,
                                  int root, detail::segment_offsets offset, std::size_t item) {
  const int P = f.size();
  const int v = detail::rooted{P, root}.virt(f.rank());
  const auto seg = [&](int w) {
    return std::pair{offset[static_cast<std::size_t>(w)], offset[static_cast<std::size_t>(w) + 1] - offset[static_cast<std::size_t>(w)]};
  };
  const message_cut cut{item};
  if (v == 0) {
    if (const auto [at, bytes] = seg(0); bytes) std::memcpy(out.data(), all.data() + at, bytes);
    for (int w = 1; w < P; ++w) {
      const auto [at, bytes] = seg(w);
      for (std::size_t i = 0; i < cut.count(bytes); ++i) {
        const auto [off, len] = cut.at(bytes, i);
        if (auto r = co_await f.send(detail::rooted{f.size(), root}.real(w), {seq, 0}, all.subspan(at + off, len)); !r) co_return fail(r.error());
      }
    }
    co_return result<void>{};
  }
  const auto bytes = seg(v).second;
  std::vector<operation> recvs;
  recvs.reserve(cut.count(bytes));
  for (std::size_t i = 0; i < cut.count(bytes); ++i) {
    const auto [off, len] = cut.at(bytes, i);
    recvs.push_back(f.recv(detail::rooted{f.size(), root}.real(0), {seq, 0}, out.subspan(off, len)));
  }
  co_return co_await op_span_awaiter(recvs);
}

task<result<void>> gather_direct(fabric& f, std::uint32_t seq, std::span<const std::byte> in, std::span<std::byte> all,
                                 int root, detail::segment_offsets offset, std::size_t item) {
  const int P = f.size();
  const int v = detail::rooted{P, root}.virt(f.rank());
  const message_cut cut{item};
  if (v != 0) {
    for (std::size_t i = 0; i < cut.count(in.size()); ++i) {
      const auto [off, len] = cut.at(in.size(), i);
      if (auto r = co_await f.send(detail::rooted{f.size(), root}.real(0), {seq, 0}, in.subspan(off, len)); !r) co_return fail(r.error());
    }
    co_return result<void>{};
  }
  if (!in.empty()) std::memcpy(all.data(), in.data(), in.size());
  std::vector<operation> recvs;
  for (int w = 1; w < P; ++w) {
    const std::size_t at = offset[static_cast<std::size_t>(w)], bytes = offset[static_cast<std::size_t>(w) + 1] - at;
    for (std::size_t i = 0; i < cut.count(bytes); ++i) {
      const auto [off, len] = cut.at(bytes, i);
      recvs.push_back(f.recv(detail::rooted{f.size(), root}.real(w), {seq, 0}, all.subspan(at + off, len)));
    }
  }
  co_return co_await op_span_awaiter(recvs);
}

}  // namespace optcast::algorithms
