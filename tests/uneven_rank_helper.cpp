// One rank of a multi-process job whose ranks are not in step (started by process_test
// through --np): every collective in turn (--repeat calls of each in a row, with one
// root), --rounds times, each result checked, the roots moving round the ranks. One rank (--slow-rank) sleeps --slow-ms after each
// call, so the roots run ahead, finish first and leave while the others are still at
// work: a rank that has finished must not fail the ones still working. With --odd-rank K
// --odd-root R, rank K names root R in its rooted calls (a mismatched call, as a user's
// bug would make it). Writes "ok <calls>" or "error <code> <text>" to
// <report>/rank-<r>.txt, after comm.leave() (the job's outcome, not only this rank's).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "optcast/optcast.hpp"
#include "cli.hpp"

namespace {

using optcast::result;

std::byte pattern(std::size_t i, std::uint64_t call) { return static_cast<std::byte>((i * 131 + call * 7 + (i >> 9)) & 0xff); }

struct caller {
  optcast::communicator& comm;
  optcast::collective_options opts;
  int odd_rank = -1, odd_root = 0;
  std::string wrong;  // the first wrong result

  int P() const { return comm.size(); }
  int R() const { return comm.rank(); }
  int root_of(int root) const { return R() == odd_rank ? odd_root : root; }
  void check(bool ok, const std::string& what, std::uint64_t call) {
    if (!ok && wrong.empty()) wrong = "wrong " + what + " in call " + std::to_string(call);
  }

  // Rank r's contribution of m elements in call `call`: what gather, allgather and the
  // v-variants expect at position r.
  std::vector<std::byte> segment(int r, std::size_t m, std::uint64_t call) const {
    std::vector<std::byte> s(m);
    for (std::size_t j = 0; j < m; ++j) s[j] = pattern(static_cast<std::size_t>(r) * 977 + j, call);
    return s;
  }

