#include "optcast/calibrate.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "round_loops.hpp"
#include "collective_common.hpp"
#include "optcast/choose.hpp"
#include "optcast/collectives.hpp"
#include "optcast/when_all.hpp"
#include "runtime/comm_access.hpp"

namespace optcast {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

calibration::spread spread_of(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {*lo, median(v), *hi};
}

// The fabric's clock: virtual time on the simulator, else seconds of steady_clock.
double now(const fabric& f) {
  if (auto t = f.model_time()) return *t;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

enum step : std::uint32_t { ping, pong, spaced, ack, stream, stream_ack };

struct trial {
  double rtt = 0, o = 0, g = 0, G = 0;
};

// Rank 0's side of one trial against `peer`, which runs echo() against it.
task<result<trial>> measure(fabric& f, std::uint32_t seq, const calibrate_options& opt, int peer) {
  std::vector<std::byte> one(1), big(opt.big_bytes);
  trial out;
  std::vector<double> samples;
  for (int i = 0; i < opt.repetitions; ++i) {  // ping-pong
    const double t0 = now(f);
    if (auto r = co_await f.send(peer, {seq, ping}, one); !r) co_return fail(r.error());
    if (auto r = co_await f.recv(peer, {seq, pong}, one); !r) co_return fail(r.error());
    samples.push_back(now(f) - t0);
  }
  out.rtt = median(samples);
  samples.clear();
  for (int i = 0; i < opt.repetitions; ++i) {  // a send on a free channel, then wait for the echo
    const double t0 = now(f);
    if (auto r = co_await f.send(peer, {seq, spaced}, one); !r) co_return fail(r.error());
    samples.push_back(now(f) - t0);
    if (auto r = co_await f.recv(peer, {seq, ack}, one); !r) co_return fail(r.error());
  }
  out.o = median(samples);
  // Streams of n messages of b bytes, each send after the last completed; the slope in n
  // is the time per message, free of the latency at either end.
  const auto stream_time = [&](int n, std::span<std::byte> msg) -> task<result<double>> {
    const double t0 = now(f);
    for (int i = 0; i < n; ++i)
      if (auto r = co_await f.send(peer, {seq, stream}, msg); !r) co_return fail(r.error());
    if (auto r = co_await f.recv(peer, {seq, stream_ack}, one); !r) co_return fail(r.error());
    co_return now(f) - t0;
  };
  const int n = std::max(opt.stream, 8), nb = std::max(n / 8, 8);
  double t[4];
  const int counts[4] = {n / 4, n, nb / 4, nb};
  for (int i = 0; i < 4; ++i) {
    auto r = co_await stream_time(counts[i], i < 2 ? std::span(one) : std::span(big));
    if (!r) co_return fail(r.error());
    t[i] = *r;
  }
  out.g = (t[1] - t[0]) / (counts[1] - counts[0]);
  // Between ranks of a host a one-byte send costs tens of nanoseconds, below the noise
  // of two streams' difference, and the slope can come out at or below zero; the long
  // stream's mean per message (its latency counted once) is then the estimate, as for G.
  if (out.g <= 0) out.g = t[1] / counts[1];
  const double per_big = (t[3] - t[2]) / (counts[3] - counts[2]);
  const double bytes = static_cast<double>(std::max<std::size_t>(opt.big_bytes, 2) - 1);
  out.G = (per_big - out.g) / bytes;
  // A noisy slope (a live machine: one of the short streams held up) can come out below
  // zero; then the long stream's mean per message, an upper bound that includes its
  // latency once, is the better estimate than no cost per byte at all.
  if (out.G < 0) out.G = std::max(0.0, (t[3] / counts[3] - out.g) / bytes);
  co_return out;
}

task<result<void>> echo(fabric& f, std::uint32_t seq, const calibrate_options& opt) {
  std::vector<std::byte> one(1), big(opt.big_bytes);
  for (int i = 0; i < opt.repetitions; ++i) {
    if (auto r = co_await f.recv(0, {seq, ping}, one); !r) co_return fail(r.error());
    if (auto r = co_await f.send(0, {seq, pong}, one); !r) co_return fail(r.error());
  }
  for (int i = 0; i < opt.repetitions; ++i) {
    if (auto r = co_await f.recv(0, {seq, spaced}, one); !r) co_return fail(r.error());
    if (auto r = co_await f.send(0, {seq, ack}, one); !r) co_return fail(r.error());
  }
  const int n = std::max(opt.stream, 8), nb = std::max(n / 8, 8);
  const int counts[4] = {n / 4, n, nb / 4, nb};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < counts[i]; ++j)
      if (auto r = co_await f.recv(0, {seq, stream}, i < 2 ? std::span(one) : std::span(big)); !r) co_return fail(r.error());
    if (auto r = co_await f.send(0, {seq, stream_ack}, one); !r) co_return fail(r.error());
  }
  co_return result<void>{};
}

