#include "traff/circulant.hpp"
#include "runtime/plan_cache.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include <bit>
#include <cassert>

namespace optcast::circulant {

int ceil_log2(std::int64_t p) noexcept {
  assert(p >= 1);
  return p <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<std::uint64_t>(p - 1)));
}

skips::skips(int p) : p_(p), q_(ceil_log2(p)) {
  assert(p >= 1);
  // Algorithm 2: repeated halving, rounding up.
  skip_[static_cast<unsigned>(q_)] = p;
  for (int k = q_; k > 0; --k) skip_[k - 1] = skip_[k] - skip_[k] / 2;
  skip_[static_cast<unsigned>(q_ + 1)] = 2 * static_cast<std::int64_t>(p);
}

namespace {

// Algorithm 5's doubly linked list of remaining skip indices, in decreasing order, is
// only ever unlinked from and walked downwards: a bit mask of the remaining indices does
// the same (next(e) = the highest remaining index below e) without initialising a list.
struct allblocks_search {
  const std::int64_t* skip;  // skip[0..q+1]
  int stop;                  // the search ends once recv[0..stop-1] are found (stop <= q)
  int q;
  int* recv;
  std::int64_t r;  // p + r: Observation 2 keeps every intermediate processor positive

  static int next(std::uint64_t remaining, int e) noexcept {
    const std::uint64_t below = remaining & ((std::uint64_t{1} << e) - 1);
    return below ? static_cast<int>(std::bit_width(below)) - 1 : -1;
  }
  // The list (bit e: skip index e still in it) travels with the blocks found so far, in
  // registers: kept in the object, every unlink and step through it went through memory.
  struct state {
    int k;
    std::uint64_t remaining;
  };

  // Algorithm 4, with the recursive call continuing at next[e] (ERRATA.md): the same
  // schedules, and Lemma 6's bound on the loop holds. Stores blocks (index - q): the
  // index q, the baseblock's, is only ever found by the top frame (find_recv).
  state run(std::int64_t rp, std::int64_t sbound, int e, state st) const {
    int k = st.k;
    std::uint64_t rem = st.remaining;
    while (e != -1) {
      if (k == stop) return {k, rem};
      const std::int64_t cand = rp + skip[e];
      if (cand <= r - skip[k] && cand < sbound) {
        if (cand <= r - skip[k + 1]) {
          const state in = run(cand, sbound, next(rem, e), {k, rem});
          k = in.k;
          rem = in.remaining;
        }
        if (k == stop || rp > r - skip[k + 1]) return {k, rem};
        sbound = cand;  // canonical skip sequence found; the next must end below it
        recv[static_cast<unsigned>(k)] = e - q;
        ++k;
        rem &= ~(std::uint64_t{1} << e);
      }
      e = next(rem, e);
    }
    return {k, rem};
  }
};

}  // namespace

namespace {

// r's canonical skip sequence as Algorithm 3 walks it (greedily from the largest skip):
// the baseblock b and the indices taken above it, highest first.
struct canonical_walk {
  int b = 0;
  int m = 0;  // indices in above[0 .. m-1]
  std::array<int, max_q> above;  // NOLINT: entries past m are never read
};

canonical_walk walk(const skips& s, int r) noexcept {
  canonical_walk w;
  std::int64_t rr = 0;
  for (int k = s.q() - 1; k >= 0; --k) {
    const std::int64_t c = rr + s[k];
    if (c == r) {
      w.b = k;
      return w;
    }
    // Without a branch: whether a skip is taken is a coin toss to the predictor.
    const bool taken = c < r;
    w.above[static_cast<unsigned>(w.m)] = k;
    w.m += taken;
    rr = taken ? c : rr;
  }
  w.b = s.q();
  return w;
}

}  // namespace

int baseblock(const skips& s, int r) noexcept { return walk(s, r).b; }

