// Command-line conventions of optcast's programs (the examples, the tools, the tests'
// helpers), for a program of one's own that takes sizes and rank counts the same way:
// copy it (it needs CLI11, header-only; the library neither links it nor installs this
// header). A size is written as a user would (1000, 64KiB, 4MiB, 1G); a negative one, one
// past its range or one larger than this machine's memory is refused while the command
// line is read, before any rank starts, naming the option and the range.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "optcast/fabrics.hpp"

namespace optcast::cli {

// Bytes of physical memory of this machine (0 if it cannot tell).
inline std::uint64_t machine_memory() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

// "4 MiB", "1000 B", "23.4 GiB": for messages about sizes.
inline std::string size_text(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (u < 6 && v >= 1024) v /= 1024, ++u;
  char out[32];
  std::snprintf(out, sizeof out, v == static_cast<double>(static_cast<std::uint64_t>(v)) ? "%.0f %s" : "%.1f %s", v, units[u]);
  return out;
}

// A size in bytes within [min, max]; max 0: up to this machine's memory.
inline CLI::Validator byte_size(std::uint64_t min = 0, std::uint64_t max = 0) {
  const std::uint64_t top = max ? max : machine_memory() ? machine_memory() : UINT64_MAX;
  return CLI::Validator(
      [min, top, memory = max == 0](std::string& s) -> std::string {
        std::string t = s;
        std::size_t i = 0;
        while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
        if (i < t.size() && t[i] == '-') return "a size cannot be negative: " + s;
        if (std::string err = CLI::AsSizeValue(true)(t); !err.empty()) return err;
        std::uint64_t v = 0;
        try {
          v = std::stoull(t);
        } catch (const std::exception&) {
          return "not a size: " + s;
        }
        if (v < min) return s + " is less than the smallest size allowed, " + size_text(min);
        if (v > top)
          return s + " is more than " + (memory ? "this machine's memory, " : "the largest size allowed, ") + size_text(top);
        s = t;
        return {};
      },
      "SIZE", "byte size");
}

// `ranks` ranks on this machine each holding `bytes` (times `copies` buffers): empty if
// that fits this machine's memory, else why not (for a CLI::ValidationError).
inline std::string fits_memory(long long ranks, std::uint64_t bytes, std::uint64_t copies = 1) {
  const std::uint64_t mem = machine_memory();
  if (!mem || ranks <= 0) return {};
  const auto r = static_cast<std::uint64_t>(ranks);
  if (bytes > mem / r / copies)
    return std::to_string(ranks) + " ranks on this machine holding " + std::to_string(copies) + " x " + size_text(bytes) +
           " each need more than its memory (" + size_text(mem) + ")";
  return {};
}

// --fabric NAME: one of the fabric table's (optcast/fabrics.hpp), or of `in_process`
// (the in-process worlds a program also offers, "local", "sim"), named in its help; `how`
// says how the table's fabrics run their ranks in this program.
inline CLI::Option* add_fabric(CLI::App& app, std::string& name, const std::vector<std::string>& in_process = {},
                               const std::string& how = "one process per rank: start with --np N, or under a launcher") {
  auto names = in_process;
  std::string help;
  for (const auto& n : in_process) help += n + ", ";
  if (!in_process.empty()) help = help.substr(0, help.size() - 2) + " (ranks in this process), or ";
  help += fabric_names_text() + " (" + how + ")";
  for (auto& n : fabric_names()) names.push_back(n);
  return app.add_option("--fabric", name, help)->check(CLI::IsMember(names))->capture_default_str();
}

}  // namespace optcast::cli
