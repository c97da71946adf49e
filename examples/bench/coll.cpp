// optcast-bench coll: the collectives over a size list, timed and checked the way the
// peer benchmarks time and check Open MPI and Gloo (../shared/bench/: mpi_coll_bench.c,
// gloo_coll_bench.cpp), so that its lines go into the same table beside theirs.
//
// One line per (collective, size): "label op bytes reps min_us med_us max_us ok".
// Sizes: bcast, reduce, allreduce: the whole buffer (reduce, allreduce: float32 sum);
// scatter, gather, allgather, alltoall: one rank's block (the root, or every rank, holds
// p blocks). Timing --timing sync: the ranks share one CLOCK_MONOTONIC (network
// namespaces of one kernel); every repetition they agree on a start instant
// Ts = max(now) + 1 ms, sleep until it, run the collective, and the repetition takes the
// latest rank's end - Ts. --timing local: a barrier, then the largest local duration
// (what OSU-style benchmarks do; works across machines). --timing loop: a barrier, then
// --calls K calls back to back, the repetition the largest local duration / K (the
// start's wake-up, tens of microseconds, paid once per K calls: per-call costs of a few
// microseconds show; as the peers' -T loop -K). One warm-up; results checked on the
// warm-up and the last repetition, on every rank.
#include <time.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <nlohmann/json.hpp>
#include <optcast/asio.hpp>
#include <optcast/optcast.hpp>
#include <optcast/progress.hpp>

#include <functional>
#include <optional>

#include "../measure.hpp"
#include "bench.hpp"
#include "cli.hpp"

