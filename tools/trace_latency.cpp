// optcast trace latency MERGED.json: a merged trace taken apart message by message, to find
// where a small collective's microseconds go. For each message (a send's flow to its
// receive): send, its post to the bytes written; way, written to the receiver having it
// (wire, the receiver's wake-up, its read); held, how long it waited for its receive to be
// posted (0 when the receive was there first); and per rank the turn, a receive's end to
// that rank's next send post in the same call (the round loop's own time). Medians and
// 10th/90th percentiles per collective, and each collective's call from its first rank
// in to its last out.
#include "tools.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

namespace optcast::tools {

namespace {

using json = nlohmann::json;

struct slice {
  int rank = 0;
  double ts = 0, end = 0;
  int peer = 0;
  std::uint64_t seq = 0, step = 0;
};

struct spread {
  std::size_t n = 0;
  double p10 = 0, p50 = 0, p90 = 0;
};

spread spread_of(std::vector<double> v) {
  spread s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<std::size_t>(std::lround(q * static_cast<double>(v.size() - 1)))]; };
  s.p10 = at(0.1), s.p50 = at(0.5), s.p90 = at(0.9);
  return s;
}

const char* const parts[] = {"send", "way", "held", "turn", "call"};

}  // namespace

int trace_latency(const std::string& path, bool as_json) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "optcast trace latency: cannot read %s\n", path.c_str());
    return 2;
  }
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optcast trace latency: %s: not JSON (%s)\n", path.c_str(), e.what());
    return 2;
  }
  if (!j.contains("traceEvents") || !j["traceEvents"].is_array() || !j.contains("optcast") || !j["optcast"].contains("ranks")) {
    std::fprintf(stderr, "optcast trace latency: %s is not a merged trace (optcast trace merge DIR -o FILE makes one)\n", path.c_str());
    return 2;
  }
  // Slices by kind; a collective's name by (rank, seq).
  std::map<std::pair<int, std::uint64_t>, std::string> call_name;
  std::map<std::pair<std::string, std::uint64_t>, std::pair<double, double>> call_span;
  std::vector<slice> sends, recvs, held;
  std::map<std::pair<int, double>, std::size_t> send_at;  // (rank, post time) -> send
  std::map<std::uint64_t, std::pair<int, double>> starts, ends;  // flow id -> (rank, time)
  try {
    for (const auto& e : j["traceEvents"]) {
      const std::string ph = e.value("ph", "");
      const int rank = e.value("pid", 0);
      if (ph == "s" || ph == "f") {
        (ph == "s" ? starts : ends)[e.value("id", std::uint64_t{0})] = {rank, e.value("ts", 0.0)};
        continue;
      }
      if (ph != "X") continue;
      const std::string cat = e.value("cat", "");
      const double ts = e.value("ts", 0.0), end = ts + e.value("dur", 0.0);
      const json args = e.value("args", json::object());
      const std::uint64_t seq = args.value("seq", std::uint64_t{0});
      if (cat == "collective") {
        const std::string name = e.value("name", "?");
        call_name[{rank, seq}] = name;
        auto [it, fresh] = call_span.try_emplace({name, seq}, ts, end);
        if (!fresh) it->second = {std::min(it->second.first, ts), std::max(it->second.second, end)};
        continue;
      }
      slice s{rank, ts, end, args.value("peer", 0), seq, args.value("step", std::uint64_t{0})};
      if (cat == "send") {
        send_at[{rank, ts}] = sends.size();
        sends.push_back(s);
      } else if (cat == "recv") {
        recvs.push_back(s);
      } else if (cat == "unexpected") {
        held.push_back(s);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optcast trace latency: %s: an event of the wrong shape (%s)\n", path.c_str(), e.what());
    return 2;
  }
  auto name_of = [&](int rank, std::uint64_t seq) {
    const auto it = call_name.find({rank, seq});
    return it == call_name.end() ? std::string("(outside a collective)") : it->second;
  };
  // A receive by its rank and end time (a flow ends where its receive does); a held
  // message by (rank, from, seq, step).
  std::map<std::pair<int, double>, std::size_t> recv_end;
  for (std::size_t i = 0; i < recvs.size(); ++i) recv_end[{recvs[i].rank, recvs[i].end}] = i;
  auto find_recv = [&](int rank, double t) -> const slice* {
    auto it = recv_end.lower_bound({rank, t - 1e-3});
    if (it == recv_end.end() || it->first.first != rank || it->first.second > t + 1e-3) return nullptr;
    return &recvs[it->second];
  };
  std::map<std::tuple<int, int, std::uint64_t, std::uint64_t>, const slice*> held_of;
  for (const auto& h : held) held_of[{h.rank, h.peer, h.seq, h.step}] = &h;

  std::map<std::string, std::map<std::string, std::vector<double>>> figures;  // collective -> part -> us
  std::size_t messages = 0;
  for (const auto& [id, start] : starts) {
    const auto f = ends.find(id);
    const auto s = send_at.find(start);
    if (f == ends.end() || s == send_at.end()) continue;
    const slice& snd = sends[s->second];
    const slice* rcv = find_recv(f->second.first, f->second.second);
    if (!rcv) continue;
    const auto h = held_of.find({rcv->rank, rcv->peer, rcv->seq, rcv->step});
    const double arrived = h != held_of.end() ? h->second->ts : rcv->end;
    auto& fig = figures[name_of(snd.rank, snd.seq)];
    fig["send"].push_back(snd.end - snd.ts);
    fig["way"].push_back(arrived - snd.end);
    fig["held"].push_back(h != held_of.end() ? h->second->end - h->second->ts : 0.0);
    ++messages;
  }
  // Turns: each receive's end to its rank's next send post in the same call.
  std::map<std::pair<int, std::uint64_t>, std::vector<double>> posts;
  for (const auto& s : sends) posts[{s.rank, s.seq}].push_back(s.ts);
  for (auto& [k, v] : posts) std::sort(v.begin(), v.end());
  for (const auto& r : recvs) {
    const auto p = posts.find({r.rank, r.seq});
    if (p == posts.end()) continue;
    const auto next = std::lower_bound(p->second.begin(), p->second.end(), r.end - 1e-3);
    if (next != p->second.end()) figures[name_of(r.rank, r.seq)]["turn"].push_back(std::max(0.0, *next - r.end));
  }
  for (const auto& [key, span] : call_span) figures[key.first]["call"].push_back(span.second - span.first);

  json out = json::object();
  for (const auto& [name, fig] : figures) {
    json row = json::object();
    for (const char* part : parts) {
      const auto it = fig.find(part);
      const spread s = spread_of(it == fig.end() ? std::vector<double>{} : it->second);
      row[part] = {{"n", s.n}, {"p10_us", s.p10}, {"p50_us", s.p50}, {"p90_us", s.p90}};
    }
    out[name] = row;
  }
  if (as_json) {
    std::puts(json({{"trace", path}, {"messages", messages}, {"collectives", out}}).dump().c_str());
    return 0;
  }
  std::printf("%zu messages in %s; microseconds, median (10th-90th percentile)\n", messages, path.c_str());
  std::printf("%-22s %-20s %-20s %-20s %-20s %-20s\n", "collective", "send (post-written)", "way (written-has it)", "held (for its recv)",
              "turn (recv-next post)", "call (first in-last out)");
  for (const auto& [name, row] : out.items()) {
    std::printf("%-22s", name.c_str());
    for (const char* part : parts) {
      const auto& c = row[part];
      char cell[64];
      if (c["n"].get<std::size_t>() == 0) std::snprintf(cell, sizeof cell, "-");
      else std::snprintf(cell, sizeof cell, "%.1f (%.1f-%.1f)", c["p50_us"].get<double>(), c["p10_us"].get<double>(), c["p90_us"].get<double>());
      std::printf(" %-20s", cell);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace optcast::tools
