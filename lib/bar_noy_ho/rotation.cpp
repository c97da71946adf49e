// Bar-Noy and Ho, Section 4: the rotation algorithm, a chain of broadcasting black boxes.
#include <algorithm>
#include "runtime/plan_cache.hpp"
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "bar_noy_ho/multiport.hpp"

namespace optcast::multiport {

namespace {

std::int64_t power(int base, int e) {
  std::int64_t p = 1;
  for (int i = 0; i < e; ++i) p *= base;
  return p;
}

// Where batch b's message i (global message b k + i) comes from: the processor that
// sends it into a box in the box's round b.
using source_fn = std::function<int(int b, int i)>;

struct chain_state {
  packets::schedule* out;
  int k, m, batches;
  bool real(int b, int i) const { return b >= 0 && b < batches && b * k + i < m; }
  void send(int round, int from, int to, int b, int i) const {
    if (real(b, i)) out->add(round, from, to, b * k + i);
  }
};

// The nice and special boxes (4.1, 4.2). The processors form k groups U^i, one per
// message index i, each partitioned into sets S^i_0 .. S^i_{d-1}; S^i_j holds batch
// r - 1 - j's message i in round r. A group never loses or gains processors: S^i_0 is
// the member of S^i_{d-1} that took the input, and S^i_{j+1} is S^i_j with the members of
// S^i_{d-1} it sent to. S^i_{d-1} sends its message to every processor outside itself
// (but, in a special box, the k - a early receivers E^i, which S^i_0 served d - 1 rounds
// before). Returns, per (batch, i), who sends the output.
std::vector<int> run_rotating(const chain_state& cs, const box& bx, int base, int offset, const source_fn& src) {
  const int k = cs.k, d = bx.d;
  const bool nice = bx.kind == box_kind::nice;
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(d));
  for (int j = 0; j < d; ++j) sizes[static_cast<std::size_t>(j)] = nice ? power(k + 1, j) : (j == 0 ? 1 : bx.a * power(k + 1, j - 1));
  std::int64_t g = 0;
  for (auto s : sizes) g += s;
  if (g * k != bx.size) throw std::logic_error("multiport: box sizes do not add up");
  const int group = static_cast<int>(g);

  std::vector<std::vector<std::vector<int>>> S(static_cast<std::size_t>(k));
  for (int i = 0; i < k; ++i) {
    int next = base + i * group;
    S[static_cast<std::size_t>(i)].resize(static_cast<std::size_t>(d));
    for (int j = 0; j < d; ++j)
      for (std::int64_t x = 0; x < sizes[static_cast<std::size_t>(j)]; ++x) S[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)].push_back(next++);
  }
  // E^i: k - a processors of the other groups, taken in order from group i + 1 on.
  std::vector<std::vector<int>> early(static_cast<std::size_t>(k));
  std::vector<std::vector<char>> is_early(static_cast<std::size_t>(k), std::vector<char>(static_cast<std::size_t>(bx.size), 0));
  if (!nice)
    for (int i = 0; i < k; ++i)
      for (int x = 0; static_cast<int>(early[static_cast<std::size_t>(i)].size()) < k - bx.a; ++x) {
        const int p = base + (group * (i + 1) + x) % bx.size;
        early[static_cast<std::size_t>(i)].push_back(p);
        is_early[static_cast<std::size_t>(i)][static_cast<std::size_t>(p - base)] = 1;
      }