// A round with every rank at once: a pass of the dissemination barrier (every rank signals
// and hears from k ranks a round, as the round-based schedules' rounds do), timed per
// round. The ping-pong between two ranks while the others wait leaves out what the ranks
// cost one another: on 8 emulated hosts sharing 2 cores a round takes several times its
// L + 2o (benchmarks/results/calibrate-8hosts), and without it the model chose 7 blocks
// for a 64 KiB reduce that ran fastest with 3 or 4. The median over passes; each pass is
// a barrier of its own (sequence number and deadline), so one that times out names its
// pass.
task<result<double>> measure_round(communicator& c, const calibrate_options& opt) {
  fabric& f = c.get_fabric();
  const int rounds = algorithms::dissemination_rounds(c.size(), f.ports());
  std::vector<double> samples;
  for (int i = 0; i < opt.repetitions; ++i) {
    const std::uint32_t seq = detail::comm_access::next_seq(c);
    detail::deadline_scope deadline(f, seq, c.options().timeout);
    const double t0 = now(f);
    if (auto res = co_await algorithms::barrier_dissemination(f, seq); !res) co_return fail(detail::finish(c, fail(res.error())).error());
    samples.push_back((now(f) - t0) / rounds);
  }
  co_return median(samples);
}

// gamma: combining two operands of doubles into a third with the built-in sum, the
// reductions' own code path, per byte; the least of a few runs (the first touches the
// pages). The operands are larger than any cache, as where gamma counts: a large
// allreduce combines what arrives with an operand that is not in cache, into a result
// that is not either (a cache-resident 1 MiB measured 0.14 ns per byte here, where the
// ring allreduce's blocks exposed about 1 ns). Real time even on the simulator's
// fabric, whose clock charges no compute.
double measure_gamma() {
  constexpr std::size_t count = (std::size_t{32} << 20) / sizeof(double);
  std::vector<double> a(count, 1.0), b(count, 2.0), c(count, 0.0);
  const reduction<double> sum(ops::sum);
  const auto& op = sum.erased();
  double best = 1e300;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    op(reinterpret_cast<const std::byte*>(a.data()), reinterpret_cast<const std::byte*>(b.data()), reinterpret_cast<std::byte*>(c.data()), count);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // Keep the compiler from dropping the loop.
  volatile double sink = c[count / 2];
  (void)sink;
  return best / static_cast<double>(count * sizeof(double));
}

// sharing: a broadcast of 16 big messages' bytes by Träff's circulant schedule (links
// change partners every round) and by the pipelined ring (they do not), each with the
// block count the measured model gives it, `trials` times, every rank's slowest time.
// Each is divided by its prediction without sharing; how much more the circulant's ratio
// is than the ring's is what sharing costs it: sharing = ratio_circulant / ratio_ring - 1
// (per trial; at least 0). The ring's ratio also carries everything the two share (the
// CPU, the stack), so that only the difference in links remains.
task<result<calibration::spread>> measure_sharing(communicator& c, loggp_params m, const calibrate_options& opt) {
  m.sharing = 0;
  const std::size_t bytes = 16 * opt.big_bytes;
  std::vector<std::byte> buf(bytes, std::byte{1});
  std::vector<double> share;
  for (int t = 0; t < opt.trials; ++t) {
    double ratio[2] = {0, 0};
    const algorithm algs[2] = {algorithm::circulant, algorithm::ring};
    for (int i = 0; i < 2; ++i) {
      const auto best = best_broadcast_blocks(algs[i], c.size(), bytes, m, 1, c.options().min_block_bytes);
      std::vector<double> slowest(1, 0);
      if (auto r = co_await allreduce(c, std::span<const double>(slowest), std::span(slowest), ops::max); !r) co_return fail(r.error());
      const auto t0 = std::chrono::steady_clock::now();
      if (auto r = co_await broadcast(c, std::span(buf), 0, {.alg = algs[i], .blocks = best.blocks, .model = m}); !r)
        co_return fail(r.error());
      slowest[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (auto r = co_await allreduce(c, std::span<const double>(slowest), std::span(slowest), ops::max); !r) co_return fail(r.error());
      ratio[i] = slowest[0] / best.predicted;
    }
    share.push_back(std::max(0.0, ratio[0] / ratio[1] - 1));
  }
  co_return spread_of(share);
}

// Rank 0's partners: a rank of another host (the network, one rail) and, where rank 0's
// host has others, one of them (the host link). Without a layout, rank 1, as a host of
// its own; on a single host, its link is the only one.
struct pairs {
  int net = 1, host = -1;
};

pairs pairs_of(const fabric& f) {
  const topology* t = f.layout();
  if (!t || t->size() != f.size()) return {};
  pairs p{-1, -1};
  for (int r = 1; r < t->size(); ++r) {
    const bool same = t->host_of[static_cast<std::size_t>(r)] == t->host_of[0];
    if (same && p.host < 0) p.host = r;
    if (!same && p.net < 0) p.net = r;
  }
  if (p.net < 0) std::swap(p.net, p.host);
  return p;
}

}  // namespace

