// The subcommands of the optcast tool, and how each reads its command line (CLI11).
#pragma once

#include <CLI/CLI.hpp>

namespace optcast::tools {

int cmd_simulate(int argc, char** argv);   // optcast simulate ...
int cmd_calibrate(int argc, char** argv);  // optcast calibrate ...
int cmd_trace(int argc, char** argv);      // optcast trace merge ...

// Each subcommand parses argv[1..] (argv[1], the subcommand, is its program name) with
// CLI11; checks that involve two options run in app.callback and throw
// CLI::ValidationError, so every usage error is printed alike and exits with status 2.

}  // namespace optcast::tools
