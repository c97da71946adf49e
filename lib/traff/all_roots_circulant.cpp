#include <array>
#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>

#include "round_loops.hpp"
#include "traff/circulant.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

segment_layout::segment_layout(std::size_t elem_bytes, int blocks, std::span<const std::size_t> counts)
    : elem(elem_bytes), n(blocks), offset(counts.size() + 1) {
  split_.reserve(counts.size());
  contributors.reserve(counts.size());
  for (std::size_t j = 0; j < counts.size(); ++j) {
    offset[j + 1] = offset[j] + counts[j];
    uniform = uniform && counts[j] == counts[0];
    if (counts[j]) contributors.push_back(static_cast<int>(j));
    const block_partition part(counts[j], static_cast<std::size_t>(n));
    split_.push_back({part.size(part.count() - 1), counts[j] % static_cast<std::size_t>(n)});
  }
}

std::shared_ptr<const segment_layout> kept_layout(bool each, std::size_t elem, std::size_t count, std::size_t p, int blocks) {
  struct kept {
    bool each;
    std::size_t elem, count, p;
    int blocks;
    std::weak_ptr<const segment_layout> lay;
    // Kept alive between calls too (one rank's calls one after another) up to a size
    // whose three arrays cost little to hold: 4,096 ranks, about 100 KiB each.
    std::shared_ptr<const segment_layout> held;
  };
  thread_local std::array<kept, 4> last{};
  thread_local std::size_t next = 0;
  for (const auto& k : last)
    if (k.each == each && k.elem == elem && k.count == count && k.p == p && k.blocks == blocks)
      if (auto lay = k.lay.lock()) return lay;
  std::vector<std::size_t> counts(p, count);
  if (!each) {
    const block_partition parts(count, p);
    for (std::size_t j = 0; j < counts.size(); ++j) counts[j] = parts.size(j);
  }
  auto lay = std::make_shared<const segment_layout>(elem, blocks, counts);
  last[next++ % last.size()] = {each, elem, count, p, blocks, lay, p <= 4096 ? lay : nullptr};
  return lay;
}

namespace {

// Blocks of one or two elements are common (small all-gathers); libc's memcpy call
// costs more than the copy then.
inline void copy_bytes(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  if (n <= 16) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    std::memcpy(dst, src, n);
  }
}

// The parts of the buffer one round's message carries, in segment order. A message of
// one part goes straight from or into the buffer; several are packed (Algorithm 7's
// tempin/tempout). Segments of ranks that contribute nothing are never visited.
class round_message {
public:
  explicit round_message(std::size_t parts) { parts_.reserve(parts); }
  void clear() noexcept {
    parts_.clear();
    bytes_ = 0;
  }
  void add(std::span<std::byte> part) {
    if (part.empty()) return;
    parts_.push_back(part);
    bytes_ += part.size();
  }
  std::size_t bytes() const noexcept { return bytes_; }
  bool single() const noexcept { return parts_.size() == 1; }
  std::span<std::byte> only() const noexcept { return parts_.front(); }
  const std::vector<std::span<std::byte>>& parts() const noexcept { return parts_; }
  template <class Parts, class Block>
  void collect(const Parts& u, const Block& block, int p, int to, std::byte* buf) {
    clear();
    u.each(block, p, to, buf, [&](std::byte* part, std::size_t n) {
      parts_.emplace_back(part, n);
      bytes_ += n;
    });
  }

  std::span<std::byte> pack(std::span<std::byte> temp) const {
    std::size_t off = 0;
    for (auto part : parts_) {
      copy_bytes(temp.data() + off, part.data(), part.size());
      off += part.size();
    }
    return {temp.data(), bytes_};
  }
  void unpack(std::span<const std::byte> temp) const {
    std::size_t off = 0;
    for (auto part : parts_) {
      copy_bytes(part.data(), temp.data() + off, part.size());
      off += part.size();
    }
  }

private:
  std::vector<std::span<std::byte>> parts_;
  std::size_t bytes_ = 0;
};

// The per-round block arithmetic of Algorithm 7, shared by both directions.
struct all_roots {
  std::shared_ptr<const circulant::schedule_table> table;
  int p, q, n, x;