std::string calibration::json() const {
  nlohmann::ordered_json j;
  j["fabric"] = fabric;
  j["ranks"] = ranks;
  j["model"] = {{"L", model.L}, {"o", model.o}, {"g", model.g}, {"G", model.G}, {"gamma", model.gamma}, {"sharing", model.sharing}, {"round", model.round}};
  const std::pair<const char*, const spread*> parts[] = {{"L", &L}, {"o", &o}, {"g", &g}, {"G", &G}, {"gamma", &gamma}, {"sharing", &sharing}, {"round", &round}};
  for (const auto& [name, sp] : parts) j["spread"][name] = {sp->min, sp->median, sp->max};
  if (model.host) {
    j["model"]["host"] = {{"L", model.host->L}, {"o", model.host->o}, {"g", model.host->g}, {"G", model.host->G}};
    const std::pair<const char*, const spread*> host_parts[] = {{"L", &host_L}, {"o", &host_o}, {"g", &host_g}, {"G", &host_G}};
    for (const auto& [name, sp] : host_parts) j["spread"]["host"][name] = {sp->min, sp->median, sp->max};
  }
  return j.dump();
}

task<result<calibration>> calibrate(communicator& c, calibrate_options opt) {
  const std::uint32_t seq = detail::comm_access::next_seq(c);
  if (c.broken()) co_return fail(errc::broken);
  if (c.size() < 2) {
    detail::refuse(c, "calibrate: needs at least 2 ranks (it times messages between ranks 0 and 1)");
    co_return fail(errc::invalid_argument);
  }
  if (opt.trials < 1 || opt.repetitions < 1 || opt.stream < 8 || opt.big_bytes < 2) {
    detail::refuse(c, "calibrate: trials and repetitions must be >= 1, stream >= 8, big_bytes >= 2");
    co_return fail(errc::invalid_argument);
  }
  auto& f = c.get_fabric();
  const auto pr = pairs_of(f);
  // Measurements by rank 0 against its peers; every rank then takes rank 0's figures:
  // five spreads of the network's L, o, g, G, gamma, four of the host link's, and
  // whether there is one.
  std::vector<double> figures(3 * 9 + 1, 0);
  if (c.rank() == 0 || c.rank() == pr.net || c.rank() == pr.host) {
    detail::deadline_scope deadline(f, seq, c.options().timeout);
    std::vector<double> v[9];  // L, o, g, G, gamma; the host link's L, o, g, G
    const auto record = [&](const trial& r, int first) {
      v[first].push_back(std::max(0.0, r.rtt / 2 - 2 * r.o));
      v[first + 1].push_back(r.o);
      v[first + 2].push_back(r.g);
      v[first + 3].push_back(r.G);
    };
    for (int t = 0; t < opt.trials; ++t) {
      if (c.rank() != 0) {
        if (auto r = co_await echo(f, seq, opt); !r) co_return fail(detail::finish(c, std::move(r)).error());
        continue;
      }
      if (opt.progress) opt.progress("L, o, g, G and gamma: trial " + std::to_string(t + 1) + " of " + std::to_string(opt.trials));
      auto r = co_await measure(f, seq, opt, pr.net);
      if (!r) co_return fail(detail::finish(c, fail(r.error())).error());
      record(*r, 0);
      // The simulator's clock charges no compute: its gamma is 0, as its runs take none.
      v[4].push_back(f.model_time() ? 0.0 : measure_gamma());
      if (pr.host < 0) continue;
      if (opt.progress) opt.progress("the host link (ranks 0 and " + std::to_string(pr.host) + "): trial " + std::to_string(t + 1));
      auto h = co_await measure(f, seq, opt, pr.host);
      if (!h) co_return fail(detail::finish(c, fail(h.error())).error());
      record(*h, 5);
    }
    if (c.rank() == 0) {
      for (int i = 0; i < 9; ++i) {
        if (v[i].empty()) continue;
        const auto sp = spread_of(v[i]);
        figures[static_cast<std::size_t>(3 * i)] = sp.min;
        figures[static_cast<std::size_t>(3 * i + 1)] = sp.median;
        figures[static_cast<std::size_t>(3 * i + 2)] = sp.max;
      }
      figures.back() = pr.host >= 0;
    }
  }
  if (auto r = co_await broadcast(c, std::span(figures), 0); !r) co_return fail(r.error());
  calibration out;
  calibration::spread* parts[9] = {&out.L, &out.o, &out.g, &out.G, &out.gamma, &out.host_L, &out.host_o, &out.host_g, &out.host_G};
  for (int i = 0; i < 9; ++i)
    *parts[i] = {figures[static_cast<std::size_t>(3 * i)], figures[static_cast<std::size_t>(3 * i + 1)], figures[static_cast<std::size_t>(3 * i + 2)]};
  out.model = {out.L.median, out.o.median, out.g.median, out.G.median, out.gamma.median};
  if (figures.back() != 0) out.model.host = loggp_link{out.host_L.median, out.host_o.median, out.host_g.median, out.host_G.median};
  // The rounds under load: every rank takes part, rank 0's times are the spread.
  std::vector<double> rounds(3, 0);
  {
    std::vector<double> per_trial;
    for (int t = 0; t < opt.trials; ++t) {
      if (opt.progress && c.rank() == 0) opt.progress("a round with all " + std::to_string(c.size()) + " ranks (dissemination barrier): trial " + std::to_string(t + 1));
      auto r = co_await measure_round(c, opt);
      if (!r) co_return fail(r.error());
      per_trial.push_back(*r);
    }
    const auto sp = spread_of(per_trial);
    rounds = {sp.min, sp.median, sp.max};
  }
  if (auto r = co_await broadcast(c, std::span(rounds), 0); !r) co_return fail(r.error());
  out.round = {rounds[0], rounds[1], rounds[2]};
  out.model.round = out.round.median;
  out.fabric = std::string(f.name());
  out.ranks = c.size();
  // sharing: needs three ranks to share a link, and a clock that is not the simulator's
  // (whose rounds are exact: 0 there).
  if (c.size() >= 3 && !f.model_time()) {
    if (opt.progress && c.rank() == 0) opt.progress("sharing (" + std::to_string(c.size()) + " ranks)");
    auto sh = co_await measure_sharing(c, out.model, opt);
    if (!sh) co_return fail(sh.error());
    out.sharing = *sh;
  } else {  // not measured: the communicator's (the simulator's is 0: its cost model has none)
    const double keep = f.model_time() ? 0.0 : c.options().model.sharing;
    out.sharing = {keep, keep, keep};
  }
  out.model.sharing = out.sharing.median;
  co_return out;
}

