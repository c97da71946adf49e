// One collective run on P simulated ranks under a cost model, every rank's result checked:
// what `optcast simulate` prints, the registry test walks, and any program can call to
// see what an algorithm does under a model before running it for real.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optcast/algorithm.hpp"
#include "optcast/bounds.hpp"
#include "optcast/error.hpp"
#include "optcast/net/sim.hpp"

namespace optcast::sim {

struct run_request {
  collective coll = collective::broadcast;
  algorithm alg = algorithm::automatic;
  int p = 1;
  // broadcast, reduce, allreduce: the message; allgather, scatter, gather: per rank;
  // alltoall: per pair of ranks; allgatherv, reduce_scatter(_block): in total;
  // summation: the operand count n; stream: per item.
  std::uint64_t bytes = 1;
  int blocks = 0;  // 0: the library's own choice (stream: the number of items, default 1)
  int root = 0;
  std::string counts = "even";  // allgatherv, reduce_scatter: even, skewed (every 4th rank 0), one
  // Ranks per host (in blocks: host h has ranks h n .. h n + n - 1; p a multiple of n) and
  // rails per host, for the algorithms that decompose by host (world_options::layout).
  int per_host = 1, rails = 1;
  sim::model model = sim::model::rounds();
  // Buffers per rank and every result checked; off (or when they would need more than
  // 2 GiB), one shared buffer and timing only.
  bool verify = true;
  bool explain = false;  // broadcast, allreduce: the automatic choice's predictions in `explained`
  // Keep every message in rep.log (and idle spans in rep.local), each labelled with the
  // part and block of the result it delivers where that is a result buffer: for
  // pictures of the run (optcast/picture.hpp).
  bool record = false;
  // A progress report for long runs (world_options::progress).
  std::function<void(double now, std::uint64_t messages)> progress;
};

struct run_result {
  algorithm alg;   // what ran (automatic resolved)
  int blocks;      // with this block count
  bool ok = true;  // every rank succeeded, and (when verified) holds what it should
  std::string error;
  bool verified = false;
  report rep;
  std::vector<std::pair<std::string, double>> measured;  // what the run itself reports (stream)
  std::optional<proven_time> paper;                       // the time the paper proves, where stated
  std::optional<proven_time> hosts;                       // with hosts: what their rails must carry (hosts_bound)
  bool paper_met = true;
  std::string explained;
  double wall_seconds = 0;
};

// The run, or errc::invalid_argument with the reason in *why where the library would
// refuse the request (an algorithm of another collective, too few ports, ...).
result<run_result> simulate(run_request req, std::string* why = nullptr);

// The per-rank element counts `counts` names, adding up to `total`.
std::vector<std::size_t> distribute(std::uint64_t total, int p, const std::string& counts);

}  // namespace optcast::sim
