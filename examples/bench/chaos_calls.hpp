// One random collective of the chaos benchmark, its result checked: a broadcast, an
// allreduce, a reduce, a scatter or an allgather of 1 B to 64 KiB, the same on every rank
// that draws from the same generator. Shared by the plain trials and the shrinking ones.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <cstdint>
#include <ostream>
#include <random>
#include <system_error>
#include <vector>

#include <optcast/optcast.hpp>

#include "bootstrap/spawn.hpp"

namespace optcast::bench {

inline long long now_ns() {  // CLOCK_MONOTONIC: one clock for every process of the machine
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// min / median / p99 / max of `v`, one decimal ("-" for none); and `v` as a JSON list.
inline std::string percentiles(std::vector<double> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.1f / %.1f / %.1f / %.1f", v.front(), v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)],
                v.back());
  return buf;
}

inline std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

inline std::byte pattern(std::size_t i, std::uint64_t k) { return static_cast<std::byte>((i * 131 + k * 7 + (i >> 9)) & 0xff); }

// Starts a trial's ranks (spawn_local_job with `args`; the job's store in `store`, where
// given, rather than on rank 0), waits until each has joined
// (its ready file in `dir`), then 50..550 ms more, so that the fault lands in running
// collectives rather than the bootstrap (which has its own timeout). The job.
inline local_job start_trial(int np, const std::vector<std::string>& args, const std::filesystem::path& dir, std::mt19937_64& rng,
                             launcher_store* store = nullptr) {
  auto job = spawn_local_job(np, args, store);
  const auto joined_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int r = 0; r < np; ++r)
    while (!std::filesystem::exists(dir / ("ready-" + std::to_string(r))) && std::chrono::steady_clock::now() < joined_by)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50 + static_cast<int>(rng() % 500)));
  return job;
}

// Call i on comm: 0 done and right; 1 failed (`ec` says why); 3 wrong data ("wrong ..."
// written to `out`).
inline int verified_call(communicator& comm, std::mt19937_64& rng, long i, const collective_options& o, std::ostream& out,
                         std::error_code& ec) {
  const int root = static_cast<int>(rng() % static_cast<std::uint64_t>(comm.size()));
  const std::size_t n = 1 + rng() % (64u << 10);
  const auto kind = rng() % 5;
  const auto P = static_cast<std::size_t>(comm.size()), R = static_cast<std::size_t>(comm.rank());
  const auto I = static_cast<std::uint64_t>(i);
  if (kind == 0) {  // broadcast
    std::vector<std::byte> b(n);
    if (comm.rank() == root)
      for (std::size_t j = 0; j < n; ++j) b[j] = pattern(j, I);
    if (auto r = run(comm, broadcast(comm, std::span(b), root, o)); !r) return ec = r.error(), 1;
    for (std::size_t j = 0; j < n; ++j)
      if (b[j] != pattern(j, I)) return out << "wrong broadcast " << i << "\n", 3;
  } else if (kind == 1 || kind == 2) {  // allreduce, reduce (sums of int32)
    std::vector<std::int32_t> x(n / 4 + 1), y(x.size());
    for (std::size_t j = 0; j < x.size(); ++j) x[j] = static_cast<std::int32_t>(comm.rank() + static_cast<int>(j % 1000));
    auto r = kind == 1 ? run(comm, allreduce(comm, std::span<const std::int32_t>(x), std::span(y), ops::sum, o))
                       : run(comm, reduce(comm, std::span<const std::int32_t>(x), std::span(y), ops::sum, root, o));
    if (!r) return ec = r.error(), 1;
    const int p = comm.size();
    if (kind == 1 || comm.rank() == root)
      for (std::size_t j = 0; j < y.size(); ++j)
        if (y[j] != p * (p - 1) / 2 + p * static_cast<int>(j % 1000)) return out << "wrong " << (kind == 1 ? "allreduce " : "reduce ") << i << "\n", 3;
  } else if (kind == 3) {  // scatter: rank j's segment of the root's buffer
    const std::size_t m = n / P + 1;
    std::vector<std::byte> in(comm.rank() == root ? P * m : 0), seg(m);
    for (std::size_t j = 0; j < in.size(); ++j) in[j] = pattern(j, I);
    if (auto r = run(comm, scatter(comm, std::span<const std::byte>(in), std::span(seg), root, o)); !r) return ec = r.error(), 1;
    for (std::size_t j = 0; j < m; ++j)
      if (seg[j] != pattern(R * m + j, I)) return out << "wrong scatter " << i << "\n", 3;
  } else {  // allgather: every rank's segment on every rank
    const std::size_t m = n / P + 1;
    std::vector<std::byte> mine(m), all(P * m);
    for (std::size_t j = 0; j < m; ++j) mine[j] = pattern(R * m + j, I);
    if (auto r = run(comm, allgather(comm, std::span<const std::byte>(mine), std::span(all), o)); !r) return ec = r.error(), 1;
    for (std::size_t j = 0; j < all.size(); ++j)
      if (all[j] != pattern(j, I)) return out << "wrong allgather " << i << "\n", 3;
  }
  return 0;
}

}  // namespace optcast::bench
