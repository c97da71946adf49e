// optcast trace merge DIR -o FILE: the ranks' trace files (OPTCAST_TRACE=DIR, one
// Chrome trace-event file per rank, optcast/trace.hpp) into one, each rank's times moved
// onto rank 0's clock by the offset measured at start-up (kept within its measured bound
// so that no message arrives before it was sent), the whole starting at 0; and a check of
// what it holds: every send's flow has its receive, none runs backwards.
#include "tools.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace optcast::tools {

namespace {

using json = nlohmann::json;

// A page that draws a merged trace without a viewer installed: a row per rank with its
// collectives (upper band), sends and receives (lower bands) and a line per message.
constexpr const char* viewer_head = R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>optcast trace</title>
<style>body{font:12px DejaVu Sans,Helvetica,Arial,sans-serif;margin:10px;background:#fff}#info{margin:4px 0 8px}</style>
</head><body><div id="info"></div><canvas id="c"></canvas>
<script id="trace" type="application/json">)";
constexpr const char* viewer_tail = R"(</script>
<script>
(() => {  // its own scope: window.top and friends are taken
const t = JSON.parse(document.getElementById('trace').textContent);
const X = t.traceEvents.filter(e => e.ph === 'X');
const ranks = [...new Set(X.map(e => e.pid))].sort((a, b) => a - b);
const end = Math.max(1, ...X.map(e => e.ts + e.dur));
const W = 1200, left = 64, top = 34, rowH = 40;
const c = document.getElementById('c');
c.width = W; c.height = top + ranks.length * rowH + 24;
const g = c.getContext('2d');
g.fillStyle = '#fff'; g.fillRect(0, 0, c.width, c.height);
const x = ts => left + (W - left - 12) * ts / end;
const y = pid => top + ranks.indexOf(pid) * rowH;
const hues = {};
const hue = name => hues[name] ??= (Object.keys(hues).length * 67 + 210) % 360;
g.font = '11px sans-serif'; g.fillStyle = '#333';
for (let i = 0; i <= 10; i++) {
  const ts = end * i / 10;
  g.fillText((ts / 1000).toPrecision(3) + ' ms', x(ts) - 14, 14);
  g.fillStyle = '#e6e6e6'; g.fillRect(x(ts), 20, 1, c.height - 30); g.fillStyle = '#333';
}
for (const r of ranks) { g.fillStyle = '#333'; g.fillText('rank ' + r, 6, y(r) + 20); }
for (const e of X) {
  const w = Math.max(1, x(e.ts + e.dur) - x(e.ts));
  if (e.cat === 'collective') { g.fillStyle = `hsl(${hue(e.name)},55%,55%)`; g.fillRect(x(e.ts), y(e.pid) + 2, w, 12); }
  else { g.fillStyle = e.cat === 'send' ? '#4e79a7' : '#f28e2b'; g.fillRect(x(e.ts), y(e.pid) + (e.cat === 'send' ? 17 : 27), w, 8); }
}
const from = {};
for (const e of t.traceEvents) if (e.ph === 's') from[e.id] = e;
g.strokeStyle = 'rgba(60,60,60,0.35)';
let messages = 0;
for (const e of t.traceEvents) if (e.ph === 'f' && from[e.id]) {
  const s = from[e.id]; messages++;
  g.beginPath(); g.moveTo(x(s.ts), y(s.pid) + 21); g.lineTo(x(e.ts), y(e.pid) + 31); g.stroke();
}
const calls = X.filter(e => e.cat === 'collective').length;
document.getElementById('info').textContent =
  `${ranks.length} ranks, ${calls} collective calls, ${messages} messages over ${(end / 1000).toPrecision(4)} ms ` +
  '(upper band: collectives by name; blue: sends; orange: receives; lines: messages)';
document.body.dataset.drawn = String(X.length);
})();
</script></body></html>
)";

struct rank_file {
  std::string path;
  json j;
  int rank = -1;
  bool offset_known = false;
  double offset_us = 0, error_us = 0;
  double used_us = 0;  // the offset the merge applies: measured, then kept within its bound by the messages' order
};

// Timestamps are whole nanoseconds written in microseconds; closer than this is the same instant.
constexpr double same_instant_us = 1e-3;

