#include "optcast/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace optcast {

namespace {

log_level from_env() noexcept {
  const char* v = std::getenv("OPTCAST_LOG");
  if (!v) return log_level::warn;
  const std::string_view s(v);
  if (s == "debug") return log_level::debug;
  if (s == "info") return log_level::info;
  if (s == "error") return log_level::error;
  if (s == "off") return log_level::off;
  return log_level::warn;
}

std::atomic<log_level>& level() {
  static std::atomic<log_level> l{from_env()};
  return l;
}

struct sink_holder {
  std::mutex mu;
  log_sink sink;
};
sink_holder& holder() {
  static sink_holder h;
  return h;
}

const char* name(log_level l) {
  switch (l) {
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warn: return "warning";
    case log_level::error: return "error";
    case log_level::off: break;
  }
  return "";
}

}  // namespace

bool log_enabled(log_level l) noexcept { return l >= level().load(std::memory_order_relaxed) && l != log_level::off; }

void log(log_level l, std::string_view message) {
  if (!log_enabled(l)) return;
  auto& h = holder();
  std::lock_guard lock(h.mu);
  if (h.sink) {
    h.sink(l, message);
    return;
  }
  std::fprintf(stderr, "optcast %s: %.*s\n", name(l), static_cast<int>(message.size()), message.data());
}

log_sink set_log_sink(log_sink sink) {
  auto& h = holder();
  std::lock_guard lock(h.mu);
  return std::exchange(h.sink, std::move(sink));
}

void set_log_level(log_level l) noexcept { level().store(l); }

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 4 && static_cast<std::uint64_t>(v) % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g %s", v, units[u]);
  return buf;
}

}  // namespace optcast
