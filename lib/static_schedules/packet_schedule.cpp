#include "static_schedules/packet_schedule.hpp"

#include <algorithm>
#include <stdexcept>

namespace optcast::packets {

schedule::schedule(std::string what, int processors, int packets, int k)
    : name(std::move(what)), n(processors), m(packets), ports(k) {
  if (n < 1 || m < 0 || k < 1) throw std::invalid_argument("packets::schedule: n >= 1, m >= 0 and k >= 1");
  sends.resize(static_cast<std::size_t>(n));
  recvs.resize(static_cast<std::size_t>(n));
}

void schedule::add(int round, int from, int to, int packet) {
  sends[static_cast<std::size_t>(from)].push_back({round, to, packet});
  recvs[static_cast<std::size_t>(to)].push_back({round, from, packet});
}

void schedule::finish() {
  rounds = 0;
  const auto by_round = [](const transfer& a, const transfer& b) {
    return a.round != b.round ? a.round < b.round : a.packet < b.packet;
  };
  for (auto* lists : {&sends, &recvs})
    for (auto& l : *lists) {
      std::sort(l.begin(), l.end(), by_round);
      if (!l.empty()) rounds = std::max(rounds, l.back().round + 1);
    }
}

std::string verify(const schedule& s) {
  const auto where = [&](int p, int j) { return static_cast<std::size_t>(p) * static_cast<std::size_t>(s.m) + static_cast<std::size_t>(j); };
  const std::string at = s.name + " (n = " + std::to_string(s.n) + ", m = " + std::to_string(s.m) + ", k = " + std::to_string(s.ports) + "): ";
  if (static_cast<int>(s.sends.size()) != s.n || static_cast<int>(s.recvs.size()) != s.n) return at + "lists for the wrong number of processors";
  std::vector<int> got(static_cast<std::size_t>(s.n) * static_cast<std::size_t>(s.m), -1), from(got.size(), -1);
  for (int p = 0; p < s.n; ++p) {
    const auto& l = s.recvs[static_cast<std::size_t>(p)];
    if (p == 0 && !l.empty()) return at + "the broadcaster receives";
    int last = -1, count = 0;
    for (const auto& t : l) {
      if (t.packet < 0 || t.packet >= s.m || t.peer < 0 || t.peer >= s.n || t.peer == p || t.round < 0)
        return at + "processor " + std::to_string(p) + " has a malformed receive";
      count = t.round == last ? count + 1 : 1;
      last = t.round;
      if (count > s.ports)
        return at + "processor " + std::to_string(p) + " receives " + std::to_string(count) + " messages in round " + std::to_string(t.round);
      auto& g = got[where(p, t.packet)];
      if (g >= 0)
        return at + "processor " + std::to_string(p) + " receives packet " + std::to_string(t.packet) + " twice (rounds " +
               std::to_string(g) + " and " + std::to_string(t.round) + ")";
      g = t.round;
      from[where(p, t.packet)] = t.peer;
    }
  }
  for (int p = 1; p < s.n; ++p)
    for (int j = 0; j < s.m; ++j)
      if (got[where(p, j)] < 0) return at + "processor " + std::to_string(p) + " never receives packet " + std::to_string(j);
  std::size_t sent = 0;
  for (int p = 0; p < s.n; ++p) {
    int last = -1, count = 0;
    for (const auto& t : s.sends[static_cast<std::size_t>(p)]) {
      ++sent;
      if (t.packet < 0 || t.packet >= s.m || t.peer < 1 || t.peer >= s.n || t.peer == p || t.round < 0)
        return at + "processor " + std::to_string(p) + " has a malformed send";
      count = t.round == last ? count + 1 : 1;
      last = t.round;
      if (count > s.ports)
        return at + "processor " + std::to_string(p) + " sends " + std::to_string(count) + " messages in round " + std::to_string(t.round);
      if (p != 0 && got[where(p, t.packet)] >= t.round)
        return at + "processor " + std::to_string(p) + " sends packet " + std::to_string(t.packet) + " in round " +
               std::to_string(t.round) + " before it has it (round " + std::to_string(got[where(p, t.packet)]) + ")";
      if (got[where(t.peer, t.packet)] != t.round || from[where(t.peer, t.packet)] != p)
        return at + "processor " + std::to_string(p) + "'s send of packet " + std::to_string(t.packet) + " to " +
               std::to_string(t.peer) + " in round " + std::to_string(t.round) + " is not received so";
    }
  }
  if (sent != static_cast<std::size_t>(s.n - 1) * static_cast<std::size_t>(s.m)) return at + "a receive without its send";
  return {};
}

}  // namespace optcast::packets
