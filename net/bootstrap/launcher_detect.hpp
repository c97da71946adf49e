// What a job learns from the program's surroundings: which launcher started it (and so
// its rank, size, job id and store), and which of the host's addresses to advertise.
// job_config::from_env (optcast/net/job.hpp) puts these together; they are here on their
// own for tools and tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "optcast/error.hpp"
#include "store_url.hpp"

namespace optcast::launcher {

// An environment to read: the variable's value, or nullptr when it is not set.
using getenv_fn = std::function<const char*(const char*)>;

// What one launcher says about this process; fields it does not know stay empty.
struct found {
  std::string name;          // "Slurm", "torchrun", "PMIx"; empty: no launcher found
  std::string rank, size;    // as the launcher wrote them
  std::string store;         // where the ranks meet (a store URL, see parse_store_url)
  std::uint64_t job_id = 0;  // 0: none (rank 0 draws one, if the store can hand it out)
  std::string job_name;      // the job as the launcher names it, for messages
};

// The launchers looked for, in this order, the first whose variables are set:
//   PMIx     PMIX_RANK and PMIX_NAMESPACE (Open MPI's mpirun, prterun, srun --mpi=pmix)
//   torchrun RANK and WORLD_SIZE, with MASTER_ADDR and MASTER_PORT for the store
//   Slurm    SLURM_PROCID and SLURM_STEP_ID (srun; not a batch script's own shell)
// Throws setup_error when a launcher's variables are set but not all or not well formed.
found detect(const getenv_fn& env);
// One line naming every variable detect() looks for, for "nothing found" errors.
std::string looked_for();

// Slurm's host list notation, expanded in order: "h[0-3,7],gpu[01-02],x" is h0 h1 h2 h3
// h7 gpu01 gpu02 x (zero padding kept; several bracket groups in one name multiply).
result<std::vector<std::string>> expand_hostlist(std::string_view list);

// Where OPTCAST_STORE points (store_url, parse_store_url): store_url.hpp.

// The host's interfaces' addresses, in the kernel's order.
struct interface_address {
  std::string name;
  std::string address;  // text form; IPv6 link-local ones carry their %scope
  bool v6 = false;
  bool loopback = false;
  bool up = false;
  bool link_local = false;
};
std::vector<interface_address> interfaces();

// OPTCAST_IFNAME's language, like NCCL_SOCKET_IFNAME's: a comma-separated list of names,
// each matching the interfaces whose name begins with it ("eth" matches eth0 and eth1),
// or exactly with a leading '=' ("=eth0"); a leading '^' turns the whole list into the
// interfaces not to use. Of the interfaces that are up and match, the first (in the
// list's order) with an address of `family` (4 or 6; 0: IPv4 if there is one, else
// IPv6), global addresses before IPv6 link-local ones. Empty `spec`: any interface but
// loopback, falling back to loopback when there is no other. The error names what the
// host has.
result<std::string> choose_address(std::string_view spec, int family, std::string* why = nullptr);

// The rails: the addresses of every network interface this rank sends through, rail i
// on interface i (port i of the k-port model), `primary` (the advertised address) among
// them. `spec` in OPTCAST_IFNAME's language: each up interface it matches is a rail, in
// the list's order (interfaces matching one prefix in name order). Empty `spec`: the
// primary's interface and every other up interface of its kind (its name without the
// trailing digits: eth0 and eth1, not docker0), in name order, so that rail i of every
// host is its interface of the same name. One address each, of the primary's family.
// Without a matching interface (a loopback or an unlisted primary): `primary` alone.
std::vector<std::string> rail_addresses(std::string_view spec, const std::string& primary);

// `host` as an address: a literal is returned as it is, a name resolved (IPv4 first
// unless family is 6).
result<std::string> resolve(const std::string& host, int family, std::string* why = nullptr);
bool is_loopback(const std::string& address);

// Who this rank's host is, as far as loopback addresses go: two ranks with the same
// identity reach each other's loopback (same machine, same network namespace).
std::string host_identity();

}  // namespace optcast::launcher