  all_roots(int p_, int n_) : table(circulant::table_for(p_)), p(p_), q(table->q()), n(n_) {
    x = (q - (n - 1) % q) % q;
  }
  int first_round() const noexcept { return x; }
  int end_round() const noexcept { return n - 1 + q + x; }
  // The block rank v (relative to the root) receives in round i: the first-phase
  // schedule shifted by the virtual rounds and by q per phase, capped at n - 1.
  struct round_blocks {
    const int* row;  // the table's row k = i mod q
    int shift, last;
    int operator()(int v) const noexcept {
      const int b = row[v] + shift;
      return b < 0 ? -1 : (b < last ? b : last);
    }
  };
  round_blocks in_round(int i) const noexcept { return {table->row(i % q), q * (i / q) - x, n - 1}; }
  int rel(int r, int j) const noexcept { return r >= j ? r - j : r - j + p; }
};

// One round's two messages for every root at once: to `to`, the blocks it receives for
// each root but itself; from the from-processor, the blocks rank `me` receives for each
// root but itself. A plain function, not part of a coroutine: its loop runs p times per
// round and keeps its state in registers.
void gather_round(const segment_layout& lay, std::span<std::byte> buf, const all_roots& sch,
                  const all_roots::round_blocks& block, int me, int to, round_message& out, round_message& in) {
  out.clear();
  in.clear();
  for (int j : lay.contributors) {
    if (j != to)
      if (const int b = block(sch.rel(to, j)); b >= 0) out.add(lay.block(buf, j, b));
    if (j != me)
      if (const int b = block(sch.rel(me, j)); b >= 0) in.add(lay.block(buf, j, b));
  }
}

// Every rank a root with segments of one size (allreduce's two halves, allgather): the
// message to rank `to` holds block clamp(row[v] + shift) of segment (to - v) mod p for
// v = 1 .. p - 1, the same blocks for every rank. Taken in that order, by both ends of a
// message, a part's place is arithmetic on v: no per-segment lookups and no list of
// parts, one pass that copies (building gather_round's list was 38% of a verified
// 1,000-rank allreduce under perf; what remains is mostly the strided touches of the
// buffer themselves, one byte in each of p segments per message).
class uniform_parts {
public:
  static bool applies(const segment_layout& lay, int p) noexcept {
    return lay.equal_in_order() && static_cast<int>(lay.contributors.size()) == p;
  }
  explicit uniform_parts(const segment_layout& lay) {
    for (int b = 0; b < lay.n; ++b) {
      off_.push_back(seg_);
      len_.push_back(lay.block_bytes(0, b));
      seg_ += len_.back();
    }
    width_ = len_.front();
    for (auto l : len_)
      if (l != width_) width_ = 0;
    jstride_ = seg_;
    bstride_ = width_;
  }

  // Blocks of one small width W (1, 2, 4, 8 or 16 bytes): in the caller's segment-major buffer a
  // message's parts, one block of each of p - 1 segments, lie a segment apart, a cache
  // line or more each (p = 1000 with 64 one-byte blocks: the 64 KiB of every segment's
  // row touched per message, and by each of the thousand simulated ranks in turn). The
  // rounds then work on a block-major copy, block b of every segment side by side: a
  // round's blocks are a few values of b (row k of the table, shifted and capped), so
  // its parts fall in a few rows of p W bytes. Copying in and out is two passes.
  bool small() const noexcept { return width_ == 1 || width_ == 2 || width_ == 4 || width_ == 8 || width_ == 16; }
  void use_block_major(int p) noexcept {
    jstride_ = width_;
    bstride_ = width_ * static_cast<std::size_t>(p);
  }
  // Segment j (or all p, j < 0) from the caller's buffer into the block-major copy (In)
  // or back.
  template <bool In>
  void transpose(std::byte* buf, std::byte* major, int p, int j) const {
    switch (width_) {
      case 1: return transpose<In, 1>(buf, major, p, j);
      case 2: return transpose<In, 2>(buf, major, p, j);
      case 4: return transpose<In, 4>(buf, major, p, j);
      case 8: return transpose<In, 8>(buf, major, p, j);
      default: return transpose<In, 16>(buf, major, p, j);  // small(): W <= 16
    }
  }
  template <bool In, std::size_t W>
  void transpose(std::byte* buf, std::byte* major, int p, int j) const {
    const int lo = j < 0 ? 0 : j, hi = j < 0 ? p : j + 1;
    const auto n = off_.size();
    for (int s = lo; s < hi; ++s) {
      std::byte* seg = buf + static_cast<std::size_t>(s) * seg_;
      std::byte* col = major + static_cast<std::size_t>(s) * W;
      for (std::size_t b = 0; b < n; ++b) {
        if constexpr (In)
          std::memcpy(col + b * bstride_, seg + b * W, W);
        else
          std::memcpy(seg + b * W, col + b * bstride_, W);
      }
    }
  }

