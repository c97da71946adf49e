// Alexandrov et al. 4.7, Figures 9-10: scatter plans that split item sets.
#include <algorithm>
#include <limits>
#include <map>
#include <queue>
#include <memory>
#include <mutex>
#include <tuple>
#include <stdexcept>

#include "alexandrov/loggp.hpp"

namespace optcast::loggp {

std::size_t scatter_message::bytes() const noexcept {
  std::size_t b = 0;
  for (const auto& pc : pieces) b += pc.bytes;
  return b;
}

namespace {

// A plan as routes: every piece with the processors it passes, the source first and
// its destination last; the tree's children order fixes the order of the links.
struct route {
  piece pc;
  std::vector<int> path;
};

struct routed {
  int P;
  std::vector<std::vector<int>> link_order;  // per processor: the tree children, then detour targets
  std::vector<route> routes;
};

std::vector<int> tree_path(const split_table& table, int P, int d) {
  std::vector<int> up{d};
  while (up.back() != 0) up.push_back(node_of(table, P, up.back()).parent);
  return {up.rbegin(), up.rend()};
}

scatter_plan materialise(const routed& r) {
  scatter_plan plan;
  plan.P = r.P;
  plan.sends.resize(static_cast<std::size_t>(r.P));
  std::vector<std::map<int, std::size_t>> at(static_cast<std::size_t>(r.P));  // link target -> index
  for (int v = 0; v < r.P; ++v)
    for (int to : r.link_order[static_cast<std::size_t>(v)]) {
      at[static_cast<std::size_t>(v)][to] = plan.sends[static_cast<std::size_t>(v)].size();
      plan.sends[static_cast<std::size_t>(v)].push_back({to, {}});
    }
  for (const auto& rt : r.routes)
    for (std::size_t h = 0; h + 1 < rt.path.size(); ++h) {
      const int a = rt.path[h], b = rt.path[h + 1];
      plan.sends[static_cast<std::size_t>(a)][at[static_cast<std::size_t>(a)].at(b)].pieces.push_back(rt.pc);
    }
  // A link no piece uses (a set moved away entirely) is dropped.
  for (auto& s : plan.sends) s.erase(std::remove_if(s.begin(), s.end(), [](const auto& m) { return m.pieces.empty(); }), s.end());
  return plan;
}

routed tree_routes(const split_table& table, int P, const std::vector<std::size_t>& segment) {
  if (static_cast<int>(segment.size()) != P) throw std::invalid_argument("loggp: one segment size per processor");
  routed r{P, std::vector<std::vector<int>>(static_cast<std::size_t>(P)), {}};
  for (int v = 0; v < P; ++v) {
    for (const auto& ch : node_of(table, P, v).children) r.link_order[static_cast<std::size_t>(v)].push_back(ch.first);
    if (v && segment[static_cast<std::size_t>(v)]) r.routes.push_back({{v, 0, segment[static_cast<std::size_t>(v)]}, tree_path(table, P, v)});
  }
  return r;
}

// Per processor, when each piece destined past it (or to it) is there, and the finish.
struct timing {
  double finish = 0;
  std::vector<double> done;   // per processor: its last arrival
  std::vector<double> free;   // per processor: when its channel is free after its sends
};

timing time_of(const scatter_plan& plan, cost c) {
  // The simulator's LogGP rules (net/sim.hpp), one port: sends leave each processor one
  // after another, each once its pieces are in; at a receiver the bytes of successive
  // messages arrive no closer than g apart, and receiving overheads follow one another.
  // Sends are fixed in order of their start, so a receiver sees them in arrival order.
  const auto P = static_cast<std::size_t>(plan.P);
  std::map<std::tuple<int, int, std::size_t>, double> has;  // (processor, dest, from) -> arrival
  timing t;
  t.done.assign(P, 0);
  t.free.assign(P, 0);
  std::vector<std::size_t> next(P, 0);
  std::vector<double> window_end(P, -1), overhead_end(P, 0);
  std::vector<char> received(P, 0), queued(P, 0);  // queued: v's next send is in `ready`, its start final
  using item = std::pair<double, int>;
  std::priority_queue<item, std::vector<item>, std::greater<>> ready;
  const auto consider = [&](std::size_t v) {
    if (queued[v] || next[v] >= plan.sends[v].size()) return;
    double at = t.free[v];
    for (const auto& pc : plan.sends[v][next[v]].pieces) {
      if (v == 0) break;
      auto it = has.find({static_cast<int>(v), pc.dest, pc.from});
      if (it == has.end()) return;
      at = std::max(at, it->second);
    }
    ready.emplace(at, static_cast<int>(v));
    queued[v] = 1;
  };
  consider(0);
  while (!ready.empty()) {
    const auto [start, vi] = ready.top();
    ready.pop();
    const auto v = static_cast<std::size_t>(vi);
    queued[v] = 0;
    const auto& m = plan.sends[v][next[v]];
    const auto bytes = static_cast<double>(m.bytes());
    const auto u = static_cast<std::size_t>(m.to);
    const double span = std::max(bytes - 1, 0.0) * c.G;
    double first = start + c.o + c.L;
    if (received[u]) first = std::max(first, window_end[u] + c.g);
    window_end[u] = first + span;
    received[u] = 1;
    const double arrive = std::max(window_end[u], overhead_end[u]) + c.o;
    overhead_end[u] = arrive;
    t.free[v] = start + c.next_send(bytes);
    for (const auto& pc : m.pieces) has[{m.to, pc.dest, pc.from}] = arrive;
    t.done[u] = std::max(t.done[u], arrive);
    ++next[v];
    consider(v);
    consider(u);
  }
  for (std::size_t v = 0; v < P; ++v) {
    if (next[v] != plan.sends[v].size()) throw std::logic_error("loggp::evaluate: a piece never reaches its sender");
    t.finish = std::max({t.finish, t.done[v], t.free[v]});
  }
  return t;
}

}  // namespace

std::shared_ptr<const scatter_plan> split_sets_plan_for(const split_table& table, int P, const std::vector<std::size_t>& segment,
                                                        cost c) {
  static std::mutex mu;
  static std::map<std::tuple<int, double, double, double, double, std::vector<std::size_t>>, std::weak_ptr<const scatter_plan>> cache;
  static std::shared_ptr<const scatter_plan> recent;  // the last one outlives its callers
  std::lock_guard lock(mu);
  auto& slot = cache[{P, c.L, c.o, c.g, c.G, segment}];
  if (auto p = slot.lock()) return p;
  auto p = std::make_shared<const scatter_plan>(split_sets_plan(table, P, segment, c));
  slot = p;
  recent = p;
  return p;
}

scatter_plan tree_plan(const split_table& table, int P, const std::vector<std::size_t>& segment) {
  return materialise(tree_routes(table, P, segment));
}

double evaluate(const scatter_plan& plan, cost c) { return time_of(plan, c).finish; }

scatter_plan split_sets_plan(const split_table& table, int P, const std::vector<std::size_t>& segment, cost c) {
  auto r = tree_routes(table, P, segment);
  auto best_plan = materialise(r);
  auto now = time_of(best_plan, c);
  best_plan.time = now.finish;
  for (int round = 0; round < std::min(4 * P, 64); ++round) {
    // The destination whose data arrives last, and the tree route of its set.
    const int d = static_cast<int>(std::max_element(now.done.begin(), now.done.end()) - now.done.begin());
    if (d == 0 || now.done[static_cast<std::size_t>(d)] < now.finish) break;  // a sender's gap ends it
    auto main = std::find_if(r.routes.begin(), r.routes.end(), [&](const route& rt) { return rt.pc.dest == d && rt.pc.from == 0; });
    if (main == r.routes.end() || main->pc.bytes < 2) break;
    // Via processors outside d's subtree (d's own sends feed it), the earliest free first.
    std::vector<int> via;
    for (int u = 1; u < P; ++u) {
      if (u == d) continue;
      const auto path = tree_path(table, P, u);
      if (std::find(path.begin(), path.end(), d) == path.end()) via.push_back(u);
    }
    std::sort(via.begin(), via.end(), [&](int a, int b) { return std::max(now.done[static_cast<std::size_t>(a)], now.free[static_cast<std::size_t>(a)]) < std::max(now.done[static_cast<std::size_t>(b)], now.free[static_cast<std::size_t>(b)]); });
    if (via.size() > 16) via.resize(16);
    const std::size_t whole = main->pc.bytes;
    std::vector<std::size_t> moves;
    for (std::size_t x = 1; x < whole; x += std::max<std::size_t>(1, whole / 64)) moves.push_back(x);
    double best = now.finish;
    routed chosen;
    for (int u : via)
      for (std::size_t x : moves) {
        routed cand = r;
        auto& m = *std::find_if(cand.routes.begin(), cand.routes.end(), [&](const route& rt) { return rt.pc.dest == d && rt.pc.from == 0; });
        m.pc.bytes = whole - x;
        auto path = tree_path(table, P, u);
        path.push_back(d);
        cand.routes.push_back({{d, whole - x, x}, path});
        auto& order = cand.link_order[static_cast<std::size_t>(u)];
        if (std::find(order.begin(), order.end(), d) == order.end()) order.push_back(d);
        const double t = evaluate(materialise(cand), c);
        if (t < best) {
          best = t;
          chosen = std::move(cand);
        }
      }
    if (best >= now.finish) break;
    r = std::move(chosen);
    best_plan = materialise(r);
    now = time_of(best_plan, c);
    best_plan.time = now.finish;
  }
  return best_plan;
}

}  // namespace optcast::loggp