namespace optcast::bench {

namespace {

// The peer benchmarks' operation names, and the collective each is.
const std::map<std::string, collective> op_names{
    {"bcast", collective::broadcast}, {"scatter", collective::scatter},     {"gather", collective::gather},
    {"reduce", collective::reduce},   {"allreduce", collective::allreduce}, {"allgather", collective::allgather},
    {"alltoall", collective::alltoall}, {"barrier", collective::barrier}};

// The peers' patterns, so a wrong byte means the same in every benchmark.
unsigned char pat(int r, std::size_t i) { return static_cast<unsigned char>(r * 131 + i * 7 + 1); }
float fval(int r, std::size_t i) { return static_cast<float>((static_cast<std::size_t>(r) + i) % 13); }

struct buffers {
  std::size_t m = 0;
  std::vector<unsigned char> sb, rb;  // up to p * m bytes
  std::vector<float> fs, fr;          // m / 4 floats
};

void init(const std::string& op, buffers& b, int rank, int p) {
  const std::size_t m = b.m, n = m / sizeof(float);
  if (op == "barrier") return;  // moves nothing (the size column is the peers' format)
  if (op == "bcast") {
    for (std::size_t i = 0; i < m; ++i) b.rb[i] = rank == 0 ? pat(0, i) : 0;
  } else if (op == "scatter") {
    if (rank == 0)
      for (int r = 0; r < p; ++r)
        for (std::size_t i = 0; i < m; ++i) b.sb[static_cast<std::size_t>(r) * m + i] = pat(r, i);
    std::fill_n(b.rb.begin(), m, 0);
  } else if (op == "gather" || op == "allgather") {
    for (std::size_t i = 0; i < m; ++i) b.sb[i] = pat(rank, i);
    std::fill_n(b.rb.begin(), static_cast<std::size_t>(p) * m, 0);
  } else if (op == "alltoall") {
    // Block j of rank r goes to rank j: pattern (r * p + j).
    for (int j = 0; j < p; ++j)
      for (std::size_t i = 0; i < m; ++i) b.sb[static_cast<std::size_t>(j) * m + i] = pat(rank * p + j, i);
    std::fill_n(b.rb.begin(), static_cast<std::size_t>(p) * m, 0);
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      b.fs[i] = fval(rank, i);
      b.fr[i] = -1.f;
    }
  }
}

bool check(const std::string& op, const buffers& b, int rank, int p) {
  const std::size_t m = b.m, n = m / sizeof(float);
  if (op == "barrier") return true;  // that no rank leaves early: collectives_test
  if (op == "bcast") {
    for (std::size_t i = 0; i < m; ++i)
      if (b.rb[i] != pat(0, i)) return false;
  } else if (op == "scatter") {
    for (std::size_t i = 0; i < m; ++i)
      if (b.rb[i] != pat(rank, i)) return false;
  } else if (op == "gather" || op == "allgather") {
    if (op == "gather" && rank != 0) return true;
    for (int r = 0; r < p; ++r)
      for (std::size_t i = 0; i < m; ++i)
        if (b.rb[static_cast<std::size_t>(r) * m + i] != pat(r, i)) return false;
  } else if (op == "alltoall") {
    for (int r = 0; r < p; ++r)
      for (std::size_t i = 0; i < m; ++i)
        if (b.rb[static_cast<std::size_t>(r) * m + i] != pat(r * p + rank, i)) return false;
  } else {
    if (op == "reduce" && rank != 0) return true;
    for (std::size_t i = 0; i < n; ++i) {
      float s = 0;
      for (int r = 0; r < p; ++r) s += fval(r, i);
      if (b.fr[i] != s) return false;
    }
  }
  return true;
}

// The collective named once per (collective, size), not compared by name at each call:
// a loop of small calls would time the string comparisons too.
enum class coll_kind { barrier, bcast, scatter, gather, allgather, alltoall, reduce, allreduce };

coll_kind coll_kind_of(const std::string& op) {
  static const std::map<std::string, coll_kind> kinds{{"barrier", coll_kind::barrier},     {"bcast", coll_kind::bcast},
                                                    {"scatter", coll_kind::scatter},     {"gather", coll_kind::gather},
                                                    {"allgather", coll_kind::allgather}, {"alltoall", coll_kind::alltoall},
                                                    {"reduce", coll_kind::reduce},       {"allreduce", coll_kind::allreduce}};
  return kinds.at(op);  // CLI11 checked the names
}

task<result<void>> run_op(communicator& c, coll_kind op, buffers& b, const collective_options& o) {
  const std::size_t m = b.m, pm = static_cast<std::size_t>(c.size()) * m, n = m / sizeof(float);
  const auto bytes = [](std::vector<unsigned char>& v, std::size_t k) { return std::as_writable_bytes(std::span(v.data(), k)); };
  const auto cbytes = [](const std::vector<unsigned char>& v, std::size_t k) { return std::as_bytes(std::span(v.data(), k)); };
  const std::span<const float> in(b.fs.data(), n);
  const std::span<float> out(b.fr.data(), n);
  switch (op) {
    case coll_kind::barrier: return barrier(c, o);
    case coll_kind::bcast: return broadcast(c, bytes(b.rb, m), 0, o);
    case coll_kind::scatter: return scatter<std::byte>(c, cbytes(b.sb, c.rank() == 0 ? pm : 0), bytes(b.rb, m), 0, o);
    case coll_kind::gather: return gather<std::byte>(c, cbytes(b.sb, m), bytes(b.rb, c.rank() == 0 ? pm : 0), 0, o);
    case coll_kind::allgather: return allgather<std::byte>(c, cbytes(b.sb, m), bytes(b.rb, pm), o);
    case coll_kind::alltoall: return alltoall<std::byte>(c, cbytes(b.sb, pm), bytes(b.rb, pm), o);
    case coll_kind::reduce: return reduce<float>(c, in, out, ops::sum, 0, o);
    case coll_kind::allreduce: break;
  }
  return allreduce<float>(c, in, out, ops::sum, o);
}

double seconds_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The largest of every rank's values, on every rank (the timing's own collective,
// outside the timed region).
// How a rank runs a task to its end: run(), or through the completion-token API (--api).
using runner = std::function<result<void>(task<result<void>>)>;

result<std::array<double, 2>> max_of(communicator& c, const runner& call, std::array<double, 2> mine) {
  std::array<double, 2> out{};
  if (auto r = call(allreduce<double>(c, std::span<const double>(mine), std::span(out), ops::max)); !r) return fail(r.error());
  return out;
}

struct coll_row {
  std::string op;
  std::size_t bytes;
  int reps;
  double min_us, med_us, max_us;
  bool ok;
  std::string alg;
  int blocks;
};

// What the call runs (the automatic choice resolved), for the comment line beside it.
std::pair<std::string, int> plan_of(communicator& c, const std::string& op, std::size_t m, const collective_options& o) {
  const collective coll = op_names.at(op);
  const std::size_t p = static_cast<std::size_t>(c.size());
  call_shape shape;
  if (coll == collective::reduce || coll == collective::allreduce) {
    shape.bytes = m / sizeof(float) * sizeof(float);
    shape.order_free = false;  // float sums round differently in another order
  } else {
    shape.bytes = coll == collective::broadcast ? m : m * p;
    shape.largest = shape.smallest = m;
  }
  const auto plan = plan_collective(c, coll, shape, o);
  if (!plan) return {"refused: " + c.last_error(), 0};
  return {std::string(to_string(plan->alg)), plan->blocks};
}

}  // namespace

