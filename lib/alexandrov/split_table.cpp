#include "alexandrov/loggp.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

namespace optcast::loggp {

double cost::arrival(double bytes) const noexcept { return o + std::max(bytes - 1, 0.0) * G + L + o; }
double cost::next_send(double bytes) const noexcept { return std::max(o, std::max(bytes - 1, 0.0) * G + g); }

namespace {

constexpr int exhaustive_up_to = 4096;
constexpr int window = 256;

}  // namespace

split_table::split_table(int P, cost c, double b, bool binomial) {
  if (P < 1) throw std::invalid_argument("loggp::split_table: need P >= 1");
  if (!(b >= 0) || !(c.L >= 0) || !(c.o >= 0) || !(c.g >= 0) || !(c.G >= 0))
    throw std::invalid_argument("loggp::split_table: costs and sizes must be non-negative");
  t_.assign(static_cast<std::size_t>(P) + 1, 0);
  s_.assign(static_cast<std::size_t>(P) + 1, 0);
  const auto at = [&](int Q, int s) {
    const double bytes = s * b;
    return std::max(c.arrival(bytes) + t_[static_cast<std::size_t>(s)], c.next_send(bytes) + t_[static_cast<std::size_t>(Q - s)]);
  };
  for (int Q = 2; Q <= P; ++Q) {
    int lo = 1, hi = Q - 1;
    if (binomial) {
      lo = hi = Q / 2;
    } else if (Q > exhaustive_up_to) {
      // Past the crossing of arrival + t(s) (rising) and next_send + t(Q - s) (falling)
      // every term rises; the minimum lies at or below it, in practice just below.
      int a = 1, z = Q - 1;
      while (a < z) {
        const int mid = (a + z) / 2;
        const double bytes = mid * b;
        if (c.arrival(bytes) + t_[static_cast<std::size_t>(mid)] >= c.next_send(bytes) + t_[static_cast<std::size_t>(Q - mid)])
          z = mid;
        else
          a = mid + 1;
      }
      lo = std::max(1, a - window);
      hi = std::min(Q - 1, a + 1);
    }
    double best = std::numeric_limits<double>::infinity();
    int arg = lo;
    for (int s = lo; s <= hi; ++s)
      if (const double v = at(Q, s); v < best) {
        best = v;
        arg = s;
      }
    t_[static_cast<std::size_t>(Q)] = best;
    s_[static_cast<std::size_t>(Q)] = arg;
  }
}

std::shared_ptr<const split_table> split_table_for(int P, cost c, double b, bool binomial) {
  static std::mutex mu;
  static std::map<std::tuple<int, double, double, double, double, double, bool>, std::weak_ptr<const split_table>> cache;
  static std::shared_ptr<const split_table> recent;  // the last one outlives its callers
  std::lock_guard lock(mu);
  auto& slot = cache[{P, c.L, c.o, c.g, c.G, b, binomial}];
  if (auto p = slot.lock()) return p;
  auto p = std::make_shared<const split_table>(P, c, b, binomial);
  slot = p;
  recent = p;
  return p;
}

tree_node node_of(const split_table& table, int P, int v) {
  if (P < 1 || P > table.size() || v < 0 || v >= P) throw std::invalid_argument("loggp::node_of: v outside 0..P-1 or P beyond the table");
  // Walk down from the source: the group [a, a + size) splits off [a + size - s, a + size).
  tree_node out;
  int a = 0, size = P;
  while (a != v) {
    const int s = table.S(size);
    const int first = a + size - s;
    if (v >= first) {
      out.parent = a;
      a = first;
      size = s;
    } else {
      size -= s;
    }
  }
  out.size = size;
  for (int rest = size; rest > 1;) {
    const int s = table.S(rest);
    out.children.push_back({v + rest - s, s});
    rest -= s;
  }
  return out;
}

double short_message_time(int P, int k, double L, double g) { return P <= 1 ? 0 : (static_cast<double>(P - 1) * k - 1) * g + L; }

double long_message_time(int P, int k, double L, double g) {
  return P <= 1 ? 0 : (P - 2) * g + static_cast<double>(P - 1) * (k - 1) + L;
}

double binomial_time_lemma2(int P, int k, double L, double g) {
  if (P <= 1) return 0;
  int q = 0;
  while ((std::int64_t{1} << q) < P) ++q;
  return std::max(L, g) * (q - 1) + L + static_cast<double>(P - 1) * k - q;
}

}  // namespace optcast::loggp
