// How many cores this process may run on: its affinity mask, and its cgroup's CPU quota
// (cpu.max, cgroup v2: a container or a Slurm job step given 2 CPUs of a 64-core host).
// More ranks on a host than that, and a rank that spins waiting takes a core from the rank
// it waits for (the poller yields instead).
#pragma once

namespace optcast::detail {

int usable_cores() noexcept;

}  // namespace optcast::detail