// A rank's measured offset is exact only to within its error (half the best round trip),
// and on one machine, where the true offset is 0 but a round trip's halves differ by a
// scheduling slot, that error exceeds a message's latency: placed at the estimate, a
// receive can precede its send. But the error is a hard bound (rank 0 stamped its time
// between the two ends of that round trip), and each message is one more: its receive
// completed after its send was posted. Offsets that meet all of them form a convex set,
// whose least and greatest points come from relaxing the bounds along the messages
// (difference constraints, Bellman-Ford); the merge takes the midpoint, which is the
// estimate itself where no message constrains a rank. Where the bounds cannot all be met
// (a clock that drifted, a wrong estimate) it keeps the estimates and the check below
// reports the messages that run backwards. Returns whether it could.
bool refine_offsets(std::vector<rank_file>& files, const std::map<std::pair<int, int>, double>& gap) {
  const std::size_t n = files.size();
  std::map<int, std::size_t> at;
  for (std::size_t i = 0; i < n; ++i) at[files[i].rank] = i;
  std::vector<double> lo(n), hi(n);
  for (std::size_t i = 0; i < n; ++i) {
    files[i].used_us = files[i].offset_us;
    // Rank 0 is the reference; a rank without a measurement stays where it is taken to be.
    const double e = files[i].offset_known && files[i].rank != 0 ? files[i].error_us : 0;
    lo[i] = files[i].offset_us - e;
    hi[i] = files[i].offset_us + e;
  }
  // A message from a to b, sent at s (a's clock) and received at r (b's), needs
  // r + x_b >= s + x_a: x_b - x_a >= s - r, the largest such difference per pair.
  struct edge {
    std::size_t a, b;
    double d;
  };
  std::vector<edge> edges;
  for (const auto& [pair, d] : gap) {
    const auto a = at.find(pair.first), b = at.find(pair.second);
    if (a != at.end() && b != at.end() && a->second != b->second) edges.push_back({a->second, b->second, d});
  }
  if (edges.empty()) return true;
  // A feasible system settles within n passes; one that does not has a cycle of
  // constraints no offsets meet.
  auto settle = [&](std::vector<double>& x, bool upward) {
    for (std::size_t pass = 0; pass <= n; ++pass) {
      bool moved = false;
      for (const auto& e : edges) {
        if (upward && x[e.b] < x[e.a] + e.d) x[e.b] = x[e.a] + e.d, moved = true;
        if (!upward && x[e.a] > x[e.b] - e.d) x[e.a] = x[e.b] - e.d, moved = true;
      }
      if (!moved) return true;
    }
    return false;
  };
  std::vector<double> least = lo, most = hi;
  if (!settle(least, true) || !settle(most, false)) return false;
  for (std::size_t i = 0; i < n; ++i)
    if (least[i] > hi[i] + same_instant_us || most[i] < lo[i] - same_instant_us) return false;
  for (std::size_t i = 0; i < n; ++i) files[i].used_us = (least[i] + most[i]) / 2;
  return true;
}