namespace {

// The first `stop` entries of r's receive schedule, as Algorithms 4-5 find them in
// order, shifted as Algorithm 5 ends: index e is block e - q, except that the round in
// which r hears from the root brings its baseblock (Condition 3).
//
// Until it finds its first block, ALLBLOCKS (called for p + r) only descends: each
// frame takes the largest remaining skip that keeps it below p + r - 1 and recurses.
// That descent is r's canonical skip sequence after skip[q] = p (a skip is taken iff the
// walk's sum stays below r; the one reaching r exactly is the baseblock, excluded from
// the list), and it sets nothing: no block found, the bound still 2p. So the search is
// begun in the deepest frame, prefix p + r - skip[b], and the frames above it are
// resumed one by one, from the walk, where each one's recursive call returns: the same
// steps as the whole search less its descent, which Algorithm 3's walk has already paid
// for. A send-schedule violation, which needs only the first few blocks of the
// to-processor, then costs one walk and a short search near the bottom.
void find_recv(const skips& s, int r, const canonical_walk& w, int* recv, int stop) noexcept {
  const int q = s.q(), b = w.b;
  const std::uint64_t all = ((std::uint64_t{1} << (q + 1)) - 1) & ~(std::uint64_t{1} << b);
  const std::int64_t target = static_cast<std::int64_t>(s.p()) + r;
  // The schedule holds every index but b once (Condition 1): the last one is the index
  // left in the list, so the search ends a block early and skips its last stretch.
  const bool last_by_elimination = stop == q;
  if (last_by_elimination) --stop;
  const auto take_last = [&](std::uint64_t remaining) {
    if (!last_by_elimination) return;
    assert(std::popcount(remaining) == 1);
    const int e = std::countr_zero(remaining);
    recv[static_cast<unsigned>(q - 1)] = e == q ? b : e - q;
  };
  const allblocks_search search{s.data(), stop, q, recv, target};
  if (r == 0) {  // no canonical sequence: the whole search (from skip index q - 1, as q is excluded)
    const auto found = search.run(0, 2 * static_cast<std::int64_t>(s.p()), q, {0, all});
    assert(found.k == stop);
    take_last(found.remaining);
    return;
  }
  std::int64_t rp = target - s[b];
  allblocks_search::state st{0, all};
  // The deepest frame exists only if ALLBLOCKS recursed into it (skip[b] >= 2); the
  // skips between its own index and b overshoot r, so it starts below b.
  if (b > 0) st = search.run(rp, 2 * static_cast<std::int64_t>(s.p()), b - 1, st);
  int& k = st.k;
  for (int j = w.m - 1; j >= -1 && k < stop; --j) {
    const int e = j >= 0 ? w.above[static_cast<unsigned>(j)] : q;  // the top frame took skip[q]
    rp -= s[e];  // the frame that took skip[e], its recursive call just returned k
    if (rp > target - s[k + 1]) continue;  // it returns too
    recv[static_cast<unsigned>(k++)] = e == q ? b : e - q;  // from the root: the baseblock
    st.remaining &= ~(std::uint64_t{1} << e);
    st = search.run(rp, rp + s[e], allblocks_search::next(st.remaining, e), st);
  }
  assert(k == stop);
  take_last(st.remaining);
}

// Both schedules with r's canonical walk done once (schedule_for).
void recv_with(const skips& s, int r, const canonical_walk& w, std::span<int> recv) noexcept {
  const int q = s.q();
  assert(static_cast<int>(recv.size()) >= q);
  if (q == 0) return;
  find_recv(s, r, w, recv.data(), q);
}

void send_with(const skips& s, int r, int b, std::span<int> send, int* violations) noexcept {
  const int q = s.q();
  assert(static_cast<int>(send.size()) >= q);
  if (violations) *violations = 0;
  if (q == 0) return;
  if (r == 0) {
    for (int k = 0; k < q; ++k) send[static_cast<unsigned>(k)] = k;
    return;
  }
  // The block the to-processor misses is only known from its receive schedule: a
  // "violation" of Theorem 3, O(q) each, at most four per rank.
  auto from_receiver = [&](int k) {
    std::array<int, max_q> block;  // NOLINT: find_recv fills the entries read
    const int to = s.to(r, k);
    const auto tw = walk(s, to);
    find_recv(s, to, tw, block.data(), k + 1);  // only up to entry k
    if (violations) ++*violations;
    return block[static_cast<unsigned>(k)];
  };
  std::int64_t rv = r, e = s.p();  // virtual processor r' and the invariant bound r' < e
  int c = b;
  for (int k = q - 1; k >= 1; --k) {
    auto& out = send[static_cast<unsigned>(k)];
    if (rv < s[k]) {  // lower part: send again what was sent in round k + 1
      if (rv + s[k] < e || e < s[k - 1] || (k == 1 && b > 0))
        out = c;
      else
        out = from_receiver(k);
      if (e > s[k]) e = s[k];
    } else {  // upper part: block k - q, as for the large processors of Observation 6
      c = k - q;
      if (k == 1 || rv > s[k] || e - s[k] < s[k - 1])
        out = c;
      else if (rv + s[k] > e)
        out = from_receiver(k);
      else
        out = c;
      rv -= s[k];
      e -= s[k];
    }
  }
  send[0] = b - q;
}

}  // namespace

void recv_schedule(const skips& s, int r, std::span<int> recv) noexcept {
  if (s.q()) recv_with(s, r, walk(s, r), recv);
}

