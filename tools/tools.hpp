// The subcommands of the optcast tool, and how each reads its command line (CLI11).
#pragma once

#include <CLI/CLI.hpp>

#include <span>
#include <string>

namespace optcast::tools {

int cmd_simulate(int argc, char** argv);   // optcast simulate ...
int cmd_calibrate(int argc, char** argv);  // optcast calibrate ...
int cmd_trace(int argc, char** argv);      // optcast trace merge|latency ...
int cmd_store(int argc, char** argv);      // optcast store --np N ...
int cmd_pingpong(int argc, char** argv);   // optcast pingpong [--bytes LIST]
int trace_latency(const std::string& merged_path, bool as_json);  // trace_latency.cpp

// Träff's Algorithms 3-6 transcribed as printed (schedule_reference.cpp), the yardstick
// of `optcast verify --timing`: rank r's receive and send schedules for root 0 (q entries
// each), and the seconds to compute both for every rank of p (sink keeps the work).
void reference_schedule(int p, int r, std::span<int> recv, std::span<int> send);
double time_reference_schedules(int p, long long& sink);

// Each subcommand parses argv[1..] (argv[1], the subcommand, is its program name) with
// CLI11; checks that involve two options run in app.callback and throw
// CLI::ValidationError, so every usage error is printed alike and exits with status 2.

}  // namespace optcast::tools
