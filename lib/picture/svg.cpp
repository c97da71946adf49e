// SVG pictures of simulated runs and schedule tables (optcast/picture.hpp). Plain text
// assembly: fixed number formats and no clock, so the same input gives the same bytes.
#include "optcast/picture.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

namespace optcast::picture {

namespace {

// Tableau 10: distinct on screen and in print.
constexpr const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr const char* ink[] = {"#ffffff", "#ffffff", "#ffffff", "#222222", "#ffffff",
                               "#222222", "#ffffff", "#222222", "#ffffff", "#222222"};  // text on each
constexpr const char* unknown_colour = "#8c8c8c";
constexpr const char* greys[] = {"#e4e4e4", "#d4d4d4", "#c4c4c4", "#b4b4b4", "#a4a4a4"};

std::string num(double v) {  // pixel coordinates
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  std::string s = b;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string tnum(double v) { return sim::format_time(v); }

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  return out;
}

struct svg {
  std::string body;
  double w, h;
  svg(double width, double height) : w(width), h(height) {}
  void add(const std::string& s) {
    body += s;
    body += '\n';
  }
  void text(double x, double y, const std::string& s, const std::string& attrs = {}) {
    add("<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + (attrs.empty() ? "" : " " + attrs) + ">" + esc(s) + "</text>");
  }
  std::string done(const std::string& defs = {}) const {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(w) +
           "\" height=\"" + num(h) + "\" viewBox=\"0 0 " + num(w) + " " + num(h) +
           "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">\n" +
           (defs.empty() ? "" : "<defs>\n" + defs + "</defs>\n") + "<rect class=\"background\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n" +
           body + "</svg>\n";
  }
};

// About how wide a line of text is (DejaVu Sans: 0.6 em a character on average).
double text_width(const std::string& s, double font_px) {
  std::size_t chars = 0;
  for (unsigned char c : s) chars += (c & 0xc0) != 0x80;  // UTF-8: count characters, not bytes
  return static_cast<double>(chars) * font_px * 0.6;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving about `want` ticks over span.
double tick_step(double span, int want) {
  const double raw = span / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0})
    if (raw <= f * mag) return f * mag;
  return 10 * mag;
}

std::string block_text(const sim::message_record& m) {
  if (m.part >= 0) return m.block > 0 ? std::to_string(m.part) + "." + std::to_string(m.block) : std::to_string(m.part);
  return m.block >= 0 ? std::to_string(m.block) : std::string();
}

const char* block_colour(const sim::message_record& m) {
  const int k = m.part >= 0 ? m.part : m.block;
  return k >= 0 ? palette[k % 10] : unknown_colour;
}

}  // namespace

std::string timeline_svg(const sim::report& rep, const sim::model& m, const timeline_options& o) {
  const int p = static_cast<int>(rep.ranks.size());
  const int rows = std::max(0, std::min(p, o.max_rows));
  const bool rounds = m.kind == sim::model_kind::rounds;
  // Under the rounds model with few rounds, cells large enough to read the blocks in.
  double tmax = std::max({rep.finish_time, rep.comm_finish_time, o.bound.value_or(0)});
  for (const auto& r : rep.log) tmax = std::max(tmax, r.available);
  if (!(tmax > 0)) tmax = 1;
  const bool big = rounds && tmax <= 40;
  const double left = 70, plot_w = 1000, right = 30, top = 78, row_h = big ? 32 : 24, lane_h = big ? 13 : 9;
  const double sx = plot_w / tmax;
  auto X = [&](double t) { return left + t * sx; };
  auto row_y = [&](int r) { return top + r * row_h; };
  const double plot_bottom = row_y(rows);
  svg s(std::max(left + plot_w + right, left + 20 + std::max(text_width(o.title, 15), text_width(o.subtitle, 11))),
        plot_bottom + 96);

  s.text(left, 22, o.title, "class=\"title\" font-size=\"15\" font-weight=\"bold\"");
  if (!o.subtitle.empty()) s.text(left, 40, o.subtitle, "class=\"subtitle\" fill=\"#444444\"");

  // Rows, and the time axis with its grid.
  for (int r = 0; r < rows; ++r) {
    s.add("<rect class=\"row\" data-rank=\"" + std::to_string(r) + "\" x=\"" + num(left) + "\" y=\"" + num(row_y(r)) +
          "\" width=\"" + num(plot_w) + "\" height=\"" + num(row_h) + "\" fill=\"" + (r % 2 ? "#f4f4f4" : "#fbfbfb") + "\"/>");
    s.text(left - 8, row_y(r) + row_h / 2 + 4, std::to_string(r), "class=\"rank-label\" text-anchor=\"end\"");
  }
  s.text(left - 8, top - 22, "rank", "text-anchor=\"end\" fill=\"#444444\"");
  const double step = rounds && tmax <= 60 ? 1 : std::max(rounds ? 1.0 : 0.0, tick_step(tmax, 10));
  for (int i = 0; i * step <= tmax * (1 + 1e-9); ++i) {
    const double t = i * step;
    s.add("<line class=\"grid\" x1=\"" + num(X(t)) + "\" y1=\"" + num(top - 6) + "\" x2=\"" + num(X(t)) + "\" y2=\"" +
          num(plot_bottom) + "\" stroke=\"#d0d0d0\" stroke-width=\"0.6\"/>");
    s.text(X(t), top - 10, tnum(t), "class=\"tick\" text-anchor=\"middle\" fill=\"#444444\"");
  }
  s.text(left + plot_w, top - 26, rounds ? "rounds" : "time (model units)", "text-anchor=\"end\" fill=\"#444444\"");

  // Idle rounds and computations.
  for (const auto& l : rep.local) {
    if (l.rank >= rows) continue;
    // An idle round is a round loop's round without a send (its receives are posted
    // ahead): the upper lane. A computation occupies the rank.
    s.add("<rect class=\"" + std::string(l.compute ? "compute" : "idle") + "\" data-rank=\"" + std::to_string(l.rank) +
          "\" x=\"" + num(X(l.start)) + "\" y=\"" + num(row_y(l.rank) + 2) + "\" width=\"" + num((l.end - l.start) * sx) +
          "\" height=\"" + num(l.compute ? row_h - 4 : lane_h) + "\" fill=\"url(#hatch)\" stroke=\"#999999\" stroke-width=\"0.5\"/>");
  }

  // Messages: the upper lane of a row sends, the lower one receives.
  std::size_t drawn = 0, skipped = 0;
  const double min_w = 1.5;
  for (const auto& r : rep.log) {
    const bool src_in = r.src < rows, dst_in = r.dst < rows;
    if (!src_in && !dst_in) continue;
    if (drawn == o.max_messages) {
      ++skipped;
      continue;
    }
    ++drawn;
    const std::string colour = block_colour(r), label = block_text(r);
    const int colour_index = r.part >= 0 ? r.part : r.block;
    const char* text_on = colour_index >= 0 ? ink[colour_index % 10] : "#ffffff";
    std::string g = "<g class=\"message\" data-src=\"" + std::to_string(r.src) + "\" data-dst=\"" + std::to_string(r.dst) +
                    "\" data-step=\"" + std::to_string(r.tg.step) + "\" data-bytes=\"" + std::to_string(r.bytes) +
                    "\" data-block=\"" + label + "\" data-start=\"" + tnum(r.start) + "\" data-available=\"" +
                    tnum(r.available) + "\">";
    const double send_end = rounds ? r.start + 1 : r.last;
    const double ys = row_y(r.src) + 2, yr = row_y(r.dst) + row_h - 2 - lane_h;
    auto bar = [&](const char* cls, double t0, double t1, double y, const std::string& fill, const std::string& extra) {
      double x0 = X(t0), w = (t1 - t0) * sx;
      if (w < min_w) {
        x0 -= (min_w - w) / 2;
        w = min_w;
      }
      g += "\n  <rect class=\"" + std::string(cls) + "\" x=\"" + num(x0) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
           "\" height=\"" + num(lane_h) + "\" fill=\"" + fill + "\"" + extra + "/>";
      const double font = big ? 10 : 8;
      if (!label.empty() && w >= text_width(label, font) + 4)
        g += "\n  <text class=\"block\" x=\"" + num(x0 + w / 2) + "\" y=\"" + num(y + lane_h - (big ? 2.5 : 1.5)) +
             "\" text-anchor=\"middle\" font-size=\"" + num(font) + "\" fill=\"" + text_on + "\">" + esc(label) + "</text>";
    };
    if (src_in) {
      bar("send", r.start, send_end, ys, colour, "");
      // The gap before this channel's next sending overhead (LogP: max(o, g - o + (m-1)G) after the start).
      const double next = std::max(r.start + m.o, r.last + m.g - m.o);
      if (!rounds && next > r.last + 1e-12)
        g += "\n  <rect class=\"gap\" x=\"" + num(X(r.last)) + "\" y=\"" + num(ys + 2) + "\" width=\"" + num((next - r.last) * sx) +
             "\" height=\"" + num(lane_h - 4) + "\" fill=\"" + colour + "\" fill-opacity=\"0.3\"/>";
    }
    if (dst_in && r.available >= 0) {
      const double rx0 = rounds ? r.start : r.rx_start;
      bar("recv", rx0, r.available, yr, colour, " fill-opacity=\"0.85\" stroke=\"#333333\" stroke-width=\"0.4\"");
    }
    if (src_in && dst_in && r.window >= 0) {
      const double t0 = rounds ? r.start + 0.5 : r.first, t1 = rounds ? r.start + 0.5 : r.window;
      g += "\n  <line class=\"wire\" x1=\"" + num(X(t0)) + "\" y1=\"" + num(ys + lane_h / 2) + "\" x2=\"" + num(X(t1)) +
           "\" y2=\"" + num(yr + lane_h / 2) + "\" stroke=\"" + colour + "\" stroke-opacity=\"0.6\" stroke-width=\"0.9\" " +
           "marker-end=\"url(#arrow)\"/>";
    }
    s.add(g + "\n</g>");
  }

  // Each rank's finish, the run's finish and the paper's bound.
  for (int r = 0; r < rows; ++r) {
    const double t = rep.ranks[static_cast<std::size_t>(r)].finish;
    s.add("<line class=\"rank-finish\" data-rank=\"" + std::to_string(r) + "\" data-t=\"" + tnum(t) + "\" x1=\"" + num(X(t)) +
          "\" y1=\"" + num(row_y(r) + 1) + "\" x2=\"" + num(X(t)) + "\" y2=\"" + num(row_y(r) + row_h - 1) +
          "\" stroke=\"#222222\" stroke-width=\"1.5\"/>");
  }
  s.add("<line class=\"finish\" data-t=\"" + tnum(rep.finish_time) + "\" x1=\"" + num(X(rep.finish_time)) + "\" y1=\"" +
        num(top - 4) + "\" x2=\"" + num(X(rep.finish_time)) + "\" y2=\"" + num(plot_bottom + 6) +
        "\" stroke=\"#d62728\" stroke-width=\"1.6\"/>");
  s.text(X(rep.finish_time), plot_bottom + 18, "finish " + tnum(rep.finish_time),
         "class=\"finish-label\" text-anchor=\"end\" fill=\"#d62728\"");
  if (o.bound) {
    s.add("<line class=\"bound\" data-t=\"" + tnum(*o.bound) + "\" x1=\"" + num(X(*o.bound)) + "\" y1=\"" + num(top - 4) +
          "\" x2=\"" + num(X(*o.bound)) + "\" y2=\"" + num(plot_bottom + 6) +
          "\" stroke=\"#1f5fbf\" stroke-width=\"1.4\" stroke-dasharray=\"5,3\"/>");
    s.text(X(*o.bound), plot_bottom + 32, o.bound_label.empty() ? "paper " + tnum(*o.bound) : o.bound_label,
           "class=\"bound-label\" text-anchor=\"end\" fill=\"#1f5fbf\"");
  }

  double y = plot_bottom + 50;
  std::string note;
  if (rows < p) note += "ranks " + std::to_string(rows) + ".." + std::to_string(p - 1) + " not drawn (" + std::to_string(p) + " ranks). ";
  if (skipped) note += std::to_string(skipped) + " more messages not drawn (" + std::to_string(drawn) + " drawn). ";
  if (rep.log.empty() && rep.messages) note += "no message record (simulate with record on). ";
  if (!note.empty()) {
    s.text(left, y, note, "class=\"note\" fill=\"#a0522d\"");
    y += 16;
  }
  // Legend.
  double lx = left;
  auto key = [&](const std::string& shape, const std::string& what) {
    s.add(shape);
    s.text(lx + 20, y + 8, what, "class=\"legend\" fill=\"#333333\"");
    lx += 28 + 6.2 * static_cast<double>(what.size());
  };
  key("<rect x=\"" + num(lx) + "\" y=\"" + num(y) + "\" width=\"16\" height=\"9\" fill=\"" + palette[0] + "\"/>",
      rounds ? "send (upper lane), colour and number: block" : "send: overhead o + (m-1)G (upper lane), colour: block");
  if (!rounds)
    key("<rect x=\"" + num(lx) + "\" y=\"" + num(y + 2) + "\" width=\"16\" height=\"5\" fill=\"" + palette[0] + "\" fill-opacity=\"0.3\"/>",
        "gap g");
  key("<line x1=\"" + num(lx) + "\" y1=\"" + num(y + 4) + "\" x2=\"" + num(lx + 16) + "\" y2=\"" + num(y + 4) +
          "\" stroke=\"" + palette[0] + "\" marker-end=\"url(#arrow)\"/>",
      rounds ? "message" : "wire L");
  key("<rect x=\"" + num(lx) + "\" y=\"" + num(y) + "\" width=\"16\" height=\"9\" fill=\"" + palette[0] +
          "\" fill-opacity=\"0.85\" stroke=\"#333333\" stroke-width=\"0.4\"/>",
      rounds ? "receive (lower lane)" : "receive: overhead o (lower lane)");
  if (!rep.local.empty())
    key("<rect x=\"" + num(lx) + "\" y=\"" + num(y) + "\" width=\"16\" height=\"9\" fill=\"url(#hatch)\"/>", "idle / compute");
  y += 18;
  lx = left;
  key("<line x1=\"" + num(lx) + "\" y1=\"" + num(y + 4) + "\" x2=\"" + num(lx + 16) + "\" y2=\"" + num(y + 4) +
          "\" stroke=\"#222222\" stroke-width=\"1.5\"/>",
      "rank finished");
  key("<line x1=\"" + num(lx) + "\" y1=\"" + num(y + 4) + "\" x2=\"" + num(lx + 16) + "\" y2=\"" + num(y + 4) +
          "\" stroke=\"#d62728\" stroke-width=\"1.6\"/>",
      "finish time");
  if (o.bound)
    key("<line x1=\"" + num(lx) + "\" y1=\"" + num(y + 4) + "\" x2=\"" + num(lx + 16) + "\" y2=\"" + num(y + 4) +
            "\" stroke=\"#1f5fbf\" stroke-dasharray=\"5,3\"/>",
        "the paper's bound");

  const std::string defs =
      "<marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"5\" markerHeight=\"5\" orient=\"auto\">"
      "<path d=\"M0,0 L10,5 L0,10 z\" fill=\"#555555\"/></marker>\n"
      "<pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
      "<rect width=\"6\" height=\"6\" fill=\"#eeeeee\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#aaaaaa\" stroke-width=\"2\"/></pattern>\n";
  return s.done(defs);
}

result<std::string> tree_svg(const sim::report& rep, int root, const tree_options& o, std::string* why) {
  const int p = static_cast<int>(rep.ranks.size());
  auto refuse = [&](std::string text) -> result<std::string> {
    if (why) *why = std::move(text);
    return fail(errc::invalid_argument);
  };
  if (root < 0 || root >= p) return refuse("tree: root " + std::to_string(root) + " is not a rank of " + std::to_string(p));
  if (p > o.max_nodes) return refuse("tree: " + std::to_string(p) + " ranks, more than the " + std::to_string(o.max_nodes) + " drawn");
  if (rep.log.empty() && p > 1) return refuse("tree: the run has no message record");
  std::vector<int> parent(static_cast<std::size_t>(p), -1);
  std::vector<double> when(static_cast<std::size_t>(p), 0), sent(static_cast<std::size_t>(p), 0);
  std::vector<int> got(static_cast<std::size_t>(p), 0);
  for (const auto& m : rep.log) {
    if (m.dst < 0 || m.dst >= p || m.src < 0 || m.src >= p) return refuse("tree: a message between unknown ranks");
    const auto d = static_cast<std::size_t>(m.dst);
    if (++got[d] > 1)
      return refuse("tree: rank " + std::to_string(m.dst) + " received more than one message (a tree view is for one-item "
                    "broadcasts; see the timeline)");
    parent[d] = m.src;
    when[d] = m.available;
    sent[d] = m.start;
  }
  for (int r = 0; r < p; ++r)
    if ((r == root) != (got[static_cast<std::size_t>(r)] == 0))
      return refuse(r == root ? "tree: the root received a message" : "tree: rank " + std::to_string(r) + " received nothing");

  // Children in the order they were sent to; leaves side by side, a parent above the
  // middle of its children; height is time.
  std::vector<std::vector<int>> kids(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r)
    if (r != root) kids[static_cast<std::size_t>(parent[static_cast<std::size_t>(r)])].push_back(r);
  for (auto& k : kids)
    std::stable_sort(k.begin(), k.end(), [&](int a, int b) { return sent[static_cast<std::size_t>(a)] < sent[static_cast<std::size_t>(b)]; });
  std::vector<double> x(static_cast<std::size_t>(p), 0);
  double next_leaf = 0;
  // Iterative post-order (deep trees: a chain of p ranks).
  std::vector<std::pair<int, std::size_t>> stack{{root, 0}};
  int reached = 1;
  while (!stack.empty()) {
    auto& [v, i] = stack.back();
    const auto& k = kids[static_cast<std::size_t>(v)];
    if (i < k.size()) {
      const int c = k[i++];
      ++reached;
      stack.push_back({c, 0});
      continue;
    }
    x[static_cast<std::size_t>(v)] = k.empty() ? next_leaf++ : (x[static_cast<std::size_t>(k.front())] + x[static_cast<std::size_t>(k.back())]) / 2;
    stack.pop_back();
  }
  if (reached != p) return refuse("tree: " + std::to_string(p - reached) + " ranks are not reached from the root");
  const double tmax = std::max(1.0, *std::max_element(when.begin(), when.end()));
  // At least 48 px per time unit where that fits (a round, under the rounds model, clears a node and its name).
  const double left = 70, top = 70, dx = 46, plot_h = std::clamp(tmax * 48.0, 260.0, 900.0), sy = plot_h / tmax;
  const double width = left + std::max(1.0, next_leaf) * dx + 40;
  auto X = [&](int r) { return left + 20 + x[static_cast<std::size_t>(r)] * dx; };
  auto Y = [&](int r) { return top + when[static_cast<std::size_t>(r)] * sy; };
  const std::string subtitle = "label: when the rank has the datum; children left to right in the order they were sent to";
  svg s(std::max({width, 420.0, left + 20 + text_width(o.title, 15), left + 20 + text_width(subtitle, 11)}), top + plot_h + 70);
  s.text(left, 22, o.title, "class=\"title\" font-size=\"15\" font-weight=\"bold\"");
  s.text(left, 40, subtitle, "class=\"subtitle\" fill=\"#444444\"");
  const double step = tick_step(tmax, 8);
  for (int i = 0; i * step <= tmax * (1 + 1e-9); ++i) {
    const double t = i * step, yy = top + t * sy;
    s.add("<line class=\"grid\" x1=\"" + num(left) + "\" y1=\"" + num(yy) + "\" x2=\"" + num(s.w - 20) + "\" y2=\"" + num(yy) +
          "\" stroke=\"#e4e4e4\" stroke-width=\"0.6\"/>");
    s.text(left - 8, yy + 4, tnum(t), "class=\"tick\" text-anchor=\"end\" fill=\"#444444\"");
  }
  s.text(left - 8, top - 14, "time", "text-anchor=\"end\" fill=\"#444444\"");
  for (int r = 0; r < p; ++r) {
    if (r == root) continue;
    const int u = parent[static_cast<std::size_t>(r)];
    s.add("<line class=\"edge\" data-from=\"" + std::to_string(u) + "\" data-to=\"" + std::to_string(r) + "\" x1=\"" + num(X(u)) +
          "\" y1=\"" + num(Y(u)) + "\" x2=\"" + num(X(r)) + "\" y2=\"" + num(Y(r)) + "\" stroke=\"#777777\" stroke-width=\"1.2\"/>");
  }
  for (int r = 0; r < p; ++r) {
    const std::string t = tnum(when[static_cast<std::size_t>(r)]);
    s.add("<g class=\"node\" data-rank=\"" + std::to_string(r) + "\" data-time=\"" + t + "\">\n  <circle cx=\"" + num(X(r)) +
          "\" cy=\"" + num(Y(r)) + "\" r=\"13\" fill=\"" + (r == root ? "#e15759" : "#4e79a7") +
          "\" stroke=\"#ffffff\" stroke-width=\"1.5\"/>\n  <text class=\"label\" x=\"" + num(X(r)) + "\" y=\"" + num(Y(r) + 4) +
          "\" text-anchor=\"middle\" fill=\"#ffffff\" font-weight=\"bold\">" + t + "</text>\n  <text class=\"rank\" x=\"" +
          num(X(r)) + "\" y=\"" + num(Y(r) + 25) + "\" text-anchor=\"middle\" font-size=\"9\" fill=\"#444444\">rank " +
          std::to_string(r) + "</text>\n</g>");
  }
  return s.done();
}

std::string table_svg(const table& t) {
  const double left = 110, top = 64, cw = 34, ch = 22;
  const auto cols = t.columns.size();
  svg s(std::max({left + static_cast<double>(cols) * cw + 20, 30 + text_width(t.title, 15), 30 + text_width(t.subtitle, 11)}),
        top + static_cast<double>(t.rows.size() + 1) * ch + 30);
  s.text(10, 22, t.title, "class=\"title\" font-size=\"15\" font-weight=\"bold\"");
  if (!t.subtitle.empty()) s.text(10, 42, t.subtitle, "class=\"subtitle\" fill=\"#444444\"");
  for (std::size_t c = 0; c < cols; ++c)
    s.text(left + (static_cast<double>(c) + 0.5) * cw, top + ch - 7, t.columns[c],
           "class=\"column\" text-anchor=\"middle\" font-weight=\"bold\"");
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const auto& [name, values] = t.rows[i];
    const double y = top + static_cast<double>(i + 1) * ch;
    s.text(left - 8, y + ch - 7, name, "class=\"row-name\" text-anchor=\"end\"");
    for (std::size_t c = 0; c < values.size() && c < cols; ++c) {
      const int v = values[c];
      const char* fill = v >= 0 ? palette[v % 10] : greys[static_cast<unsigned>(-(v + 1)) % 5];
      s.add("<g class=\"cell\" data-row=\"" + std::to_string(i) + "\" data-col=\"" + std::to_string(c) + "\" data-value=\"" +
            std::to_string(v) + "\"><rect x=\"" + num(left + static_cast<double>(c) * cw + 1) + "\" y=\"" + num(y + 1) +
            "\" width=\"" + num(cw - 2) + "\" height=\"" + num(ch - 2) + "\" fill=\"" + fill + "\"/><text x=\"" +
            num(left + (static_cast<double>(c) + 0.5) * cw) + "\" y=\"" + num(y + ch - 7) + "\" text-anchor=\"middle\" fill=\"" +
            (v >= 0 ? ink[v % 10] : "#333333") + "\">" + std::to_string(v) + "</text></g>");
    }
  }
  return s.done();
}

}  // namespace optcast::picture