void send_schedule(const skips& s, int r, std::span<int> send, int* violations) noexcept {
  send_with(s, r, s.q() ? baseblock(s, r) : 0, send, violations);
}

namespace {

// Zeroes a whole schedule array with 16-byte stores: a loop or std::fill becomes a call
// to memset or a rep stos, which cost a tenth of the time of a whole schedule near
// p = 2^10 (GCC and Clang both have the vector extension).
void zero(std::array<int, max_q>& a) noexcept {
  using v4 = int __attribute__((vector_size(16)));
  constexpr v4 z{};
  for (std::size_t i = 0; i + 4 <= a.size(); i += 4) std::memcpy(&a[i], &z, sizeof z);
  for (std::size_t i = a.size() / 4 * 4; i < a.size(); ++i) a[i] = 0;
}

}  // namespace

rank_schedule schedule_for(const skips& s, int r) noexcept {
  rank_schedule out;
  out.q = s.q();
  zero(out.recv);
  zero(out.send);
  if (out.q == 0) return out;
  const auto w = walk(s, r);
  out.baseblock = w.b;
  recv_with(s, r, w, out.recv);
  send_with(s, r, out.baseblock, out.send, nullptr);
  return out;
}

broadcast_plan::broadcast_plan(const skips& s, int r, int n) noexcept
    : s_(&s), r_(r), n_(n), x_(0), sch_(schedule_for(s, r)) {
  assert(n >= 1);
  const int q = s.q();
  if (q == 0) return;
  // x dummy rounds make the last real round end a phase (Theorem 1); they are done
  // "virtually" by shifting the first x entries one phase ahead.
  x_ = (q - (n - 1) % q) % q;
  for (int i = 0; i < q; ++i) {
    sch_.recv[i] -= x_;
    sch_.send[i] -= x_;
    if (i < x_) {
      sch_.recv[i] += q;
      sch_.send[i] += q;
    }
  }
}

broadcast_plan::step broadcast_plan::round(int i) noexcept {
  const int q = s_->q();
  const int k = i % q;
  step st;
  st.to = s_->to(r_, k);
  st.from = s_->from(r_, k);
  const int sb = sch_.send[k], rb = sch_.recv[k];
  if (sb >= 0 && st.to != 0) st.send_block = sb < n_ ? sb : n_ - 1;
  if (rb >= 0 && r_ != 0) st.recv_block = rb < n_ ? rb : n_ - 1;
  sch_.send[k] += q;
  sch_.recv[k] += q;
  return st;
}

broadcast_plan::step broadcast_plan::at(int i) const noexcept {
  const int q = s_->q();
  const int k = i % q;
  // round() hands out entry k first in round k (or k + q when k < x, a virtual round)
  // and adds q per phase after that.
  const int first = k < x_ ? k + q : k;
  const int phases = (i - first) / q;
  step st;
  st.to = s_->to(r_, k);
  st.from = s_->from(r_, k);
  const int sb = sch_.send[k] + phases * q, rb = sch_.recv[k] + phases * q;
  if (sb >= 0 && st.to != 0) st.send_block = sb < n_ ? sb : n_ - 1;
  if (rb >= 0 && r_ != 0) st.recv_block = rb < n_ ? rb : n_ - 1;
  return st;
}

schedule_table::schedule_table(int p) : s_(p), t_(static_cast<std::size_t>(s_.q()) * static_cast<std::size_t>(p)) {
  std::array<int, max_q> one{};
  for (int v = 0; v < p; ++v) {
    recv_schedule(s_, v, std::span(one).first(static_cast<std::size_t>(s_.q())));
    for (int k = 0; k < s_.q(); ++k)
      t_[static_cast<std::size_t>(k) * static_cast<std::size_t>(p) + static_cast<std::size_t>(v)] = one[static_cast<std::size_t>(k)];
  }
  if (t_.empty()) return;
  const auto [lo, hi] = std::minmax_element(t_.begin(), t_.end());
  lo_ = *lo;
  width_ = *hi - *lo + 1;
  hist_.assign(static_cast<std::size_t>(s_.q()) * static_cast<std::size_t>(width_), 0);
  for (int k = 0; k < s_.q(); ++k)
    for (int v = 1; v < p; ++v) ++hist_[static_cast<std::size_t>(k) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(row(k)[v] - lo_)];
}

std::shared_ptr<const schedule_table> table_for(int p) {
  static detail::plan_cache<int, schedule_table> cache;
  return cache.get(p, [&] { return schedule_table(p); });
}

}  // namespace optcast::circulant
