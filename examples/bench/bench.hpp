// optcast-bench's subcommands and what they share. Built against the installed library
// only (optcast/*.hpp), as any program of a user would be.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include <CLI/CLI.hpp>
#include "cli.hpp"

namespace optcast::bench {

int broadcast_cmd(int argc, char** argv);  // optcast-bench broadcast
int p2p_cmd(int argc, char** argv);        // optcast-bench p2p
int model_cmd(int argc, char** argv);      // optcast-bench model
int rounds_cmd(int argc, char** argv);     // optcast-bench rounds
int coll_cmd(int argc, char** argv);       // optcast-bench coll
int chaos_cmd(int argc, char** argv);      // optcast-bench chaos
int sim_cmd(int argc, char** argv);        // optcast-bench sim
int flood_cmd(int argc, char** argv);      // optcast-bench flood
int percall_cmd(int argc, char** argv);    // optcast-bench percall

using clock_type = std::chrono::steady_clock;

inline double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Timed runs per size when the user gives none: more for small messages, whose times
// are short and noisy.
inline int iterations_for(std::size_t bytes, int requested) {
  if (requested > 0) return requested;
  return bytes <= (64u << 10) ? 50 : bytes <= (4u << 20) ? 15 : 5;
}

// The --sizes option every size sweep takes.
inline CLI::Option* add_sizes(CLI::App& app, std::vector<std::size_t>& sizes, const char* help) {
  return app.add_option("--sizes", sizes, help)->delimiter(',')->transform(cli::byte_size())->capture_default_str();
}

}  // namespace optcast::bench
