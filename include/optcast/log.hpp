// Diagnostics that are not errors of a call: a stranger rejected on a listening port, a
// peer's connection closing, bootstrap progress. Level from OPTCAST_LOG (error, warn,
// info, debug, off; default warn); lines go to stderr unless a sink is installed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace optcast {

enum class log_level { debug, info, warn, error, off };

bool log_enabled(log_level l) noexcept;
void log(log_level l, std::string_view message);
// Replaces the sink (nullptr restores stderr); returns the previous one.
using log_sink = std::function<void(log_level, std::string_view)>;
log_sink set_log_sink(log_sink sink);
void set_log_level(log_level l) noexcept;

// A byte count as people read it: "64 MiB", "1536 B" (a binary unit only where the
// count is an exact multiple of it, so nothing printed is rounded).
std::string format_bytes(std::uint64_t bytes);

}  // namespace optcast