  // fn(part, bytes) for each non-empty part of the message to `to`, in the order above.
  template <class Fn>
  void each(const all_roots::round_blocks& block, int p, int to, std::byte* buf, Fn&& fn) const {
    int j = to;
    for (int v = 1; v < p; ++v) {
      if (--j < 0) j = p - 1;  // j = to - v mod p
      const int b = block(v);
      if (b < 0) continue;
      const auto ub = static_cast<std::size_t>(b);
      if (len_[ub]) fn(buf + static_cast<std::size_t>(j) * jstride_ + (width_ ? ub * bstride_ : off_[ub]), len_[ub]);
    }
  }
  std::size_t pack(const all_roots::round_blocks& block, int p, int to, std::byte* buf, std::byte* out) const {
    return copy<true>(block, p, to, buf, out);
  }
  void unpack(const all_roots::round_blocks& block, int p, int to, std::byte* buf, std::byte* in) const {
    copy<false>(block, p, to, buf, in);
  }

private:
  // Packs (to `msg`) or unpacks (from it). Blocks of one width W (the segment a multiple
  // of the block count) copy W bytes at a time, W known at compile time for the small
  // ones: a part is then one load and one store (most parts of a wide allreduce are an
  // element or two).
  template <bool Pack>
  std::size_t copy(const all_roots::round_blocks& block, int p, int to, std::byte* buf, std::byte* msg) const {
    switch (width_) {
      case 1: return fixed<Pack, 1>(block, p, to, buf, msg);
      case 2: return fixed<Pack, 2>(block, p, to, buf, msg);
      case 4: return fixed<Pack, 4>(block, p, to, buf, msg);
      case 8: return fixed<Pack, 8>(block, p, to, buf, msg);
      case 16: return fixed<Pack, 16>(block, p, to, buf, msg);
      default: break;
    }
    std::size_t at = 0;
    each(block, p, to, buf, [&](std::byte* part, std::size_t n) {
      if constexpr (Pack)
        copy_bytes(msg + at, part, n);
      else
        copy_bytes(part, msg + at, n);
      at += n;
    });
    return at;
  }
  template <bool Pack, std::size_t W>
  std::size_t fixed(const all_roots::round_blocks& block, int p, int to, std::byte* buf, std::byte* msg) const {
    std::byte* at = msg;
    int j = to;
    for (int v = 1; v < p; ++v) {
      if (--j < 0) j = p - 1;
      const int b = block(v);
      if (b < 0) continue;
      std::byte* part = buf + static_cast<std::size_t>(j) * jstride_ + static_cast<std::size_t>(b) * bstride_;
      if constexpr (Pack)
        std::memcpy(at, part, W);
      else
        std::memcpy(part, at, W);
      at += W;
    }
    return static_cast<std::size_t>(at - msg);
  }

  std::size_t seg_ = 0;                 // one segment's bytes
  std::size_t width_ = 0;               // every block's bytes, or 0 where they differ
  std::size_t jstride_ = 0, bstride_ = 0;  // with width_: block b of segment j at j jstride_ + b bstride_
  std::vector<std::size_t> off_, len_;  // block b's offset and bytes within a segment
};