int merge(const std::string& dir, const std::string& out_path, const std::string& html_path, bool quiet) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::fprintf(stderr, "optcast trace merge: %s is not a directory (OPTCAST_TRACE=DIR writes DIR/rank<r>.json)\n", dir.c_str());
    return 2;
  }
  std::vector<rank_file> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("rank", 0) == 0 && e.path().extension() == ".json") files.push_back({e.path().string(), {}});
  }
  if (files.empty()) {
    std::fprintf(stderr, "optcast trace merge: no rank<r>.json in %s\n", dir.c_str());
    return 2;
  }
  std::sort(files.begin(), files.end(), [](const rank_file& a, const rank_file& b) { return a.path < b.path; });
  std::vector<int> unmeasured;
  for (auto& f : files) {
    std::ifstream in(f.path);
    try {
      f.j = json::parse(in);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "optcast trace merge: %s: not JSON (%s); was its rank still running?\n", f.path.c_str(), e.what());
      return 2;
    }
    if (!f.j.is_object() || !f.j.contains("traceEvents") || !f.j["traceEvents"].is_array() || !f.j.contains("optcast") ||
        !f.j["optcast"].is_object()) {
      std::fprintf(stderr, "optcast trace merge: %s: not an optcast trace (no traceEvents / optcast)\n", f.path.c_str());
      return 2;
    }
    const auto& meta = f.j["optcast"];
    f.rank = meta.value("rank", -1);
    if (meta.contains("clock_offset_s") && meta["clock_offset_s"].is_number()) {
      f.offset_known = true;
      f.offset_us = meta["clock_offset_s"].get<double>() * 1e6;
      f.error_us = meta.value("clock_error_s", 0.0) * 1e6;
    } else if (f.rank != 0) {
      unmeasured.push_back(f.rank);
    }
  }
  std::sort(files.begin(), files.end(), [](const rank_file& a, const rank_file& b) { return a.rank < b.rank; });
  for (std::size_t i = 1; i < files.size(); ++i)
    if (files[i].rank == files[i - 1].rank) {
      std::fprintf(stderr, "optcast trace merge: %s and %s are both rank %d (two runs in one directory?)\n",
                   files[i - 1].path.c_str(), files[i].path.c_str(), files[i].rank);
      return 2;
    }

  // Each message's two ends on their own ranks' clocks: the order the offsets must keep.
  std::map<std::uint64_t, std::pair<int, double>> sent, received;
  for (const auto& f : files)
    for (const auto& e : f.j["traceEvents"]) {
      if (!e.contains("ts") || !e["ts"].is_number()) continue;
      const std::string ph = e.value("ph", "");
      if (ph == "s") sent[e.value("id", std::uint64_t{0})] = {f.rank, e["ts"].get<double>()};
      if (ph == "f") received[e.value("id", std::uint64_t{0})] = {f.rank, e["ts"].get<double>()};
    }
  std::map<std::pair<int, int>, double> gap;
  for (const auto& [id, s] : sent)
    if (const auto r = received.find(id); r != received.end()) {
      const std::pair<int, int> pair{s.first, r->second.first};
      const double d = s.second - r->second.second;
      if (const auto g = gap.find(pair); g == gap.end() || g->second < d) gap[pair] = d;
    }
  const bool refined = refine_offsets(files, gap);

  // Onto rank 0's clock, then from 0.
  double first = INFINITY;
  for (auto& f : files)
    for (auto& e : f.j["traceEvents"])
      if (e.contains("ts") && e["ts"].is_number()) {
        e["ts"] = e["ts"].get<double>() + f.used_us;
        first = std::min(first, e["ts"].get<double>());
      }
  if (!std::isfinite(first)) first = 0;
  json all = json::array();
  std::map<std::uint64_t, double> sends, recvs;
  std::size_t calls = 0;
  for (auto& f : files)
    for (auto& e : f.j["traceEvents"]) {
      if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() - first;
      const std::string ph = e.value("ph", "");
      if (ph == "s") sends[e.value("id", std::uint64_t{0})] = e["ts"].get<double>();
      if (ph == "f") recvs[e.value("id", std::uint64_t{0})] = e["ts"].get<double>();
      if (ph == "X" && e.value("cat", "") == "collective") ++calls;
      all.push_back(std::move(e));
    }
  std::size_t matched = 0, backwards = 0, unmatched_sends = 0, unmatched_recvs = 0;
  double worst_us = 0;
  for (const auto& [id, t] : sends) {
    const auto r = recvs.find(id);
    if (r == recvs.end()) {
      ++unmatched_sends;
      continue;
    }
    ++matched;
    if (r->second < t - same_instant_us) {
      ++backwards;
      worst_us = std::max(worst_us, t - r->second);
    }
  }
  for (const auto& [id, t] : recvs)
    if (!sends.count(id)) ++unmatched_recvs;

  json ranks = json::array();
  double largest = 0, largest_err = 0;
  for (const auto& f : files) {
    ranks.push_back({{"rank", f.rank}, {"clock_offset_s", f.offset_known ? json(f.offset_us * 1e-6) : json(nullptr)},
                     {"clock_error_s", f.offset_known ? json(f.error_us * 1e-6) : json(nullptr)},
                     {"clock_offset_used_s", f.used_us * 1e-6}});
    if (std::fabs(f.offset_us) >= std::fabs(largest)) {
      largest = f.offset_us;
      largest_err = f.error_us;
    }
  }
  json merged = {{"traceEvents", std::move(all)}, {"displayTimeUnit", "ns"}};
  merged["optcast"] = {{"ranks", ranks}, {"collectives", calls}, {"messages", matched}, {"unmatched_sends", unmatched_sends},
                       {"unmatched_receives", unmatched_recvs}, {"backwards", backwards},
                       {"offsets_within_bounds", refined}};
  const std::string text = merged.dump(-1, ' ', false, json::error_handler_t::replace);
  std::ofstream out(out_path);
  out << text << "\n";
  if (!out.flush()) {
    std::fprintf(stderr, "optcast trace merge: cannot write %s\n", out_path.c_str());
    return 2;
  }
  if (!html_path.empty()) {
    std::ofstream page(html_path);
    page << viewer_head;
    // JSON inside a script element: "</" would end it.
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') page << "<\\";
      else page << text[i];
    }
    page << viewer_tail;
    if (!page.flush()) {
      std::fprintf(stderr, "optcast trace merge: cannot write %s\n", html_path.c_str());
      return 2;
    }
  }
  if (!quiet) {
    std::printf("merged %zu ranks: %zu collective calls, %zu messages -> %s\n", files.size(), calls, matched, out_path.c_str());
    std::printf("  clocks: %s; largest offset %.1f us (+- %.1f us)\n",
                unmeasured.empty() ? "every rank's offset from rank 0 measured" : "some ranks' offsets not measured (taken as 0)",
                largest, largest_err);
    if (unmatched_sends || unmatched_recvs)
      std::printf("  %zu sends and %zu receives without their other end (a rank's file missing, a failed run, or a log "
                  "that was full)\n", unmatched_sends, unmatched_recvs);
    if (!refined)
      std::printf("  no offsets within the measured bounds keep every message after its send: the estimates kept\n");
    if (backwards)
      std::printf("  %zu messages received before they were sent by up to %.1f us: clock error beyond the measured bound\n",
                  backwards, worst_us);
    if (!unmeasured.empty()) {
      std::printf("  ranks without a measured offset:");
      for (std::size_t i = 0; i < unmeasured.size() && i < 16; ++i) std::printf(" %d", unmeasured[i]);
      std::printf("%s\n", unmeasured.size() > 16 ? " ..." : "");
    }
  }
  return 0;
}

}  // namespace

