// Diagnostics that are not errors of a call: a stranger rejected on a listening port, a
// peer's connection closing, bootstrap progress. Level from OPTCAST_LOG (error, warn,
// info, debug, off; default warn); lines go to stderr unless a sink is installed.
#pragma once

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

}  // namespace optcast