result<loggp_params> parse_calibration(std::string_view text, std::string* why) {
  const auto bad = [&](std::string w) -> result<loggp_params> {
    if (why) *why = std::move(w);
    return fail(errc::invalid_argument);
  };
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return bad("not JSON (optcast calibrate --output writes the file)");
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return bad("no \"model\" object");
  const auto& model = j["model"];
  // gamma and sharing came later than L, o, g, G: a file without them keeps the defaults.
  loggp_params m;
  m.gamma = communicator_options{}.model.gamma;
  m.sharing = communicator_options{}.model.sharing;
  const std::pair<const char*, double*> fields[] = {{"L", &m.L}, {"o", &m.o}, {"g", &m.g}, {"G", &m.G}, {"gamma", &m.gamma}, {"round", &m.round},
                                                    {"sharing", &m.sharing}};
  for (const auto& [name, field] : fields) {
    if (!model.contains(name)) {
      if (std::string_view(name) == "gamma" || std::string_view(name) == "sharing" || std::string_view(name) == "round") continue;
      return bad(std::string("\"model\" has no \"") + name + "\"");
    }
    const auto& v = model[name];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      return bad(std::string("\"") + name + "\" is not a non-negative number");
    *field = v.get<double>();
  }
  if (m.L + 2 * m.o <= 0 || std::max(m.g, m.o) <= 0) return bad("L + 2o and max(g, o) must be positive");
  if (model.contains("host")) {  // measured where ranks share hosts
    const auto& h = model["host"];
    if (!h.is_object()) return bad("\"host\" is not an object");
    loggp_link link;
    const std::pair<const char*, double*> host_fields[] = {{"L", &link.L}, {"o", &link.o}, {"g", &link.g}, {"G", &link.G}};
    for (const auto& [name, field] : host_fields) {
      if (!h.contains(name) || !h[name].is_number() || !std::isfinite(h[name].get<double>()) || h[name].get<double>() < 0)
        return bad(std::string("\"host\" has no non-negative \"") + name + "\"");
      *field = h[name].get<double>();
    }
    if (link.L + 2 * link.o <= 0 || std::max(link.g, link.o) <= 0) return bad("the host link's L + 2o and max(g, o) must be positive");
    m.host = link;
  }
  return m;
}

result<loggp_params> load_calibration(const std::string& path, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    if (why) *why = "cannot read " + path;
    return fail(errc::invalid_argument);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string w;
  auto m = parse_calibration(ss.str(), &w);
  if (!m && why) *why = path + ": " + w;
  return m;
}

}  // namespace optcast