// The bytes of round i's two messages (to `to` and from `from`), as gather_round packs
// them, without touching the buffer: for the simulator's timing-only runs
// (fabric::carries_data false).
struct round_bytes {
  std::size_t out = 0, in = 0;
};
round_bytes sizes_of(const segment_layout& lay, const all_roots& sch, const all_roots::round_blocks& block, int k, int me, int to) {
  round_bytes rb;
  const auto& t = *sch.table;
  if (lay.uniform && static_cast<int>(lay.contributors.size()) == sch.p) {
    // Every rank a root with equal segments: both messages hold one block of each of
    // the other p - 1 roots, that of relative rank v = 1 .. p-1, the same for every rank.
    for (int val = t.lowest(); val <= t.highest(); ++val)
      if (const int c = t.count(k, val))
        if (const int b = block.shift + val; b >= 0)
          rb.out += static_cast<std::size_t>(c) * lay.block_bytes(0, b < block.last ? b : block.last);
    rb.in = rb.out;
    return rb;
  }
  for (int j : lay.contributors) {
    if (j != to)
      if (const int b = block(sch.rel(to, j)); b >= 0) rb.out += lay.block_bytes(j, b);
    if (j != me)
      if (const int b = block(sch.rel(me, j)); b >= 0) rb.in += lay.block_bytes(j, b);
  }
  return rb;
}

// What both directions hold for a whole collective: the schedule of every root, and
// the packing buffers, sized for the largest message (block 0 of every contributor),
// from the rank's scratch pool.
struct all_roots_run {
  all_roots sch;
  scratch_pool::lease in_lease, out_lease;
  std::span<std::byte> tin, tout;
  round_message forth, back;  // the forward round's message to t, and the one from `from`

  all_roots_run(fabric& f, int p, std::span<std::byte> buf, const segment_layout& lay)
      : sch(p, lay.n), forth(lay.contributors.size()), back(lay.contributors.size()) {
    std::size_t cap = 0;
    for (int j : lay.contributors) cap += lay.block(buf, j, 0).size();
    in_lease = f.scratch().take(cap);
    out_lease = f.scratch().take(cap);
    tin = in_lease.span();
    tout = out_lease.span();
  }
};

}  // namespace

task<result<void>> allgatherv_circulant(fabric& f, std::uint32_t seq, std::uint32_t step0,
                                        std::span<std::byte> buf, const segment_layout& lay) {
  const int p = f.size(), r = f.rank();
  if (p == 1 || lay.contributors.empty()) co_return result<void>{};
  all_roots_run run(f, p, buf, lay);
  const auto& sch = run.sch;
  const auto& s = sch.table->skips();
  auto [tin, tout, out, in] = std::tie(run.tin, run.tout, run.forth, run.back);
  const bool data = f.carries_data();  // else timing only: the same messages, nothing packed
  std::optional<uniform_parts> u;
  if (data && uniform_parts::applies(lay, p)) u.emplace(lay);
  // Small blocks: the rounds work on a block-major copy; only this rank's own segment
  // goes in (every other block is received before it is sent), all of it comes out.
  scratch_pool::lease major_lease;
  std::byte* work = buf.data();
  if (u && u->small()) {
    major_lease = f.scratch().take(buf.size());
    work = major_lease.span().data();
    u->use_block_major(p);
    u->transpose<true>(buf.data(), work, p, r);
  }

  for (int i = sch.first_round(); i < sch.end_round(); ++i) {
    const int k = i % sch.q;
    const int t = s.to(r, k), from = s.from(r, k);
    const auto block = sch.in_round(i);
    // The message to t and the room for the one from `from`: sizes alone (timing only),
    // packed in v order (uniform_parts), or listed part by part (gather_round).
    std::span<std::byte> sending, receiving;
    if (!data) {
      const auto sz = sizes_of(lay, sch, block, k, r, t);
      sending = tin.first(sz.out);
      receiving = tout.first(sz.in);
    } else if (u) {
      sending = tin.first(u->pack(block, p, t, work, tin.data()));
      receiving = tout.first(sizes_of(lay, sch, block, k, r, t).in);
    } else {
      gather_round(lay, buf, sch, block, r, t, out, in);
      if (out.bytes()) sending = out.single() ? out.only() : out.pack(tin);
      if (in.bytes()) receiving = in.single() ? in.only() : tout.first(in.bytes());
    }
    const tag tg{seq, step0 + static_cast<std::uint32_t>(i)};
    op_batch<2> round;
    if (!sending.empty()) round.add(f.send(t, tg, sending));
    if (!receiving.empty()) round.add(f.recv(from, tg, receiving));
    if (round.empty()) round.add(f.idle_round());
    if (auto res = co_await round; !res) co_return res;
    if (u && !receiving.empty())
      u->unpack(block, p, r, work, tout.data());
    else if (data && !u && in.bytes() && !in.single())
      in.unpack(tout);
  }
  if (work != buf.data()) u->transpose<false>(buf.data(), work, p, -1);
  co_return result<void>{};
}

