// The simulator's irregular counts (optcast/simulate.hpp): even, skewed or all on one rank.
#include <string>
#include <vector>

#include "optcast/simulate.hpp"

namespace optcast::sim {

// Per-rank element counts for the irregular collectives, adding up to `total`.
std::vector<std::size_t> distribute(std::uint64_t total, int p, const std::string& how) {
  std::vector<std::size_t> c(static_cast<std::size_t>(p));
  if (how == "one") {
    c.back() = total;
  } else if (how == "skewed") {  // rank j's share grows with j mod 4 (0 for every fourth)
    std::size_t weight = 0;
    for (int j = 0; j < p; ++j) weight += static_cast<std::size_t>(j % 4);
    std::size_t given = 0;
    for (int j = 0; j < p && weight; ++j) {
      c[static_cast<std::size_t>(j)] = total * static_cast<std::size_t>(j % 4) / weight;
      given += c[static_cast<std::size_t>(j)];
    }
    for (int j = p - 1; given < total; --j)
      if (j % 4) {
        ++c[static_cast<std::size_t>(j)];
        ++given;
      }
    if (!weight) c.back() = total;
  } else {
    for (int j = 0; j < p; ++j)
      c[static_cast<std::size_t>(j)] = total / static_cast<std::size_t>(p) + (static_cast<std::size_t>(j) < total % static_cast<std::size_t>(p) ? 1 : 0);
  }
  return c;
}

}  // namespace optcast::sim