  result<void> one(const std::string& kind, std::size_t n, int root, std::uint64_t call) {
    using namespace optcast;
    const auto p = static_cast<std::size_t>(P());
    const std::size_t m = n / p + 1;
    std::vector<std::int64_t> counts(p);
    for (std::size_t j = 0; j < p; ++j) counts[j] = static_cast<std::int64_t>(m + j);
    std::int64_t total = 0;
    for (auto c : counts) total += c;
    const auto mine = static_cast<std::size_t>(counts[static_cast<std::size_t>(R())]);
    if (kind == "broadcast") {
      std::vector<std::byte> b(n);
      for (std::size_t j = 0; j < n; ++j) b[j] = R() == root ? pattern(j, call) : ~pattern(j, call);
      if (auto r = run(comm, broadcast(comm, std::span(b), root_of(root), opts)); !r) return r;
      bool ok = true;
      for (std::size_t j = 0; j < n; ++j) ok = ok && b[j] == pattern(j, call);
      check(ok, kind, call);
    } else if (kind == "scatter" || kind == "scatterv") {
      const bool v = kind == "scatterv";
      std::vector<std::byte> in;
      if (R() == root)
        for (int r = 0; r < P(); ++r) {
          auto s = segment(r, v ? static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]) : m, call);
          in.insert(in.end(), s.begin(), s.end());
        }
      std::vector<std::byte> out(v ? mine : m);
      auto r = v ? run(comm, scatterv(comm, std::span<const std::byte>(in), std::span(out), std::span<const std::int64_t>(counts), root_of(root), opts))
                 : run(comm, scatter(comm, std::span<const std::byte>(in), std::span(out), root_of(root), opts));
      if (!r) return r;
      check(out == segment(R(), out.size(), call), kind, call);
    } else if (kind == "gather" || kind == "gatherv") {
      const bool v = kind == "gatherv";
      auto in = segment(R(), v ? mine : m, call);
      std::vector<std::byte> out(R() == root ? (v ? static_cast<std::size_t>(total) : p * m) : 0);
      auto r = v ? run(comm, gatherv(comm, std::span<const std::byte>(in), std::span(out), std::span<const std::int64_t>(counts), root_of(root), opts))
                 : run(comm, gather(comm, std::span<const std::byte>(in), std::span(out), root_of(root), opts));
      if (!r) return r;
      if (R() == root) {
        std::vector<std::byte> want;
        for (int q = 0; q < P(); ++q) {
          auto s = segment(q, v ? static_cast<std::size_t>(counts[static_cast<std::size_t>(q)]) : m, call);
          want.insert(want.end(), s.begin(), s.end());
        }
        check(out == want, kind, call);
      }
    } else if (kind == "allgather" || kind == "allgatherv") {
      const bool v = kind == "allgatherv";
      auto in = segment(R(), v ? mine : m, call);
      std::vector<std::byte> out(v ? static_cast<std::size_t>(total) : p * m), want;
      for (int q = 0; q < P(); ++q) {
        auto s = segment(q, v ? static_cast<std::size_t>(counts[static_cast<std::size_t>(q)]) : m, call);
        want.insert(want.end(), s.begin(), s.end());
      }
      auto r = v ? run(comm, allgatherv(comm, std::span<const std::byte>(in), std::span(out), std::span<const std::int64_t>(counts), opts))
                 : run(comm, allgather(comm, std::span<const std::byte>(in), std::span(out), opts));
      if (!r) return r;
      check(out == want, kind, call);
    } else if (kind == "alltoall") {
      // Block j of rank r's input, for rank j: what rank j finds in its block r.
      auto block = [&](int from, int to) { return segment(from * 64 + to, m, call); };
      std::vector<std::byte> in, out(p * m), want;
      for (int j = 0; j < P(); ++j) {
        auto s = block(R(), j);
        in.insert(in.end(), s.begin(), s.end());
        auto w = block(j, R());
        want.insert(want.end(), w.begin(), w.end());
      }
      if (auto r = run(comm, alltoall(comm, std::span<const std::byte>(in), std::span(out), opts)); !r) return r;
      check(out == want, kind, call);
    } else if (kind == "reduce" || kind == "allreduce") {
      const std::size_t k = n / 4 + 1;
      std::vector<std::int32_t> x(k), y(k);
      for (std::size_t j = 0; j < k; ++j) x[j] = R() + static_cast<std::int32_t>((j + call) % 1000);
      auto r = kind == "allreduce" ? run(comm, allreduce(comm, std::span<const std::int32_t>(x), std::span(y), ops::sum, opts))
                                   : run(comm, reduce(comm, std::span<const std::int32_t>(x), std::span(y), ops::sum, root_of(root), opts));
      if (!r) return r;
      if (kind == "allreduce" || R() == root) {
        bool ok = true;
        const int q = P();
        for (std::size_t j = 0; j < k; ++j) ok = ok && y[j] == q * (q - 1) / 2 + q * static_cast<std::int32_t>((j + call) % 1000);
        check(ok, kind, call);
      }
    } else if (kind == "reduce_scatter_block" || kind == "reduce_scatter") {
      const bool v = kind == "reduce_scatter";
      const std::size_t k = m / 4 + 1;
      std::vector<std::int64_t> c(p, static_cast<std::int64_t>(k));
      if (v)
        for (std::size_t j = 0; j < p; ++j) c[j] = static_cast<std::int64_t>(k + j);
      std::vector<std::int32_t> x, y(static_cast<std::size_t>(c[static_cast<std::size_t>(R())]));
      for (std::size_t b = 0; b < p; ++b)
        for (std::int64_t j = 0; j < c[b]; ++j) x.push_back(R() + static_cast<std::int32_t>(b * 7 + static_cast<std::size_t>(j) + call % 100));
      auto r = v ? run(comm, reduce_scatter(comm, std::span<const std::int32_t>(x), std::span(y), std::span<const std::int64_t>(c), ops::sum, opts))
                 : run(comm, reduce_scatter_block(comm, std::span<const std::int32_t>(x), std::span(y), ops::sum, opts));
      if (!r) return r;
      bool ok = true;
      const int q = P();
      for (std::size_t j = 0; j < y.size(); ++j)
        ok = ok && y[j] == q * (q - 1) / 2 + q * static_cast<std::int32_t>(static_cast<std::size_t>(R()) * 7 + j + call % 100);
      check(ok, kind, call);
    } else if (kind == "summation") {
      const auto count = static_cast<std::int64_t>(n / 8 + p);
      auto r = run(comm, summation<std::int64_t>(comm, count, [call](std::int64_t i) { return i + static_cast<std::int64_t>(call); }, ops::sum,
                                                 root_of(root), opts));
      if (!r) return fail(r.error());
      if (R() == root) check(*r == count * (count - 1) / 2 + count * static_cast<std::int64_t>(call), kind, call);
    } else {
      return fail(errc::invalid_argument);
    }
    return {};
  }
};

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"A rank of a job whose ranks are not in step: every collective in turn, roots moving, one rank slow.",
               "uneven_rank_helper"};
  int np = 0, rounds = 1, repeat = 1, fixed_root = -1, slow_rank = -1, slow_ms = 0, odd_rank = -1, odd_root = 0, timeout_ms = 60000;
  std::vector<std::size_t> sizes{1000, 1 << 20};
  std::vector<std::string> kinds{"broadcast", "scatter",   "scatterv", "gather",  "gatherv",
                                 "allgather", "allgatherv", "alltoall", "reduce", "allreduce",
                                 "reduce_scatter_block", "reduce_scatter", "summation"};
  std::string report_dir = ".", fabric;
  app.add_option("--np", np, "ranks to start on this machine")->check(CLI::Range(1, 4096));
  optcast::cli::add_fabric(app, fabric);
  app.add_option("--collectives", kinds, "which collectives, in turn")->delimiter(',');
  app.add_option("--bytes", sizes, "sizes, in turn")->delimiter(',')->transform(optcast::cli::byte_size());
  app.add_option("--rounds", rounds, "times through the list of collectives")->check(CLI::Range(1, 1 << 20));
  app.add_option("--repeat", repeat, "calls of each collective in a row")->check(CLI::Range(1, 1 << 20));
  app.add_option("--root", fixed_root, "the root of every rooted call (default: moving round the ranks)")->check(CLI::Range(-1, 1 << 20));
  app.add_option("--slow-rank", slow_rank, "rank that sleeps after each call")->check(CLI::Range(-1, 1 << 20));
  app.add_option("--slow-ms", slow_ms, "how long it sleeps")->check(CLI::Range(0, 1 << 20));
  app.add_option("--odd-rank", odd_rank, "rank that names another root (a mismatched call)")->check(CLI::Range(-1, 1 << 20));
  app.add_option("--odd-root", odd_root, "the root --odd-rank names")->check(CLI::NonNegativeNumber);
  app.add_option("--timeout-ms", timeout_ms, "collective deadline")->check(CLI::Range(1, 1 << 30));
  app.add_option("--report", report_dir, "where each rank writes its outcome");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto status = optcast::launch_local(argc, argv)) return *status;
  // A rank still joining when the job fails (a slow start under load, while the others
  // already found the mismatch) is told why by join(): its outcome too, so it reports it.
  std::optional<optcast::communicator> joined;
  try {
    joined.emplace(optcast::join(fabric));
  } catch (const optcast::setup_error& e) {
    if (const char* r = std::getenv("OPTCAST_RANK"))
      std::ofstream(report_dir + "/rank-" + r + ".txt") << "error " << e.code().value() << " " << optcast::describe(e.code(), e.what()) << "\n";
    throw;
  }
  auto& comm = *joined;
  caller c{comm, {.timeout = std::chrono::milliseconds(timeout_ms)}, odd_rank, odd_root, {}};
  result<void> r;
  std::uint64_t call = 0;
  for (int round = 0; round < rounds && r; ++round)
    for (std::size_t k = 0; k < kinds.size() && r; ++k)
      for (int i = 0; i < repeat; ++i) {
        // Each collective's calls in a row with one root, which runs ahead as far as its
        // collective lets it; the next collective's root is the next rank.
        const int root = fixed_root >= 0 ? fixed_root % comm.size() : static_cast<int>((k + static_cast<std::size_t>(round)) % static_cast<std::size_t>(comm.size()));
        r = c.one(kinds[k], sizes[call % sizes.size()], root, call);
        if (!r) break;
        ++call;
        if (comm.rank() == slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
      }
  std::ofstream report(report_dir + "/rank-" + std::to_string(comm.rank()) + ".txt");
  if (r) r = comm.leave();
  if (!r) {
    report << "error " << r.error().value() << " " << optcast::describe(r.error(), comm.failure_detail()) << "\n";
    return 1;
  }
  if (!c.wrong.empty()) {
    report << "error 0 " << c.wrong << "\n";
    return 1;
  }
  report << "ok " << call << "\n";
  return 0;
} catch (const optcast::setup_error& e) {
  std::fprintf(stderr, "uneven_rank_helper: %s\n", e.what());
  return 1;
}