int cmd_trace(int argc, char** argv) {
  CLI::App app{"Works on the traces OPTCAST_TRACE=DIR writes (Chrome trace-event JSON, one file per rank).",
               "optcast trace"};
  app.require_subcommand(1);
  auto* m = app.add_subcommand("merge",
                               "Merges DIR/rank<r>.json into one file for chrome://tracing or https://ui.perfetto.dev: every rank's "
                               "times moved onto rank 0's clock by the offset measured when the job started (moved within its "
                               "measured bound so that no message arrives before it was sent), from 0; prints "
                               "how many calls and messages it holds and any send without its receive.");
  std::string dir, out = "trace.json", html;
  bool quiet = false;
  m->add_option("dir", dir, "the directory OPTCAST_TRACE named")->required();
  m->add_option("-o,--output", out, "the merged file")->capture_default_str();
  m->add_option("--html", html, "also a page that draws the trace in any browser (no viewer needed)");
  m->add_flag("-q,--quiet", quiet, "no summary");
  m->footer("Example: OPTCAST_TRACE=/tmp/t optcast-bench coll --np 4 -o allreduce -l 1MiB -m 2\n"
            "         optcast trace merge /tmp/t -o /tmp/t.json   # then open it in https://ui.perfetto.dev");
  auto* l = app.add_subcommand("latency",
                               "Takes a merged trace apart message by message: per collective, the medians and 10th/90th "
                               "percentiles of a send (post to written), its way (written to the receiver having it), the "
                               "time it was held for its receive, a rank's turn (a receive's end to its next send), and the "
                               "call (first rank in to last out).");
  std::string merged;
  bool as_json = false;
  l->add_option("merged", merged, "a file `optcast trace merge` wrote")->required();
  l->add_flag("--json", as_json, "one JSON object");
  l->footer("Example: OPTCAST_TRACE=/tmp/t optcast-bench coll --np 4 -o bcast,allreduce -l 8\n"
            "         optcast trace merge /tmp/t -o /tmp/t.json -q && optcast trace latency /tmp/t.json");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (l->parsed()) return trace_latency(merged, as_json);
  return merge(dir, out, html, quiet);
}

}  // namespace optcast::tools
