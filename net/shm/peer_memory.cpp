#include "peer_memory.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "core/little_endian.hpp"

namespace optcast::shm {

probe my_probe() {
  static const std::uint64_t cookie = [] {
    // Where Yama restricts ptrace to descendants (ptrace_scope 1), let the peers read.
#ifdef PR_SET_PTRACER
    ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
    std::random_device rd;
    return (std::uint64_t{rd()} << 32 | rd()) | 1;
  }();
  return {reinterpret_cast<std::uintptr_t>(&cookie), cookie};
}

int read_peer(pid_t pid, std::uint64_t from, std::byte* to, std::uint64_t len) {
  std::uint64_t done = 0;
  while (done < len) {
    iovec local{to + done, static_cast<std::size_t>(len - done)};
    iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(from + done)), static_cast<std::size_t>(len - done)};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EFAULT;  // a range that ends in unmapped memory reads short
    done += static_cast<std::uint64_t>(n);
  }
  return 0;
}

int probe_reads(pid_t pid, std::uint64_t address, std::uint64_t cookie) {
  std::array<std::byte, 8> got{};
  if (const int e = read_peer(pid, address, got.data(), got.size())) return e;
  return wire::get_u64(got.data()) == cookie ? 0 : EINVAL;
}

bool exiting(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const auto name_end = line.rfind(')');  // the name may hold spaces and parentheses
  if (name_end == std::string::npos) return false;
  std::istringstream fields(line.substr(name_end + 1));
  std::string state;
  long long skipped = 0;
  unsigned long long flags = 0;
  fields >> state >> skipped >> skipped >> skipped >> skipped >> skipped >> flags;  // ppid pgrp session tty tpgid
  if (!fields) return false;
  // PF_EXITING (0x4) is set as exit begins.
  return state == "Z" || state == "X" || (flags & 0x4) != 0;
}

}  // namespace optcast::shm
