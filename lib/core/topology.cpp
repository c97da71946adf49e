// Where the ranks run (optcast/topology.hpp): hosts and rails.
#include <algorithm>
#include <map>

#include "optcast/fabric.hpp"

namespace optcast {

int topology::hosts() const noexcept {
  int h = 0;
  for (int x : host_of) h = std::max(h, x + 1);
  return h;
}

std::vector<int> topology::ranks_on(int host) const {
  std::vector<int> out;
  for (int r = 0; r < size(); ++r)
    if (host_of[static_cast<std::size_t>(r)] == host) out.push_back(r);
  return out;
}

int topology::local_rank(int r) const noexcept {
  int i = 0;
  const int h = host_of[static_cast<std::size_t>(r)];
  for (int q = 0; q < r; ++q) i += host_of[static_cast<std::size_t>(q)] == h;
  return i;
}

bool topology::blocked() const noexcept {
  const int h = hosts();
  if (h == 0 || size() % h != 0) return false;
  const int n = size() / h;
  for (int r = 0; r < size(); ++r)
    if (host_of[static_cast<std::size_t>(r)] != r / n) return false;
  return true;
}

topology topology::restricted(const std::vector<int>& ranks) const {
  std::vector<std::string> ids;
  ids.reserve(ranks.size());
  for (int r : ranks) ids.push_back(std::to_string(host_of[static_cast<std::size_t>(r)]));
  return of_identities(ids, rails);
}

topology topology::of_identities(const std::vector<std::string>& ids, int rails) {
  topology t;
  t.rails = std::max(1, rails);
  std::map<std::string, int> seen;
  for (const auto& id : ids) {
    auto [it, fresh] = seen.emplace(id, static_cast<int>(seen.size()));
    t.host_of.push_back(it->second);
  }
  return t;
}

std::string topology::describe() const {
  const int h = hosts();
  std::string s = std::to_string(h) + (h == 1 ? " host" : " hosts");
  if (h > 0 && size() % h == 0)
    s += " x " + std::to_string(size() / h) + (size() / h == 1 ? " rank" : " ranks");
  else
    s += ", " + std::to_string(size()) + " ranks";
  return s + ", " + std::to_string(rails) + (rails == 1 ? " rail" : " rails");
}

}  // namespace optcast
