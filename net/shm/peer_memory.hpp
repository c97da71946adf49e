// Reading another process's memory straight into this one's (process_vm_readv, Linux's
// cross-memory attach, as Open MPI's vader uses): one copy where a ring or a socket makes
// two. The sender names the bytes; the receiver copies them and says so.
//
// Whether one process can read another (same kernel and process namespace, ptrace
// permission, no seccomp filter in the way) is proven once per link: the sender names 8
// bytes of its memory and what they hold (its probe), and the receiver reads them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace optcast::shm {

// This process's probe: where it is, and what it holds (fixed for the process's life,
// random, so that another process's memory does not hold it by chance). Calling it also
// lets the peers read this process where Yama restricts ptrace to descendants.
struct probe {
  std::uint64_t address = 0;
  std::uint64_t cookie = 0;
};
probe my_probe();

// Copies len bytes at `from` in process pid to `to`: 0, or the errno of the failure.
int read_peer(pid_t pid, std::uint64_t from, std::byte* to, std::uint64_t len);

// Whether process pid's probe at `address` holds `cookie`: 0 if so, else the errno of the
// failed read (EINVAL: it read, and holds something else).
int probe_reads(pid_t pid, std::uint64_t address, std::uint64_t cookie);

// Whether process pid is gone or on its way out. Its memory is torn down before it is
// gone, and a read meanwhile fails with EFAULT, not ESRCH: a peer dying mid-send, not one
// that named memory it does not have.
bool exiting(pid_t pid);

}  // namespace optcast::shm
