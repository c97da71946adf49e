// The barrier's check on a recorded run (causality.hpp).
#include "causality.hpp"

#include <algorithm>
#include <vector>

namespace optcast::sim {

bool heard_from_all(const report& rep, int p, std::string& why) {
  const auto P = static_cast<std::size_t>(p);
  std::vector<std::vector<bool>> knows(P, std::vector<bool>(P, false));
  for (std::size_t r = 0; r < P; ++r) knows[r][r] = true;
  struct event {
    double t;
    bool send;  // receives first at equal times
    std::size_t msg;
  };
  std::vector<event> ev;
  for (std::size_t i = 0; i < rep.log.size(); ++i) {
    ev.push_back({rep.log[i].posted, true, i});
    if (rep.log[i].received >= 0) ev.push_back({rep.log[i].received, false, i});
  }
  std::sort(ev.begin(), ev.end(), [](const event& a, const event& b) { return a.t != b.t ? a.t < b.t : a.send < b.send; });
  std::vector<std::vector<bool>> carried(rep.log.size());
  for (const auto& e : ev) {
    const auto& m = rep.log[e.msg];
    if (e.send) {
      carried[e.msg] = knows[static_cast<std::size_t>(m.src)];
    } else {
      auto& k = knows[static_cast<std::size_t>(m.dst)];
      for (std::size_t j = 0; j < P; ++j) k[j] = k[j] || carried[e.msg][j];
    }
  }
  for (std::size_t r = 0; r < P; ++r)
    for (std::size_t j = 0; j < P; ++j)
      if (!knows[r][j]) {
        why = "rank " + std::to_string(r) + " left the barrier without having heard from rank " + std::to_string(j);
        return false;
      }
  return true;
}

}  // namespace optcast::sim