// --api asio: the communicator on an io_context of the program's, which this thread
// runs while it waits; stopped before the communicator goes (nothing runs it then).
struct stop_on_exit {
  asio::io_context* io;
  ~stop_on_exit() {
    if (io) io->stop();
  }
};

int coll_cmd(int argc, char** argv) {
  CLI::App app{"Times broadcast, scatter, gather, reduce, allreduce, allgather, alltoall and barrier over a size list, every result\n"
               "checked on every rank, and prints the peer benchmarks' line (../shared/bench/): label op bytes reps\n"
               "min_us med_us max_us ok.",
               "optcast-bench coll"};
  std::string fabric_name(fabric_table().front().name), label = "optcast", timing = "sync";
  std::vector<std::string> ops{"bcast", "scatter", "gather", "reduce", "allreduce", "allgather"}, algs;
  std::vector<std::size_t> sizes;
  std::size_t min_bytes = 8, max_bytes = std::size_t{64} << 20;
  double budget = 2.0;
  int np = 0, blocks = 0, min_reps = 3, max_reps = 200, calls = 50;
  bool json = false;
  std::string api = "task";
  app.add_option("--api", api,
                 "task: run(comm, collective) on the communicator's own loop; asio: async_run(comm, collective, "
                 "callback) on an io_context of the program's, which the calling thread runs until the callback")
      ->check(CLI::IsMember({"task", "asio"}))->capture_default_str();
  cli::add_fabric(app, fabric_name);
  app.add_option("--np", np, "start N rank processes on this machine")->check(CLI::Range(1, 4096));
  app.add_option("--ops,-o", ops, "collectives: bcast, scatter, gather, reduce, allreduce, allgather, alltoall, barrier")->delimiter(',')
      ->check(CLI::IsMember({"bcast", "scatter", "gather", "reduce", "allreduce", "allgather", "alltoall", "barrier"}))->capture_default_str();
  app.add_option("--sizes,-l", sizes, "sizes (overrides --min-bytes/--max-bytes)")->delimiter(',')->transform(cli::byte_size());
  app.add_option("--min-bytes,-s", min_bytes, "smallest size of the default list: 8, then powers of 4 from 16")
      ->transform(cli::byte_size())->capture_default_str();
  app.add_option("--max-bytes,-S", max_bytes, "largest size of the default list")->transform(cli::byte_size())->capture_default_str();
  app.add_option("--time,-t", budget, "seconds of repetitions per (collective, size)")->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--min-reps,-m", min_reps, "fewest timed repetitions")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--max-reps,-r", max_reps, "most timed repetitions")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--label,-L", label, "the first column")->capture_default_str();
  app.add_option("--timing,-T", timing,
                 "sync (one shared clock: all start at an agreed instant), local (barrier, largest local time) or loop "
                 "(barrier, --calls calls back to back, largest local time / calls)")
      ->check(CLI::IsMember({"sync", "local", "loop"}))->capture_default_str();
  auto* calls_opt = app.add_option("--calls,-K", calls, "loop timing: calls back to back per timed repetition")
                        ->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--alg", algs, "algorithms: NAME for every collective that has it, or OP=NAME (e.g. bcast=fibonacci)")->delimiter(',');
  app.add_option("--blocks", blocks, "pipelining depth for every collective (0: the library's choice)")->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_flag("--json", json, "one JSON object instead of the lines");
  std::map<std::string, algorithm> chosen;  // op -> forced algorithm
  app.callback([&] {
    if (min_reps > max_reps) throw CLI::ValidationError("--min-reps", "must not exceed --max-reps");
    if (min_bytes > max_bytes) throw CLI::ValidationError("--min-bytes", "must not exceed --max-bytes");
    if (calls_opt->count() && timing != "loop") throw CLI::ValidationError("--calls", "goes with --timing loop");
    for (const auto& a : algs) {
      const auto eq = a.find('=');
      const std::string name = eq == std::string::npos ? a : a.substr(eq + 1);
      const auto alg = parse_algorithm(name);
      if (!alg) throw CLI::ValidationError("--alg", "'" + name + "' is no algorithm (optcast simulate --list)");
      bool used = false;
      for (const auto& op : ops) {
        if (eq != std::string::npos && a.substr(0, eq) != op) continue;
        if (*alg != algorithm::automatic && !find(op_names.at(op), *alg)) {
          if (eq != std::string::npos)
            throw CLI::ValidationError("--alg", "'" + name + "' is not an algorithm of " + op + " (" +
                                                    algorithm_names(op_names.at(op)) + ")");
          continue;
        }
        chosen[op] = *alg;
        used = true;
      }
      if (!used) throw CLI::ValidationError("--alg", "'" + a + "' applies to none of the collectives run");
    }
  });
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto status = launch_local(argc, argv)) return *status;
  if (sizes.empty()) {
    if (min_bytes <= 8) sizes.push_back(8);
    for (std::size_t s = 16; s <= max_bytes; s *= 4)
      if (s >= min_bytes) sizes.push_back(s);
  }

  std::optional<asio::io_context> io;
  if (api == "asio") io.emplace(1);
  auto comm = io ? join(*io, fabric_name) : join(fabric_name);
  stop_on_exit stop{io ? &*io : nullptr};
  // Every call of the benchmark's, timed or not, through the API chosen.
  const runner call = [&](task<result<void>> t) -> result<void> {
    if (!io) return run(comm, std::move(t));
    bool done = false;
    std::error_code ec;
    async_run(comm, std::move(t), [&](std::error_code e) {
      ec = e;
      done = true;
    });
    io->restart();
    while (!done) io->run_one();
    if (ec) return fail(ec);
    return {};
  };
  const int rank = comm.rank(), p = comm.size();
  const std::size_t maxm = *std::max_element(sizes.begin(), sizes.end());
  buffers b;
  b.sb.resize(maxm * static_cast<std::size_t>(p));
  b.rb.resize(maxm * static_cast<std::size_t>(p));
  b.fs.resize(maxm / sizeof(float) + 1);
  b.fr.resize(maxm / sizeof(float) + 1);
  const auto failed = [&](const char* what, std::error_code ec) {
    std::fprintf(stderr, "optcast-bench coll: rank %d: %s: %s\n", rank, what, describe(ec, comm.failure_detail()).c_str());
    return 1;
  };
  if (rank == 0 && !json) {
    std::printf("# %s: np=%d fabric=%s budget=%.1fs reps=[%d,%d] timing=%s api=%s\n", label.c_str(), p,
                fabric_description(comm).c_str(), budget, min_reps, max_reps,
                timing == "sync" ? "sync=max(end)-Ts" : timing == "loop" ? "loop=max(local)/K" : "max(local)", api.c_str());
    if (timing == "loop") std::printf("# loop: K=%d calls per rep\n", calls);
    std::printf("# label op bytes reps min_us med_us max_us ok\n");
    std::fflush(stdout);
  }
  std::vector<coll_row> rows;
  // On a terminal, what is being measured (rank 0; the other ranks' stderr is the same).
  progress_line progress(rank != 0);
  std::size_t pair = 0;
  for (const auto& op : ops)
    for (const std::size_t m : sizes) {
      b.m = m;
      progress.show("coll: " + op + " " + format_bytes(m) + " (" + std::to_string(++pair) + " of " +
                    std::to_string(ops.size() * sizes.size()) + ")");
      collective_options o{.alg = chosen.count(op) ? chosen[op] : algorithm::automatic, .blocks = blocks};
      const coll_kind kind = coll_kind_of(op);
      const auto [alg_name, n] = plan_of(comm, op, m, o);
      bool ok = true;
      init(op, b, rank, p);
      if (auto r = call(optcast::barrier(comm)); !r) return failed("barrier", r.error());
      if (auto r = call(run_op(comm, kind, b, o)); !r) return failed(op.c_str(), r.error());  // warm-up
      ok &= check(op, b, rank, p);
      std::vector<double> t;
      double total = 0;
      while (static_cast<int>(t.size()) < max_reps && (static_cast<int>(t.size()) < min_reps || total < budget)) {
        const int done = static_cast<int>(t.size());
        // The same decision on every rank (total is the same everywhere): re-initialise
        // before what may be the last repetition, and check after it.
        const bool last = done + 1 >= min_reps && (done + 1 >= max_reps || total + (done ? total / done : 0) >= budget);
        if (last) init(op, b, rank, p);
        double ts = 0;
        if (timing == "sync") {
          auto agreed = max_of(comm, call, {seconds_now(), 0});
          if (!agreed) return failed("agreeing on a start", agreed.error());
          ts = (*agreed)[0] + 1e-3;
          timespec w{static_cast<time_t>(ts), static_cast<long>((ts - static_cast<double>(static_cast<time_t>(ts))) * 1e9)};
          while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &w, nullptr)) {
          }
        } else if (auto r = call(optcast::barrier(comm)); !r) {
          return failed("barrier", r.error());
        }
        // Each call's results are the same (separate send and receive buffers): the
        // last's are checked.
        const int k_calls = timing == "loop" ? calls : 1;
        const double start = seconds_now();
        for (int k = 0; k < k_calls; ++k)
          if (auto r = call(run_op(comm, kind, b, o)); !r) return failed(op.c_str(), r.error());
        const double end = seconds_now();
        if (last) ok &= check(op, b, rank, p);
        auto mx = max_of(comm, call, {timing == "sync" ? end : end - start, 0});
        if (!mx) return failed("collecting times", mx.error());
        const double rep = timing == "sync" ? (*mx)[0] - ts : (*mx)[0] / k_calls;
        t.push_back(rep);
        total += rep;
      }
      auto all_ok = max_of(comm, call, {ok ? 0.0 : 1.0, 0});
      if (!all_ok) return failed("collecting checks", all_ok.error());
      ok = (*all_ok)[0] == 0;
      std::sort(t.begin(), t.end());
      const std::size_t k = t.size();
      const double med = k % 2 ? t[k / 2] : (t[k / 2 - 1] + t[k / 2]) / 2;
      rows.push_back({op, m, static_cast<int>(k), t.front() * 1e6, med * 1e6, t.back() * 1e6, ok, alg_name, n});
      if (rank == 0 && !json) {
        std::printf("# %s %zu: %s, n = %d\n%s %s %zu %zu %.1f %.1f %.1f %s\n", op.c_str(), m, alg_name.c_str(), n, label.c_str(),
                    op.c_str(), m, k, t.front() * 1e6, med * 1e6, t.back() * 1e6, ok ? "ok" : "FAIL");
        std::fflush(stdout);
      }
    }
  const bool all_ok = std::all_of(rows.begin(), rows.end(), [](const coll_row& r) { return r.ok; });
  if (rank == 0 && json) {
    nlohmann::ordered_json j = {{"benchmark", "coll"}, {"label", label}, {"np", p}, {"fabric", fabric_description(comm)},
                                {"timing", timing}, {"api", api}, {"budget_s", budget}};
    if (timing == "loop") j["calls"] = calls;
    auto& out = j["results"] = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      out.push_back({{"op", r.op}, {"bytes", r.bytes}, {"reps", r.reps}, {"min_us", r.min_us}, {"med_us", r.med_us},
                     {"max_us", r.max_us}, {"ok", r.ok}, {"algorithm", r.alg}, {"blocks", r.blocks}});
    std::puts(j.dump().c_str());
  }
  return all_ok ? 0 : 1;
}

}  // namespace optcast::bench
