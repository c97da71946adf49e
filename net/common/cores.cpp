#include "cores.hpp"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace optcast::detail {

namespace {

// The tightest cpu.max quota from this process's cgroup up to the root, in cores (rounded
// up); 0 when none is set.
int cgroup_cores() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);  // cgroup v2's unified hierarchy
  if (path.empty()) return 0;
  int best = 0;
  for (;;) {
    std::ifstream f("/sys/fs/cgroup" + path + "/cpu.max");
    std::string quota;
    long long period = 0;
    if (f >> quota >> period && quota != "max" && period > 0) {
      const long long q = std::atoll(quota.c_str());
      const int cores = static_cast<int>(std::max(1LL, (q + period - 1) / period));
      best = best == 0 ? cores : std::min(best, cores);
    }
    if (path.empty() || path == "/") break;
    const auto slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? std::string("/") : path.substr(0, slash);
  }
  return best;
}

}  // namespace

int usable_cores() noexcept {
  static const int n = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    int cores = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    try {
      if (const int q = cgroup_cores(); q > 0) cores = std::min(cores, q);
    } catch (...) {  // an unreadable cgroup file: the mask alone
    }
    return std::max(cores, 1);
  }();
  return n;
}

}  // namespace optcast::detail