  std::vector<int> output(static_cast<std::size_t>(cs.batches) * static_cast<std::size_t>(k), -1);
  std::vector<char> in_top(static_cast<std::size_t>(bx.size));
  for (int r = 0; r < cs.batches + d; ++r) {
    const int round = offset + r;
    for (int i = 0; i < k; ++i) {
      auto& s = S[static_cast<std::size_t>(i)];
      const auto& top = s[static_cast<std::size_t>(d - 1)];
      std::vector<std::vector<int>> next(static_cast<std::size_t>(d));
      // The input goes to the first member of S^i_{d-1}; it is S^i_0 next round.
      if (cs.real(r, i)) cs.out->add(round, src(r, i), top[0], r * k + i);
      next[0].push_back(top[0]);
      std::size_t cursor = 1;
      for (int j = 0; j < d - 1; ++j) {
        const int b = r - 1 - j;
        auto& grown = next[static_cast<std::size_t>(j + 1)];
        for (int u : s[static_cast<std::size_t>(j)]) {
          grown.push_back(u);
          // Into S^i_{d-1}: k each, but a - 1 from a special box's S^i_0, whose other
          // copies are the output and the early ones.
          const int into = !nice && j == 0 ? bx.a - 1 : k;
          for (int x = 0; x < into; ++x) {
            const int v = top.at(cursor++);
            cs.send(round, u, v, b, i);
            grown.push_back(v);
          }
          if (!nice && j == 0) {
            for (int e : early[static_cast<std::size_t>(i)]) cs.send(round, u, e, b, i);
            if (b >= 0 && b < cs.batches) output[static_cast<std::size_t>(b * k + i)] = u;
          }
        }
      }
      if (cursor != top.size()) throw std::logic_error("multiport: S^i_{d-1} not taken up exactly");
      // S^i_{d-1} sends batch r - d's message to everyone else, k targets a member (in a
      // nice box the output is one of them, the first member's first).
      const int b = r - d;
      std::fill(in_top.begin(), in_top.end(), 0);
      for (int v : top) in_top[static_cast<std::size_t>(v - base)] = 1;
      std::size_t slot = 0;
      if (nice) {
        if (b >= 0 && b < cs.batches) output[static_cast<std::size_t>(b * k + i)] = top[0];
        slot = 1;
      }
      for (int v = base; v < base + bx.size; ++v) {
        if (in_top[static_cast<std::size_t>(v - base)] || (!nice && is_early[static_cast<std::size_t>(i)][static_cast<std::size_t>(v - base)])) continue;
        cs.send(round, top.at(slot / static_cast<std::size_t>(k)), v, b, i);
        ++slot;
      }
      if (slot != top.size() * static_cast<std::size_t>(k)) throw std::logic_error("multiport: S^i_{d-1} does not send k each");
      s = std::move(next);
    }
  }
  return output;
}

bool flat_small(int x, int k) { return x >= 2 && x * (k / (x - 1)) >= k; }

// The small box (4.3). With x floor(k/(x-1)) >= k, height-2 trees: message i goes to
// processor i mod x, which sends it to the x - 1 others next round (at most
// ceil(k/x)(x - 1) <= k sends, and k receives, a round). Otherwise the k-tree algorithm
// among the box and its sender, tree i's top fed by the sender of message i.
void run_small(const chain_state& cs, const box& bx, int base, int offset, const source_fn& src) {
  const int k = cs.k, x = bx.size;
  if (flat_small(x, k)) {
    for (int b = 0; b < cs.batches; ++b)
      for (int i = 0; i < k; ++i) {
        const int p = base + i % x;
        cs.send(offset + b, src(b, i), p, b, i);
        for (int v = base; v < base + x; ++v)
          if (v != p) cs.send(offset + b + 1, p, v, b, i);
      }
    return;
  }
  const auto kt = ktree(x + 1, cs.batches * k, k);
  // kt: processor 0 sends message b k + i in round b to the top of tree i.
  for (int p = 1; p <= x; ++p)
    for (const auto& t : kt.recvs[static_cast<std::size_t>(p)]) {
      const int b = t.packet / k, i = t.packet % k;
      const int from = t.peer == 0 ? src(b, i) : base + t.peer - 1;
      cs.send(offset + t.round, from, base + p - 1, b, i);
    }
}

}  // namespace

int box::t(int k) const {
  if (kind != box_kind::small) return d;
  if (size <= 1) return 0;
  if (flat_small(size, k)) return 1;
  return ktree_height(size + 1, k) - 1;
}

int chain_time(const std::vector<box>& chain, int k) {
  int before = 0, most = 0;
  for (const auto& b : chain) {
    most = std::max(most, before + b.t(k));
    before += b.delay();
  }
  return most;
}