task<result<void>> reduce_scatter_circulant(fabric& f, std::uint32_t seq, std::uint32_t step0,
                                            std::span<std::byte> buf, const segment_layout& lay,
                                            const erased_reduction& op) {
  const int p = f.size(), r = f.rank();
  if (p == 1 || lay.contributors.empty()) co_return result<void>{};
  all_roots_run run(f, p, buf, lay);
  const auto& sch = run.sch;
  const auto& s = sch.table->skips();
  // The forward round's messages: `forth` went to t (now partials come back from t),
  // `back` came from `from` (now this rank's partials go back to it).
  auto [tin, tout, forth, back] = std::tie(run.tin, run.tout, run.forth, run.back);
  const bool data = f.carries_data();  // else timing only: the same messages, nothing packed or combined
  std::optional<uniform_parts> u;
  if (data && uniform_parts::applies(lay, p)) u.emplace(lay);
  // Small blocks: the rounds work on a block-major copy (all of it goes in, only this
  // rank's segment, the result, comes out), and a round's partials from t are combined
  // with this rank's packed alike (`mine`): three passes without a list of parts.
  scratch_pool::lease major_lease, mine_lease;
  std::byte* work = buf.data();
  std::span<std::byte> mine;
  if (u && u->small()) {
    major_lease = f.scratch().take(buf.size());
    work = major_lease.span().data();
    mine_lease = f.scratch().take(tout.size());
    mine = mine_lease.span();
    u->use_block_major(p);
    u->transpose<true>(buf.data(), work, p, -1);
  }

  // The all-broadcast's rounds from last to first, every message reversed: what a rank
  // received in round i it now sends back (its partial result, complete by then, since
  // it forwarded those blocks only in later rounds), and what it sent it now receives
  // and reduces into its own partial.
  for (int i = sch.end_round() - 1; i >= sch.first_round(); --i) {
    const int k = i % sch.q;
    const int t = s.to(r, k), from = s.from(r, k);
    const auto block = sch.in_round(i);
    std::span<std::byte> sending, receiving;
    if (!data) {
      const auto sz = sizes_of(lay, sch, block, k, r, t);
      sending = tin.first(sz.in);
      receiving = tout.first(sz.out);
    } else if (!mine.empty()) {
      sending = tin.first(u->pack(block, p, r, work, tin.data()));
      receiving = tout.first(u->pack(block, p, t, work, mine.data()));
    } else if (u) {
      // `back` packed straight from the buffer; `forth` lists the parts to reduce into.
      forth.collect(*u, block, p, t, buf.data());
      sending = tin.first(u->pack(block, p, r, buf.data(), tin.data()));
      receiving = tout.first(forth.bytes());
    } else {
      gather_round(lay, buf, sch, block, r, t, forth, back);
      if (back.bytes()) sending = back.single() ? back.only() : back.pack(tin);
      receiving = tout.first(forth.bytes());
    }
    const tag tg{seq, step0 + static_cast<std::uint32_t>(i)};
    op_batch<2> round;
    if (!sending.empty()) round.add(f.send(from, tg, sending));
    if (!receiving.empty()) round.add(f.recv(t, tg, receiving));
    if (round.empty()) round.add(f.idle_round());
    if (auto res = co_await round; !res) co_return res;
    if (!mine.empty()) {
      if (!receiving.empty()) {
        op(tout.data(), mine.data(), mine.data(), receiving.size() / op.elem);  // received (+) own, as apply_parts
        u->unpack(block, p, t, work, mine.data());
      }
    } else if (data && forth.bytes()) {
      op.apply_parts(op.self, tout.data(), forth.parts().data(), forth.parts().size());
    }
  }
  if (work != buf.data()) u->transpose<false>(buf.data(), work, p, r);
  co_return result<void>{};
}

}  // namespace optcast::algorithms