std::vector<box> best_chain(int n, int k) {
  if (n < 1 || k < 2) throw std::invalid_argument("multiport::best_chain: need n >= 1 and k >= 2");
  const int N = n - 1;
  std::vector<box> kinds;  // every nice and special box that fits
  for (int d = 1; power(k + 1, d) - 1 <= N; ++d) kinds.push_back({box_kind::nice, static_cast<int>(power(k + 1, d) - 1), d, 0});
  for (int d = 2; power(k + 1, d - 1) + k - 1 <= N; ++d)
    for (int a = 1; a <= k && a * power(k + 1, d - 1) + k - a <= N; ++a)
      kinds.push_back({box_kind::special, static_cast<int>(a * power(k + 1, d - 1) + k - a), d, a});
  // best[r]: the least time of a chain for r processors; first[r]: its first box.
  constexpr int none = 1 << 29;
  std::vector<int> best(static_cast<std::size_t>(N) + 1, none);
  std::vector<box> first(static_cast<std::size_t>(N) + 1, box{box_kind::small, 0});
  best[0] = 0;
  for (int r = 1; r <= N; ++r) {
    auto& b = best[static_cast<std::size_t>(r)];
    if (r < 2 * k) {
      first[static_cast<std::size_t>(r)] = {box_kind::small, r};
      b = first[static_cast<std::size_t>(r)].t(k);
    }
    for (const auto& bx : kinds) {
      if (bx.size > r) continue;
      const int t = bx.size == r ? bx.t(k) : std::max(bx.t(k), bx.delay() + best[static_cast<std::size_t>(r - bx.size)]);
      if (t < b) {
        b = t;
        first[static_cast<std::size_t>(r)] = bx;
      }
    }
  }
  std::vector<box> out;
  for (int r = N; r > 0; r -= first[static_cast<std::size_t>(r)].size) out.push_back(first[static_cast<std::size_t>(r)]);
  return out;
}

std::vector<box> decompose(int n, int k) {
  if (n < 1 || k < 2) throw std::invalid_argument("multiport::decompose: need n >= 1 and k >= 2");
  std::vector<box> out;
  std::int64_t rem = n - 1;
  while (rem > 0) {
    int d = 0;
    while (power(k + 1, d) - 1 < rem) ++d;
    if (power(k + 1, d) - 1 == rem && (out.empty() || d > 1)) {
      out.push_back({box_kind::nice, static_cast<int>(rem), d, 0});
      break;
    }
    if (rem < 2 * k) {
      out.push_back({box_kind::small, static_cast<int>(rem), 0, 0});
      break;
    }
    // The largest (d, a), lexicographically, with a (k+1)^(d-1) + k - a <= rem (d >= 2
    // here, as rem >= 2k = the size of (2, 1)).
    int bd = 2;
    while (power(k + 1, bd) + k - 1 <= rem) ++bd;
    int ba = 1;
    while (ba < k && (ba + 1) * power(k + 1, bd - 1) + k - ba - 1 <= rem) ++ba;
    const auto size = ba * power(k + 1, bd - 1) + k - ba;
    out.push_back({box_kind::special, static_cast<int>(size), bd, ba});
    rem -= size;
  }
  return out;
}

packets::schedule rotation(int n, int m, int k) {
  if (n < 1 || m < 0 || k < 2)
    throw std::invalid_argument("multiport::rotation: need n >= 1, m >= 0 and k >= 2 ports, got n " + std::to_string(n) +
                                ", m " + std::to_string(m) + ", k " + std::to_string(k));
  packets::schedule out("rotation", n, m, k);
  const chain_state cs{&out, k, m, (m + k - 1) / k};
  source_fn src = [](int, int) { return 0; };  // the broadcaster, BBB(1, 0, 0)
  std::vector<int> outputs;
  int base = 1, offset = 0;
  for (const auto& bx : best_chain(n, k)) {
    if (bx.kind == box_kind::small) {
      run_small(cs, bx, base, offset, src);
      break;
    }
    outputs = run_rotating(cs, bx, base, offset, src);
    src = [&outputs, k](int b, int i) { return outputs.at(static_cast<std::size_t>(b * k + i)); };
    base += bx.size;
    offset += bx.delay();
  }
  out.finish();
  return out;
}

}  // namespace optcast::multiport

namespace optcast::multiport {

namespace {

template <class Make>
std::shared_ptr<const packets::schedule> cached(const char* which, Make make, int n, int m, int k) {
  static detail::plan_cache<std::tuple<std::string, int, int, int>, packets::schedule> cache;
  return cache.get({which, n, m, k}, [&] { return make(n, m, k); });
}

}  // namespace

std::shared_ptr<const packets::schedule> ktree_for(int n, int m, int k) { return cached("ktree", ktree, n, m, k); }
std::shared_ptr<const packets::schedule> rotation_for(int n, int m, int k) { return cached("rotation", rotation, n, m, k); }

}  // namespace optcast::multiport
